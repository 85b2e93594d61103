"""A runner etdeploy did not build: upstream's executor_runner or a bundle
directory given with --runner."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from etdeploy.errors import UsageError
from etdeploy.runner_build.runner_bundle import (
    BUNDLE_MANIFEST,
    EXECUTABLE,
    KIND_EXTERNAL,
    RunnerBundle,
    read_bundle,
)

if TYPE_CHECKING:
    pass

# --- an upstream runner -----------------------------------------------------------------

# ELF e_machine values (the System V gABI's registry) in Android's ABI names.
_ELF_MACHINES = {62: "x86_64", 183: "arm64-v8a", 40: "armeabi-v7a", 3: "x86"}


def binary_abi(path: Path) -> str | None:
    """The ABI an executable is built for, read from its header; None when unknown."""
    try:
        with path.open("rb") as handle:
            header = handle.read(20)
    except OSError:
        return None
    if header[:4] == b"\x7fELF" and len(header) >= 20:
        byteorder: Literal["little", "big"] = "little" if header[5] == 1 else "big"
        return _ELF_MACHINES.get(int.from_bytes(header[18:20], byteorder))
    # Mach-O 64-bit (little-endian magic 0xfeedfacf), as a macOS or iOS build is.
    if header[:4] == b"\xcf\xfa\xed\xfe":
        cpu = int.from_bytes(header[4:8], "little")
        return {0x01000007: "darwin-x86_64", 0x0100000C: "darwin-arm64"}.get(cpu)
    return None


def external_runner(path: str | Path, *, libraries: Sequence[str | Path] = ()) -> RunnerBundle:
    """Use a runner built elsewhere, such as upstream's executor_runner (`--runner PATH`).

    It speaks upstream's flags only (flavor "upstream"). `libraries` are shared
    libraries that must travel with it; they must sit in the same directory.
    """
    executable = Path(path).expanduser().resolve()
    if not executable.is_file():
        raise UsageError(
            f"runner {path} does not exist", "pass the path of an executor_runner binary"
        )
    if not os.access(executable, os.X_OK):
        raise UsageError(f"runner {path} is not executable", f"chmod +x {path}")
    files = [executable]
    for library in libraries:
        library_path = Path(library).expanduser().resolve()
        if library_path.parent != executable.parent or not library_path.is_file():
            raise UsageError(
                f"runner library {library} is not a file beside {executable.name}",
                "put the runner and its libraries in one directory",
            )
        files.append(library_path)
    abi = binary_abi(executable)
    return RunnerBundle(
        abi=abi or "unknown",
        directory=executable.parent,
        executable=executable.name,
        files=tuple(files),
        flavor="upstream",
        key="",
        kind=KIND_EXTERNAL,
        fresh=False,
        info={"external": str(executable)},
    )


def runner_from_path(path: Path) -> RunnerBundle:
    """`--runner PATH`: a bundle directory (ours, from `etdeploy runner build`,
    holding bundle.json) or an executor_runner binary (upstream's flags), with
    the shared libraries beside it."""
    path = path.expanduser()
    if path.is_dir():
        bundle = read_bundle(path.resolve(), fresh=False)
        if bundle is None:
            raise UsageError(
                f"{path} is not a runner bundle (no complete {BUNDLE_MANIFEST})",
                "pass the directory `etdeploy runner build` printed, or an executor_runner binary",
            )
        return bundle
    if path.name == EXECUTABLE and (bundle := read_bundle(path.resolve().parent, fresh=False)):
        return bundle  # our runner named by its binary: keep its libraries and flags
    # A dynamically linked build loads its libraries from beside it ($ORIGIN), so
    # they travel with it; upstream's usual static build has none.
    siblings = sorted(
        p for p in path.resolve().parent.iterdir()
        if p.is_file() and (".so" in p.suffixes or p.suffix == ".dylib")
    ) if path.is_file() else []  # fmt: skip
    return external_runner(path, libraries=siblings)

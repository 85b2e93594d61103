"""Making an installed runner bundle self-contained with its own glibc.

The runner and its libraries are ordinary glibc Linux binaries. Copied beside them:
every library they load, glibc's included, and glibc's loader; in the runner's
place a launcher script that starts the program through that loader:

    LOADER --inhibit-cache --library-path DIR DIR/etdeploy_runner.bin ARGS...

so the bundle needs nothing from the device but a Linux kernel of its CPU and
/bin/sh: not the device's libc (Android's bionic, an older glibc, musl), not its
loader. The arm64 bundle (arm64.py, cross-compiled) and the x86_64 one (x86_64.py,
this machine's build) are made so. Nothing here imports torch or executorch.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from etdeploy.atomic import atomic_write
from etdeploy.errors import RunnerError

# The launcher keeps the runner's name; the ELF program beside it takes this one.
PROGRAM = "etdeploy_runner.bin"

Progress = Callable[[str], None]
# Where the toolchain keeps a target library (libc.so.6, libstdc++.so.6...), or None.
FindLibrary = Callable[[str], Path | None]

# Runs the program through the loader beside it. /bin/sh: every Linux has it,
# and current AOSP links /bin to /system/bin (system/core/rootdir/Android.mk,
# read 2026-12-03). --library-path takes a colon-separated list, so a directory
# with a colon cannot be named. --argv0 needs glibc 2.33 (the bundled ones are newer).
_LAUNCHER = """#!/bin/sh
# etdeploy runner: {what} (etdeploy/runner_build/glibc_bundle.py).
# {program} is linked against the glibc in this directory; running it through
# that loader makes it independent of the device's libc and loader.
case $0 in */*) here=${{0%/*}} ;; *) here=. ;; esac
case $here in *:*) echo "error: the runner directory contains ':' ($here); move it" >&2; exit 126 ;; esac
loader="$here/{loader}"
# A transport may push libraries without the execute bit; the loader needs it.
[ -x "$loader" ] || chmod 755 "$loader" || exit 126
# The device's preloads (Termux's libtermux-exec, say) are not for this libc.
unset LD_PRELOAD
exec "$loader" --inhibit-cache --library-path "$here" --argv0 "$0" "$here/{program}" "$@"
"""


@dataclass(frozen=True)
class GlibcToolchain:
    """What self-containing a bundle needs to know of the toolchain that built it."""

    loader: str  # the loader's file name: ld-linux-aarch64.so.1, ld-linux-x86-64.so.2
    readelf: str  # a readelf that reads the bundle's ELF files
    find_library: FindLibrary  # where the toolchain keeps a target library
    what: str  # the bundle in a few words, for the launcher's comment and errors
    install_hint: str  # how to get a library the toolchain lacks


def elf_facts(readelf: str, path: Path) -> tuple[list[str], str | None]:
    """(NEEDED entries, program interpreter) of an ELF file."""
    out = subprocess.run(
        [readelf, "-d", "-l", "-W", str(path)], capture_output=True, text=True, check=False
    )
    if out.returncode != 0:
        raise RunnerError(f"readelf cannot read {path.name}", log=out.stderr[-2000:])
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out.stdout)
    interpreter = re.search(r"Requesting program interpreter: ([^\]]+)\]", out.stdout)
    return needed, interpreter.group(1) if interpreter else None


def self_contain(
    bundle: Path, executable: str, toolchain: GlibcToolchain, progress: Progress
) -> list[str]:
    """Copy every library the bundle's files load (glibc's and the loader included)
    beside them, rename the runner to PROGRAM and put the launcher in its place.
    Returns the names of the libraries copied from the toolchain."""
    runner = bundle / executable
    _, interpreter = elf_facts(toolchain.readelf, runner)
    if interpreter is None or Path(interpreter).name != toolchain.loader:
        raise RunnerError(
            f"the runner for {toolchain.what} asks for the loader {interpreter}, "
            f"not {toolchain.loader}"
        )
    progress(f"copying glibc beside the runner ({toolchain.what})")
    copied: list[str] = []
    todo = [path for path in bundle.iterdir() if path.is_file()]
    wanted = [toolchain.loader]
    while todo or wanted:
        if todo:
            needed, _ = elf_facts(toolchain.readelf, todo.pop())
            wanted += needed
            continue
        name = wanted.pop()
        if (bundle / name).exists():
            continue
        source = toolchain.find_library(name)
        if source is None:
            raise RunnerError(
                f"the runner for {toolchain.what} needs {name}, which its toolchain cannot find",
                toolchain.install_hint.format(library=name.split(".so")[0]),
            )
        shutil.copyfile(source, bundle / name)
        copied.append(name)
        todo.append(bundle / name)
    (bundle / toolchain.loader).chmod(0o755)
    runner.rename(bundle / PROGRAM)
    launcher = _LAUNCHER.format(what=toolchain.what, program=PROGRAM, loader=toolchain.loader)
    atomic_write(runner, launcher.encode())
    runner.chmod(0o755)
    return sorted(copied)


def compiler_library(cxx: str, name: str) -> Path | None:
    """Where the compiler `cxx` keeps the target library `name`, as its linker
    would find it; None when it has none."""
    out = subprocess.run(
        [cxx, f"-print-file-name={name}"], capture_output=True, text=True, check=False, timeout=30
    )
    # gcc prints the bare name back when it finds nothing.
    path = Path(out.stdout.strip())
    return path.resolve() if out.returncode == 0 and path.is_absolute() and path.exists() else None


def glibc_release(libc: Path) -> tuple[int, int] | None:
    """The glibc version libc.so.6 announces in its banner ("release version 2.36.")."""
    match = re.search(rb"release version (\d+)\.(\d+)", libc.read_bytes())
    return (int(match.group(1)), int(match.group(2))) if match else None

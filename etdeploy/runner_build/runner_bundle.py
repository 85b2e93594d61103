"""What a runner bundle is: its kinds, its files, its bundle.json."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass

# "aarch64" is arm64 Linux: the same bundle arm64-v8a gets without an NDK build.
ABIS = ("host", "x86_64", "arm64-v8a", "aarch64")
# How a bundle was built: against this machine's wheel; with the Android NDK
# against an ExecuTorch Android install; cross-compiled against the aarch64 wheel
# with its own glibc (runner_build.KIND_ARM64); the host build with its own glibc for
# an x86_64 phone (runner_build.x86_64); or someone else's binary (--runner).
KIND_HOST = "host"
KIND_NDK = "android-ndk"
KIND_ARM64 = "arm64-glibc"
KIND_X86_64 = "x86_64-glibc"
KIND_EXTERNAL = "external"
KINDS = (KIND_HOST, KIND_NDK, KIND_ARM64, KIND_X86_64, KIND_EXTERNAL)
EXECUTABLE = "etdeploy_runner"
BUNDLE_MANIFEST = "bundle.json"
BUNDLE_SCHEMA = "etdeploy.runner_bundle/1"


Progress = Callable[[str], None]


@dataclass(frozen=True)
class RunnerBundle:
    """A runner ready to deploy: `executable` (a file name) and the shared
    libraries it loads, all in `directory`; `files` lists every one of them."""

    abi: str
    directory: Path
    executable: str
    # Every file a device needs, executable included, as paths under `directory`.
    files: tuple[Path, ...]
    flavor: str = "etdeploy"
    key: str = ""
    kind: str = KIND_HOST
    # True when this call built it; False for a cache hit or an external binary.
    fresh: bool = False
    info: dict[str, object] = field(default_factory=dict, compare=False)

    @property
    def executable_path(self) -> Path:
        return self.directory / self.executable

    @property
    def libraries(self) -> tuple[Path, ...]:
        return tuple(path for path in self.files if path.name != self.executable)


def read_bundle(directory: Path, *, fresh: bool) -> RunnerBundle | None:
    try:
        manifest = json.loads((directory / BUNDLE_MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    if manifest.get("schema") != BUNDLE_SCHEMA:
        return None
    files = tuple(directory / name for name in manifest.get("files", ()))
    if not files or not all(path.is_file() for path in files):
        return None
    # Bundles from before kinds were recorded: an NDK build names its compiler so.
    ndk = str(manifest.get("compiler", "")).startswith("android-ndk")
    legacy_kind = KIND_NDK if ndk else KIND_HOST
    return RunnerBundle(
        abi=str(manifest["abi"]),
        directory=directory,
        executable=str(manifest["executable"]),
        files=files,
        flavor=str(manifest.get("flavor", "etdeploy")),
        key=str(manifest["key"]),
        kind=str(manifest.get("kind") or legacy_kind),
        fresh=fresh,
        info=manifest,
    )

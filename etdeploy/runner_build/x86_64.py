"""The x86_64 runner bundle without the NDK, for Android emulators and x86_64 phones.

This machine's runner (the host build, against the installed x86_64 wheel) is
already code for the right CPU; what an Android x86_64 device lacks is glibc and
its loader (it has bionic). So this bundle is the host bundle, copied, made
self-contained the way the arm64 one is (glibc_bundle.py): the glibc it was linked
against, its loader, and a launcher in the runner's place. No second compile: the
program is the host build's, byte for byte (its --describe says kind "host"; the
bundle's bundle.json says KIND).

Built on a glibc Linux x86_64 machine only. Cached under
cache_dir("runners")/x86_64-glibc-<key>, the key covering the host bundle's key,
this recipe's revision and the glibc copied in, so a rebuilt host runner or a
system glibc update makes a new bundle. Nothing here imports torch or executorch.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from etdeploy.errors import UsageError
from etdeploy.paths import cache_dir
from etdeploy.runner_build.bundle import (
    BUNDLE_MANIFEST,
    BUNDLE_SCHEMA,
    KIND_X86_64,
    Progress,
    RunnerBundle,
    read_bundle,
)
from etdeploy.runner_build.glibc_bundle import (
    PROGRAM,
    GlibcToolchain,
    compiler_library,
    glibc_release,
    self_contain,
)
from etdeploy.runner_build.plans import DEFAULT_BACKENDS, ndk_configured

KIND = KIND_X86_64
ABI = "x86_64"
LOADER = "ld-linux-x86-64.so.2"
# Bumped when what this module puts in a bundle changes.
REVISION = 1


def applies(abi: str) -> bool:
    """Whether `ensure_runner(abi)` means this bundle: the Android x86_64 ABI with
    no NDK build set up (with one, the NDK build against bionic is preferred, as
    for arm64-v8a)."""
    return abi == ABI and not ndk_configured()


def host_toolchain() -> GlibcToolchain:
    """This machine's compiler and readelf, which built the host runner."""
    if platform.system() != "Linux" or platform.machine().lower() not in ("x86_64", "amd64"):
        raise UsageError(
            f"the x86_64 bundle is made from this machine's runner, and this is "
            f"{platform.system()} {platform.machine()}, not x86_64 Linux",
            "build it on an x86_64 Linux machine, or build the Android runner with the NDK "
            "(android_harness/README.md)",
        )
    named = os.environ.get("CXX")
    cxx = shutil.which(named) if named else shutil.which("c++") or shutil.which("g++")
    readelf = shutil.which("readelf")
    if cxx is None or readelf is None:
        missing = " and ".join(
            what for what, found in ((named or "c++", cxx), ("readelf", readelf)) if not found
        )
        raise UsageError(
            f"the x86_64 bundle is made with this machine's {missing}, which {'is' if ' and ' not in missing else 'are'} not installed",
            "apt-get install g++ binutils (or point CXX at a C++ compiler)",
        )
    return GlibcToolchain(
        loader=LOADER,
        readelf=readelf,
        find_library=lambda name: compiler_library(cxx, name),
        what="the x86_64 bundle with its own glibc",
        install_hint="install this machine's {library} (apt-cache search {library})",
    )


def cached_bundle(
    *, kernels: Sequence[str] = (), backends: Sequence[str] = DEFAULT_BACKENDS
) -> RunnerBundle | None:
    """The bundle `ensure_bundle` would return, if the host runner and it are built."""
    from etdeploy.runner_build.build import cached_runner

    host = cached_runner("host", kernels=kernels, backends=backends)
    if host is None:
        return None
    toolchain = host_toolchain()
    return read_bundle(cache_dir("runners") / _name(_key(host, toolchain)), fresh=False)


def ensure_bundle(
    *,
    rebuild: bool = False,
    progress: Progress | None = None,
    kernels: Sequence[str] = (),
    backends: Sequence[str] = DEFAULT_BACKENDS,
) -> RunnerBundle:
    """The x86_64 bundle: the host runner (built if the cache lacks it) copied and
    made self-contained, once per host bundle and glibc; under a lock, staged in a
    temporary directory renamed into place, so nobody sees half a bundle."""
    from etdeploy.runner_build.build import cached_or_built, ensure_runner

    report: Progress = progress or (lambda _message: None)
    toolchain = host_toolchain()
    host = ensure_runner(
        "host", rebuild=rebuild, progress=report, kernels=kernels, backends=backends
    )
    key = _key(host, toolchain)
    return cached_or_built(
        _name(key),
        lambda staging: _assemble(host, key, toolchain, staging / "bundle", report),
        rebuild=rebuild,
        progress=report,
    )


def _key(host: RunnerBundle, toolchain: GlibcToolchain) -> str:
    libc = toolchain.find_library("libc.so.6")
    glibc = glibc_release(libc) if libc is not None else None
    parts = (f"host={host.key}", f"revision={REVISION}", f"glibc={glibc}", f"kind={KIND}")
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def _name(key: str) -> str:
    return f"{KIND}-{key[:16]}"


def _assemble(
    host: RunnerBundle, key: str, toolchain: GlibcToolchain, bundle: Path, progress: Progress
) -> Path:
    """The host bundle's files copied into `bundle`, made self-contained, described."""
    started = time.monotonic()
    progress(f"making the {KIND} bundle from the host runner")
    bundle.mkdir()
    for path in host.files:
        shutil.copy2(path, bundle / path.name)
    copied = self_contain(bundle, host.executable, toolchain, progress)
    libc = toolchain.find_library("libc.so.6")
    glibc = glibc_release(libc) if libc is not None else None
    files = sorted(p.name for p in bundle.iterdir() if p.is_file())
    manifest = {
        # Not the host's digests: the program here is patched (self_contain), and a
        # record of the host's bytes failed the cache check of every later run.
        **{
            k: v
            for k, v in host.info.items()
            if k not in ("files", "build_id", "built_at", "sha256")
        },
        "schema": BUNDLE_SCHEMA,
        "abi": ABI,
        "key": key,
        "kind": KIND,
        "executable": host.executable,
        "files": files,
        "sha256": {
            name: hashlib.sha256((bundle / name).read_bytes()).hexdigest() for name in files
        },
        "program": PROGRAM,
        "loader": LOADER,
        "glibc": f"{glibc[0]}.{glibc[1]}" if glibc else "unknown",
        "system_libraries": copied,
        # The program is the host build's: the bundle it was copied from.
        "host_bundle_key": host.key,
        "build_seconds": round(time.monotonic() - started, 3),
        "build_id": uuid.uuid4().hex,
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    (bundle / BUNDLE_MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return bundle

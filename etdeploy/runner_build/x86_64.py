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
from pathlib import Path

from etdeploy.digests import sha256_file
from etdeploy.errors import UsageError
from etdeploy.runner_build.glibc_bundle import (
    PROGRAM,
    GlibcToolchain,
    compiler_library,
    glibc_release,
    self_contain,
)
from etdeploy.runner_build.plans import ndk_configured
from etdeploy.runner_build.runner_bundle import (
    BUNDLE_MANIFEST,
    BUNDLE_SCHEMA,
    KIND_X86_64,
    Progress,
    RunnerBundle,
)

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


def bundle_key(host: RunnerBundle, toolchain: GlibcToolchain) -> str:
    libc = toolchain.find_library("libc.so.6")
    glibc = glibc_release(libc) if libc is not None else None
    parts = (f"host={host.key}", f"revision={REVISION}", f"glibc={glibc}", f"kind={KIND}")
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def bundle_name(key: str) -> str:
    return f"{KIND}-{key[:16]}"


def assemble(
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
    # The host's digests describe its own files; the launcher here is another file.
    inherited = ("files", "sha256", "build_id", "built_at")
    manifest = {
        **{k: v for k, v in host.info.items() if k not in inherited},
        "schema": BUNDLE_SCHEMA,
        "abi": ABI,
        "key": key,
        "kind": KIND,
        "executable": host.executable,
        "files": files,
        # What each file holds: the cached bundle is checked against it before each use.
        "sha256": {name: sha256_file(bundle / name) for name in files},
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

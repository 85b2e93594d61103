"""The arm64 runner bundle without the NDK: a self-contained aarch64 Linux build.

android_harness/ is cross-compiled, unchanged, with Debian's g++-aarch64-linux-gnu
against the aarch64 wheel of the installed executorch version (downloaded once
with pip, its sha256 checked against what PyPI publishes, cached). The bundle
then carries the arm64 glibc it was linked against, loader included, and a
launcher script named `etdeploy_runner` that runs the program through that
loader:

    ld-linux-aarch64.so.1 --library-path DIR DIR/etdeploy_runner.bin ARGS...

so it needs nothing from the device but an arm64 Linux kernel and /bin/sh: not
the device's libc (Android's bionic, an older glibc, musl), not its loader.

runner_cache.py drives the build (its kind is KIND); this module holds what is
particular to it: the cross compiler, the wheel, and making the installed
bundle self-contained. Nothing here imports torch or executorch.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import filelock

from etdeploy.atomic import write_json
from etdeploy.digests import sha256_file
from etdeploy.errors import RunnerError, UsageError
from etdeploy.paths import cache_dir
from etdeploy.runner_build import EXECUTABLE, binary_abi
from etdeploy.runner_build.glibc_bundle import (
    PROGRAM,
    GlibcToolchain,
    compiler_library,
    glibc_release,
    self_contain,
)

KIND = "arm64-glibc"
ABI = "arm64-v8a"
LOADER = "ld-linux-aarch64.so.1"
TOOLCHAIN_FILE = Path("cmake") / "aarch64-linux-gnu.toolchain.cmake"
# Debian's cross tools are aarch64-linux-gnu-g++, -readelf...; another toolchain
# can be named by its prefix (a triple, or a path ending in "aarch64-linux-gnu-").
CROSS_PREFIX_ENV = "ETDEPLOY_CROSS_PREFIX"
DEFAULT_CROSS_PREFIX = "aarch64-linux-gnu-"
CROSS_PACKAGE = "g++-aarch64-linux-gnu"

# PEP 691's JSON form of PyPI's simple index: every file of a project with the
# sha256 PyPI computed at upload. Read for hashes only when a version is not
# pinned below; pip itself downloads the file.
INDEX_URL = "https://pypi.org/simple/executorch/"
INDEX_ACCEPT = "application/vnd.pypi.simple.v1+json"
PINNED_SOURCE = "https://pypi.org/simple/executorch/ (PEP 691 JSON, hashes.sha256), read 2026-12-03"
# The aarch64 wheels of the releases etdeploy pins, by file name, as PyPI
# publishes them (PINNED_SOURCE). A pinned hash needs no network to check.
PINNED_SHA256: dict[str, dict[str, str]] = {
    "1.5.1": {
        "executorch-1.5.1-cp310-cp310-manylinux_2_28_aarch64.whl": "e56525c38b1e1a428a9dd9f85081a2ef29dec1df8661963ac07cef0695cc0cf4",
        "executorch-1.5.1-cp311-cp311-manylinux_2_28_aarch64.whl": "8ee02348a3ea80ddf770822911ebf78da616b73afce0fbaaa79f23311c88c66a",
        "executorch-1.5.1-cp312-cp312-manylinux_2_28_aarch64.whl": "2c177f7922354a8a0d6111628c954519b87549598640e5e0042bef137b4cb83c",
        "executorch-1.5.1-cp313-cp313-manylinux_2_28_aarch64.whl": "685a8d85b319fc99f2611a5e0ecf598755a91cf5d39a536e057dea60cd8e9682",
        "executorch-1.5.1-cp314-cp314-manylinux_2_28_aarch64.whl": "d1aa88a029819cd0c8be1075d87fee56c5d35599b1bfcbd8c72de1c9cf657e0b",
    },
}
# What the build needs from the wheel: the libraries, the CMake package, the headers.
WHEEL_PARTS = ("executorch/lib/", "executorch/share/", "executorch/include/")
DOWNLOAD_TIMEOUT_S = 600.0
INDEX_TIMEOUT_S = 30.0
# manylinux2014 is glibc 2.17 (PEP 599); the oldest tag an executorch wheel carries.
_MANYLINUX_FLOOR = 17

Progress = Callable[[str], None]

# --- the cross compiler -------------------------------------------------------------


def cross_prefix() -> str:
    return os.environ.get(CROSS_PREFIX_ENV) or DEFAULT_CROSS_PREFIX


def cross_tool(name: str) -> str | None:
    """The cross toolchain's `name` (g++, gcc, readelf), or None when absent."""
    prefix = cross_prefix()
    candidate = f"{prefix}{name}"
    if os.sep in prefix:
        return candidate if os.access(candidate, os.X_OK) else None
    return shutil.which(candidate)


def cross_compiler() -> str:
    """The aarch64 C++ compiler, or a UsageError saying how to install it."""
    cxx = cross_tool("g++")
    if cxx is None:
        raise UsageError(
            f"the arm64 runner needs the cross compiler {cross_prefix()}g++, which is not installed",
            f"apt-get install {CROSS_PACKAGE} (`make setup` does, as root), or set "
            f"{CROSS_PREFIX_ENV} to another aarch64 toolchain's prefix",
        )
    return cxx


def compiler_identity(cxx: str) -> str:
    """The compiler's first --version line (part of the bundle's cache key)."""
    try:
        out = subprocess.run(
            [cxx, "--version"], capture_output=True, text=True, check=False, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UsageError(f"cannot run {cxx}: {exc}", f"reinstall {CROSS_PACKAGE}") from exc
    first = out.stdout.strip().splitlines()[:1]
    if out.returncode != 0 or not first:
        raise UsageError(f"{cxx} does not answer --version", f"reinstall {CROSS_PACKAGE}")
    return first[0]


def target_library(cxx: str, name: str) -> Path | None:
    """Where the cross toolchain keeps the target library `name` (libc.so.6,
    ld-linux-aarch64.so.1, libstdc++.so.6...), as its linker would find it."""
    return compiler_library(cxx, name)


def glibc_version(cxx: str) -> tuple[int, int]:
    """The version of the glibc the cross compiler links against, read from the
    banner libc.so.6 carries ("... release version 2.36.")."""
    libc = target_library(cxx, "libc.so.6")
    if libc is None:
        raise UsageError(
            f"{cxx} has no arm64 libc.so.6 to link against",
            f"apt-get install {CROSS_PACKAGE} (it brings libc6-dev-arm64-cross)",
        )
    release = glibc_release(libc)
    if release is None:
        raise UsageError(f"cannot tell the glibc version of {libc}", f"reinstall {CROSS_PACKAGE}")
    return release


# --- the aarch64 wheel --------------------------------------------------------------------


@dataclass(frozen=True)
class Wheel:
    path: Path
    sha256: str
    # Where the expected hash came from: PINNED_SOURCE or the index's URL and date.
    hash_source: str


def release_of(version: str) -> str:
    """PyPI's version for an installed one: the local label (+cpu) dropped."""
    return version.split("+", 1)[0]


def python_tag() -> str:
    return f"cp{sys.version_info.major}{sys.version_info.minor}"


def _fits(filename: str, release: str, glibc: tuple[int, int]) -> bool:
    """An aarch64 manylinux wheel of `release` for this Python that the bundled
    glibc can load (its manylinux floor at most that glibc)."""
    tag = python_tag()
    if not filename.startswith(f"executorch-{release}-{tag}-") or not filename.endswith(".whl"):
        return False
    platforms = filename[:-4].rsplit("-", 1)[-1].split(".")
    for platform_tag in platforms:
        if platform_tag == "manylinux2014_aarch64":
            return glibc >= (2, _MANYLINUX_FLOOR)
        match = re.fullmatch(r"manylinux_(\d+)_(\d+)_aarch64", platform_tag)
        if match and (int(match.group(1)), int(match.group(2))) <= glibc:
            return True
    return False


def published_hashes(release: str) -> tuple[dict[str, str], str]:
    """{file name: sha256} of every file PyPI publishes for executorch `release`,
    and where that came from: the pinned table, else the index (network)."""
    pinned = PINNED_SHA256.get(release)
    if pinned:
        return dict(pinned), PINNED_SOURCE
    request = urllib.request.Request(INDEX_URL, headers={"Accept": INDEX_ACCEPT})
    # pip's own certificate bundle setting, when there is one, is the one that works here.
    cafile = os.environ.get("PIP_CERT") or os.environ.get("SSL_CERT_FILE") or None
    try:
        context = ssl.create_default_context(cafile=cafile)
        with urllib.request.urlopen(request, timeout=INDEX_TIMEOUT_S, context=context) as reply:
            document = json.load(reply)
    except (OSError, ValueError, urllib.error.URLError) as exc:
        raise RunnerError(
            f"cannot read the sha256 of executorch {release}'s aarch64 wheel from {INDEX_URL}: {exc}",
            "the arm64 runner is built from that wheel and checked against PyPI's hash; "
            "check the connection to pypi.org and retry",
        ) from exc
    hashes = {
        str(entry.get("filename")): str(entry.get("hashes", {}).get("sha256", ""))
        for entry in document.get("files", [])
        if isinstance(entry, dict)
    }
    date = time.strftime("%Y-%m-%d")
    return {name: digest for name, digest in hashes.items() if digest}, f"{INDEX_URL}, read {date}"


def _record_path(wheel: Path) -> Path:
    return wheel.with_name(wheel.name + ".json")


def cached_wheel(release: str) -> Wheel | None:
    """A wheel of `release` for this Python already downloaded and verified, whose
    bytes still match the hash recorded when it was verified; never downloads."""
    directory = cache_dir("wheels")
    for record in sorted(directory.glob(f"executorch-{release}-{python_tag()}-*aarch64*.whl.json")):
        wheel = record.with_name(record.name.removesuffix(".json"))
        try:
            recorded = json.loads(record.read_text())
        except (OSError, ValueError):
            continue
        if wheel.is_file() and sha256_file(wheel) == recorded.get("sha256"):
            return Wheel(wheel, str(recorded["sha256"]), str(recorded.get("hash_source", "")))
    return None


def fetch_wheel(release: str, glibc: tuple[int, int], progress: Progress) -> Wheel:
    """The aarch64 wheel of executorch `release`: from the cache, else downloaded
    with pip --require-hashes against the hashes PyPI publishes, then recorded."""
    hit = cached_wheel(release)
    if hit is not None:
        return hit
    published, source = published_hashes(release)
    wanted = {name: digest for name, digest in published.items() if _fits(name, release, glibc)}
    if not wanted:
        raise UsageError(
            f"PyPI publishes no aarch64 Linux wheel of executorch {release} for Python "
            f"{sys.version_info.major}.{sys.version_info.minor} that glibc "
            f"{glibc[0]}.{glibc[1]} can load",
            "use a Python and executorch release with a manylinux aarch64 wheel, or build "
            "the Android runner with the NDK (android_harness/README.md)",
        )
    directory = cache_dir("wheels")
    progress(f"downloading executorch {release}'s aarch64 wheel (pip, checked by sha256)")
    with tempfile.TemporaryDirectory(prefix=".download-", dir=directory) as tmp:
        requirements = Path(tmp) / "requirements.txt"
        pins = " ".join(f"--hash=sha256:{digest}" for digest in sorted(set(wanted.values())))
        requirements.write_text(f"executorch=={release} {pins}\n")
        out = Path(tmp) / "out"
        platforms = [
            f"--platform=manylinux_{glibc[0]}_{minor}_aarch64"
            for minor in range(glibc[1], _MANYLINUX_FLOOR - 1, -1)
        ]
        argv = [
            sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
            "--require-hashes", "--no-input", "--disable-pip-version-check",
            "--implementation=cp", f"--python-version={sys.version_info.major}.{sys.version_info.minor}",
            *platforms, "--platform=manylinux2014_aarch64",
            "-d", str(out), "-r", str(requirements),
        ]  # fmt: skip
        try:
            done = subprocess.run(
                argv, capture_output=True, text=True, check=False, timeout=DOWNLOAD_TIMEOUT_S
            )
        except subprocess.TimeoutExpired as exc:
            raise RunnerError(
                f"downloading executorch {release}'s aarch64 wheel took over {DOWNLOAD_TIMEOUT_S:.0f} s",
                "check the connection to PyPI and retry",
                command=" ".join(argv),
            ) from exc
        if done.returncode != 0:
            raise RunnerError(
                f"pip could not download executorch {release}'s aarch64 wheel (exit {done.returncode})",
                "check the connection to PyPI (pip's output is attached; --verbose shows it); "
                "a hash mismatch means the file is not the one PyPI publishes",
                command=" ".join(argv),
                log=(done.stdout + done.stderr)[-4000:],
            )
        files = sorted(out.glob("*.whl"))
        if len(files) != 1 or files[0].name not in wanted:
            raise RunnerError(
                f"pip downloaded {[p.name for p in files]}, not one of {sorted(wanted)}",
                "report this: pip picked an unexpected file",
            )
        got = files[0]
        digest = sha256_file(got)
        if digest != wanted[got.name]:
            raise RunnerError(
                f"{got.name} has sha256 {digest}, but PyPI publishes {wanted[got.name]}",
                "the download is not PyPI's file; retry, and check any proxy or mirror in pip's config",
            )
        final = directory / got.name
        os.replace(got, final)
    write_json(
        {
            "sha256": digest,
            "hash_source": source,
            "verified_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        },
        _record_path(final),
    )
    return Wheel(final, digest, source)


def unpack(wheel: Wheel) -> Path:
    """The wheel's libraries, CMake package and headers, unpacked once into the
    cache; returns the `executorch` directory CMAKE_PREFIX_PATH names."""
    root = cache_dir("arm64-sdk")
    final = root / f"{wheel.path.name.removesuffix('.whl')}-{wheel.sha256[:12]}"
    marker = final / ".complete"
    if marker.is_file():
        return final / "executorch"
    with filelock.FileLock(str(root / ".unpack.lock"), timeout=600):
        if marker.is_file():
            return final / "executorch"
        staging = Path(tempfile.mkdtemp(prefix=".unpack-", dir=root))
        try:
            with zipfile.ZipFile(wheel.path) as archive:
                for member in archive.infolist():
                    name = member.filename
                    if not name.startswith(WHEEL_PARTS) or member.is_dir():
                        continue
                    if ".." in Path(name).parts or name.startswith("/"):
                        raise RunnerError(f"{wheel.path.name} holds an unsafe path: {name}")
                    archive.extract(member, staging)
            (staging / ".complete").write_text(wheel.sha256 + "\n")
            staging.chmod(0o755)  # mkdtemp's 0700 would hide it from other users of the cache
            if final.exists():
                shutil.rmtree(final)  # an earlier unpack that never completed
            staging.rename(final)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return final / "executorch"


# --- the build's two steps beyond runner_build's ----------------------------------------


@dataclass(frozen=True)
class Sdk:
    """What the cross build compiles against."""

    cxx: str
    prefix: Path  # the unpacked wheel's executorch/ directory
    wheel: Wheel
    glibc: tuple[int, int]


def toolchain_defines(harness: Path) -> tuple[str, ...]:
    """The CMake settings of the cross build (the wheel's path is added at build time)."""
    defines = [f"-DCMAKE_TOOLCHAIN_FILE={harness / TOOLCHAIN_FILE}"]
    if os.environ.get(CROSS_PREFIX_ENV):
        defines.append(f"-DETDEPLOY_CROSS_PREFIX={cross_prefix()}")
    return tuple(defines)


def prepare(executorch_version: str, progress: Progress) -> Sdk:
    """Everything the cross build needs before configure: the compiler, its glibc,
    and the installed executorch's aarch64 wheel, fetched and unpacked."""
    cxx = cross_compiler()
    glibc = glibc_version(cxx)
    wheel = fetch_wheel(release_of(executorch_version), glibc, progress)
    return Sdk(cxx=cxx, prefix=unpack(wheel), wheel=wheel, glibc=glibc)


def make_self_contained(bundle: Path, sdk: Sdk, progress: Progress) -> dict[str, object]:
    """Turn the installed bundle (the runner and the wheel's libraries) into one
    that runs on any arm64 Linux kernel (glibc_bundle.self_contain). Returns what
    the bundle's manifest adds."""
    readelf = cross_tool("readelf") or shutil.which("readelf")
    if readelf is None:
        raise UsageError("readelf is missing", f"apt-get install {CROSS_PACKAGE} (binutils)")
    if binary_abi(bundle / EXECUTABLE) != ABI:
        raise RunnerError(
            f"the cross build produced a {binary_abi(bundle / EXECUTABLE)} runner, not {ABI}",
            f"check {CROSS_PREFIX_ENV} and the toolchain file {TOOLCHAIN_FILE}",
        )
    toolchain = GlibcToolchain(
        loader=LOADER,
        readelf=readelf,
        find_library=lambda name: target_library(sdk.cxx, name),
        what="the arm64 bundle with its own glibc",
        install_hint="install the matching arm64 cross library (apt-cache search {library})",
    )
    copied = self_contain(bundle, EXECUTABLE, toolchain, progress)
    return {
        "kind": KIND,
        "program": PROGRAM,
        "loader": LOADER,
        "glibc": f"{sdk.glibc[0]}.{sdk.glibc[1]}",
        "system_libraries": copied,
        "wheel": sdk.wheel.path.name,
        "wheel_sha256": sdk.wheel.sha256,
        "wheel_hash_source": sdk.wheel.hash_source,
    }


def bundle_size(directory: Path) -> int:
    """Bytes of every file in a bundle directory (what a device receives)."""
    with contextlib.suppress(OSError):
        return sum(p.stat().st_size for p in directory.iterdir() if p.is_file())
    return 0

"""Building the C++ runner (android_harness/) into a cached, relocatable bundle.

A bundle is one directory: the runner executable and every shared library it
loads (found through RUNPATH $ORIGIN), so a device can take the directory as it
is. Its kind says how it was built (KINDS): for this machine, with the Android
NDK, or cross-compiled for arm64 Linux with its own glibc (runner_arm64.py).
Bundles are cached under cache_dir("runners")/<abi>-<key>/, the key hashing
everything that changes the binary: the harness sources, the ExecuTorch
version, the compiler and the ABI. A hit costs a stat and a small JSON read.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import filelock

from etdeploy.errors import RunnerError, UsageError
from etdeploy.paths import cache_dir

if TYPE_CHECKING:
    from etdeploy.devices.base import DeviceInfo

# "aarch64" is arm64 Linux: the same bundle arm64-v8a gets without an NDK build.
ABIS = ("host", "x86_64", "arm64-v8a", "aarch64")
# How a bundle was built: against this machine's wheel; with the Android NDK
# against an ExecuTorch Android install; cross-compiled against the aarch64 wheel
# with its own glibc (runner_arm64.KIND); or someone else's binary (--runner).
KIND_HOST = "host"
KIND_NDK = "android-ndk"
KIND_ARM64 = "arm64-glibc"
KIND_EXTERNAL = "external"
KINDS = (KIND_HOST, KIND_NDK, KIND_ARM64, KIND_EXTERNAL)
EXECUTABLE = "etdeploy_runner"
BUNDLE_MANIFEST = "bundle.json"
BUNDLE_SCHEMA = "etdeploy.runner_bundle/1"

# The wheel's imported CMake targets need 3.28 (its executorch-config.cmake,
# executorch 1.5.1, read 2026-12-02).
MIN_CMAKE = (3, 28)
# Android API level the runner targets: 26 (Android 8.0) has every libc call
# the runner makes; ExecuTorch's own Android build uses the NDK default or newer.
ANDROID_PLATFORM = "android-26"

BUILD_TIMEOUT_S = 900.0
LOCK_TIMEOUT_S = 1200.0
LOG_TAIL_LINES = 60

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


# --- finding things ---------------------------------------------------------------


def harness_dir() -> Path:
    """android_harness/: ETDEPLOY_HARNESS_DIR, else beside the package (a source
    checkout or editable install), else the source tree pip recorded."""
    candidates: list[Path] = []
    override = os.environ.get("ETDEPLOY_HARNESS_DIR")
    if override:
        candidates.append(Path(override))
    candidates.append(Path(__file__).resolve().parent.parent / "android_harness")
    source = _installed_source_tree()
    if source is not None:
        candidates.append(source / "android_harness")
    for candidate in candidates:
        if (candidate / "CMakeLists.txt").is_file():
            return candidate
    raise UsageError(
        "cannot find the runner sources (android_harness/CMakeLists.txt)",
        "run from an etdeploy source checkout, install it with `pip install -e`, or set "
        "ETDEPLOY_HARNESS_DIR to the android_harness directory",
    )


def _installed_source_tree() -> Path | None:
    # pip writes direct_url.json for installs from a local directory (PEP 610).
    try:
        text = importlib.metadata.distribution("etdeploy").read_text("direct_url.json")
    except importlib.metadata.PackageNotFoundError:
        return None
    if not text:
        return None
    try:
        url = json.loads(text).get("url", "")
    except ValueError:
        return None
    return Path(url.removeprefix("file://")) if url.startswith("file://") else None


def executorch_package_dir() -> Path:
    """The installed executorch package (its CMake package lives in share/cmake).
    Found without importing it: importing executorch pulls in torch."""
    spec = importlib.util.find_spec("executorch")
    if spec is None or not spec.submodule_search_locations:
        raise UsageError("executorch is not installed in this Python", "pip install executorch")
    package = Path(next(iter(spec.submodule_search_locations)))
    if not (package / "share" / "cmake" / "executorch-config.cmake").is_file():
        raise UsageError(
            f"the executorch package at {package} ships no CMake package",
            "install the executorch wheel from PyPI (it carries share/cmake and lib/)",
        )
    return package


def executorch_version() -> str:
    try:
        return importlib.metadata.version("executorch")
    except importlib.metadata.PackageNotFoundError as exc:
        raise UsageError("executorch is not installed", "pip install executorch") from exc


def find_tool(name: str) -> str | None:
    """A build tool, this interpreter's bin directory first (where `pip install
    cmake ninja` puts them), then PATH."""
    local = shutil.which(name, path=str(Path(sys.executable).parent))
    return local or shutil.which(name)


def _cmake() -> tuple[str, str]:
    cmake = find_tool("cmake")
    if cmake is None:
        raise UsageError(
            "cmake is not installed", f"pip install 'cmake>={MIN_CMAKE[0]}.{MIN_CMAKE[1]}' ninja"
        )
    out = subprocess.run([cmake, "--version"], capture_output=True, text=True, check=False)
    match = re.search(r"version (\d+)\.(\d+)(\S*)", out.stdout)
    if match is None:
        raise UsageError(f"cannot tell the version of {cmake}: {out.stdout.strip()[:80]}")
    version = (int(match.group(1)), int(match.group(2)))
    text = f"{match.group(1)}.{match.group(2)}{match.group(3)}"
    if version < MIN_CMAKE:
        raise UsageError(
            f"{cmake} is version {text}; the runner needs cmake "
            f"{MIN_CMAKE[0]}.{MIN_CMAKE[1]} or newer",
            f"pip install 'cmake>={MIN_CMAKE[0]}.{MIN_CMAKE[1]}' into this environment "
            "(the ExecuTorch package's targets need it)",
        )
    return cmake, text


def _compiler_identity(command: Sequence[str]) -> str:
    try:
        out = subprocess.run(
            [*command, "--version"], capture_output=True, text=True, check=False, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UsageError(
            f"cannot run the C++ compiler {command[0]!r}: {exc}",
            "install a C++17 compiler (g++ or clang++) or set CXX",
        ) from exc
    first = out.stdout.strip().splitlines()[:1]
    if out.returncode != 0 or not first:
        raise UsageError(
            f"the C++ compiler {command[0]!r} does not answer --version",
            "install a C++17 compiler (g++ or clang++) or set CXX",
        )
    return first[0]


def host_abi() -> str:
    """This machine's ABI in Android's names (the runner's device vocabulary)."""
    machine = platform.machine().lower()
    if machine in ("x86_64", "amd64"):
        return "x86_64"
    if machine in ("aarch64", "arm64"):
        return "arm64-v8a"
    return machine


# --- what to build -------------------------------------------------------------------


@dataclass(frozen=True)
class _Plan:
    abi: str
    # Extra -D settings and the compiler the cache key names.
    cmake_defines: tuple[str, ...]
    compiler: str
    environment_notes: tuple[str, ...]
    kind: str = KIND_HOST
    # "wheel" (the executorch wheel's CMake package) or "source" (a source install).
    package_kind: str = "wheel"
    kernels: tuple[str, ...] = ()
    backends: tuple[str, ...] = ("xnnpack",)


def _plan(abi: str) -> _Plan:
    """ "host" is this machine (glibc Linux, macOS); x86_64 and arm64-v8a are
    Android ABIs, built with the NDK against bionic: a host binary does not run
    on an Android x86_64 emulator even though the CPU matches. arm64-v8a without
    an NDK build configured, and aarch64 always, is the self-contained arm64
    bundle, which runs on Android and arm64 Linux alike."""
    if abi not in ABIS:
        raise UsageError(f"unknown runner ABI {abi!r}", f"use one of: {', '.join(ABIS)}")
    if abi == "aarch64" or (abi == "arm64-v8a" and not ndk_configured()):
        return _arm64_plan()
    if abi != "host":
        return _android_plan(abi)
    host = host_abi()
    system = platform.system()
    package = executorch_package_dir()
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++") or "c++"
    return _Plan(
        abi=host if system == "Linux" else f"{system.lower()}-{host}",
        cmake_defines=(f"-DCMAKE_PREFIX_PATH={package}", f"-DCMAKE_CXX_COMPILER={cxx}"),
        compiler=_compiler_identity([cxx]),
        environment_notes=(f"system={system}", f"executorch_package={package}"),
    )


def _android_plan(abi: str) -> _Plan:
    ndk = os.environ.get("ANDROID_NDK")
    prefix = os.environ.get("EXECUTORCH_ANDROID_PREFIX")
    readme = harness_dir() / "README.md"
    if not ndk or not prefix:
        missing = " and ".join(
            name
            for name, value in (("ANDROID_NDK", ndk), ("EXECUTORCH_ANDROID_PREFIX", prefix))
            if not value
        )
        raise UsageError(
            f"building the {abi} runner needs ANDROID_NDK (the NDK directory) and "
            f"EXECUTORCH_ANDROID_PREFIX (an ExecuTorch built and installed for {abi}); "
            f"{missing} not set",
            f"see {readme} (android_harness/build_android.sh builds both), or pass "
            "--runner PATH to use an executor_runner you built",
        )
    toolchain = Path(ndk) / "build" / "cmake" / "android.toolchain.cmake"
    if not toolchain.is_file():
        raise UsageError(
            f"ANDROID_NDK={ndk} has no build/cmake/android.toolchain.cmake",
            "point ANDROID_NDK at an unpacked NDK (r26 or newer)",
        )
    if not any(Path(prefix).glob("lib*/cmake/**/*onfig.cmake")):
        raise UsageError(
            f"EXECUTORCH_ANDROID_PREFIX={prefix} holds no ExecuTorch CMake package",
            f"install an ExecuTorch source build there (cmake --install); see {readme}",
        )
    revision = "unknown"
    properties = Path(ndk) / "source.properties"
    if properties.is_file():
        match = re.search(r"Pkg\.Revision\s*=\s*(\S+)", properties.read_text())
        if match:
            revision = match.group(1)
    return _Plan(
        abi=abi,
        cmake_defines=(
            f"-DCMAKE_TOOLCHAIN_FILE={toolchain}",
            f"-DANDROID_ABI={abi}",
            f"-DANDROID_PLATFORM={ANDROID_PLATFORM}",
            f"-DCMAKE_PREFIX_PATH={prefix}",
            # The NDK toolchain confines find_package to its sysroot otherwise.
            "-DCMAKE_FIND_ROOT_PATH_MODE_PACKAGE=BOTH",
        ),
        compiler=f"android-ndk {revision}",
        environment_notes=(f"ndk={ndk}", f"executorch_prefix={prefix}"),
        package_kind="source",
        kind=KIND_NDK,
    )


def ndk_configured() -> bool:
    """Whether an NDK build is set up (both variables): then it is preferred for Android."""
    return bool(os.environ.get("ANDROID_NDK") and os.environ.get("EXECUTORCH_ANDROID_PREFIX"))


def _arm64_plan() -> _Plan:
    # The wheel is fetched at build time; its version and this Python's tag name
    # it (a PyPI file never changes), so the key needs no download.
    from etdeploy import runner_arm64

    cxx = runner_arm64.cross_compiler()
    return _Plan(
        abi=runner_arm64.ABI,
        cmake_defines=runner_arm64.toolchain_defines(harness_dir()),
        compiler=runner_arm64.compiler_identity(cxx),
        environment_notes=(f"kind={KIND_ARM64}", f"wheel={runner_arm64.python_tag()}-aarch64"),
        kind=KIND_ARM64,
    )


def _source_files(harness: Path) -> list[Path]:
    # What compiles into the binary; README and the Android script do not.
    suffixes = {".cpp", ".h", ".hpp", ".cc", ".cmake"}
    files = [p for p in harness.rglob("*") if p.is_file() and p.suffix in suffixes]
    files.append(harness / "CMakeLists.txt")
    return sorted(set(files))


# --- what the runner registers (`--kernels`, `--backends`) ------------------------------

# Kernel libraries by name (anything else in `kernels` is a library's path); the
# optimized and quantized kernels are always linked, so "quantized" is accepted
# for a runner that must surely carry them. "llm": ExecuTorch's LLM custom ops
# (llama::custom_sdpa, update_cache, ...), which only a source install links.
KERNEL_LIBRARIES = ("quantized", "llm")
DEFAULT_BACKENDS = ("xnnpack",)
BACKENDS = ("xnnpack", "openvino", "qnn", "coreml", "mlx", "vulkan")
_KERNEL_SUFFIXES = (".so", ".a", ".dylib")


def _with_components(plan: _Plan, kernels: Sequence[str], backends: Sequence[str]) -> _Plan:
    """The plan plus CMake's ETDEPLOY_KERNELS and ETDEPLOY_BACKENDS. A library
    given by path is keyed by its bytes, so a rebuilt kernel library rebuilds
    the runner."""
    chosen: list[str] = []
    notes: list[str] = []
    for entry in kernels:
        if entry in KERNEL_LIBRARIES:
            if entry == "llm" and plan.package_kind == "wheel":
                # executorch 1.5.1 wheel, read 2026-12-03: the LLM custom ops ship
                # only in extension/llm/custom_ops/libcustom_ops_aot_lib.so, which
                # needs libtorch and the Python extension _C (NEEDED entries).
                raise UsageError(
                    "the installed executorch wheel has no LLM custom ops a runner can "
                    "link: it ships them only as the export-time plugin "
                    "libcustom_ops_aot_lib.so, which needs libtorch and Python",
                    "build ExecuTorch from source with -DEXECUTORCH_BUILD_KERNELS_LLM=ON "
                    "(its custom_ops library), then pass that library: --kernels PATH; an "
                    "Android or arm64 source install takes --kernels llm",
                )
            chosen.append(entry)
            continue
        path = Path(entry).expanduser().resolve()
        if not path.is_file() or not path.name.endswith(_KERNEL_SUFFIXES):
            raise UsageError(
                f"--kernels {entry}: not a kernel library name or a library file",
                f"name one of {', '.join(KERNEL_LIBRARIES)}, or give the path of a .so, .dylib "
                "or .a built against the same ExecuTorch",
            )
        chosen.append(str(path))
        notes.append(f"kernels:{path.name}={hashlib.sha256(path.read_bytes()).hexdigest()}")
    unknown = [b for b in backends if b not in BACKENDS]
    if unknown:
        raise UsageError(
            f"unknown backend(s) {', '.join(unknown)}", f"use any of: {', '.join(BACKENDS)}"
        )
    chosen = list(dict.fromkeys(chosen))
    wanted = list(dict.fromkeys(backends))
    return dataclasses.replace(
        plan,
        cmake_defines=(
            *plan.cmake_defines,
            f"-DETDEPLOY_KERNELS={';'.join(chosen)}",
            f"-DETDEPLOY_BACKENDS={';'.join(wanted)}",
            f"-DETDEPLOY_BUNDLE_ABI={plan.abi}",
            # The kind the bundle records in bundle.json, so --describe says the same.
            f"-DETDEPLOY_BUNDLE_KIND={plan.kind}",
        ),
        environment_notes=(
            *plan.environment_notes,
            f"kernels={','.join(chosen)}",
            f"backends={','.join(wanted)}",
            *notes,
        ),
        kernels=tuple(chosen),
        backends=tuple(wanted),
    )


def cached_runner(
    abi: str = "host", *, kernels: Sequence[str] = (), backends: Sequence[str] = DEFAULT_BACKENDS
) -> RunnerBundle | None:
    """The bundle `ensure_runner` would return, if it is already built; never builds."""
    plan = _with_components(_plan(abi), kernels, backends)
    key = _key(plan, harness_dir())
    return _read_bundle(cache_dir("runners") / f"{plan.abi}-{key[:16]}", fresh=False)


def bundle_key(
    abi: str, *, kernels: Sequence[str] = (), backends: Sequence[str] = DEFAULT_BACKENDS
) -> str:
    """The cache key of the bundle `ensure_runner(abi, ...)` would build."""
    plan = _with_components(_plan(abi), kernels, backends)
    return _key(plan, harness_dir())


def _key(plan: _Plan, harness: Path) -> str:
    digest = hashlib.sha256()
    for path in _source_files(harness):
        digest.update(path.relative_to(harness).as_posix().encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    for part in (
        f"executorch={executorch_version()}",
        f"compiler={plan.compiler}",
        f"abi={plan.abi}",
        *plan.environment_notes,
    ):
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()


# --- building -------------------------------------------------------------------------


def _run_step(
    step: str, argv: Sequence[str], cwd: Path, transcript: list[str], deadline: float
) -> None:
    transcript.append(f"$ {' '.join(argv)}")
    remaining = max(1.0, deadline - time.monotonic())
    try:
        done = subprocess.run(
            list(argv),
            cwd=cwd,
            capture_output=True,
            text=True,
            check=False,
            timeout=remaining,
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else ""
        transcript.append(out)
        raise RunnerError(
            f"runner build timed out while {step}",
            "the machine may be overloaded; retry with `etdeploy runner build`",
            command=" ".join(argv),
            log=_tail(transcript),
        ) from exc
    transcript.append(done.stdout)
    transcript.append(done.stderr)
    if done.returncode != 0:
        raise RunnerError(
            f"runner build failed while {step} (exit {done.returncode})",
            "the compiler output is attached (--verbose shows all of it); check the "
            "compiler and the ExecuTorch install",
            command=" ".join(argv),
            log=_tail(transcript),
        )


def _tail(transcript: list[str]) -> str:
    lines = "\n".join(part.rstrip() for part in transcript if part.strip()).splitlines()
    return "\n".join(lines[-LOG_TAIL_LINES:])


def _build(plan: _Plan, harness: Path, key: str, staging: Path, progress: Progress) -> Path:
    cmake, cmake_version = _cmake()
    ninja = find_tool("ninja")
    build_dir = staging / "build"
    bundle_dir = staging / "bundle"
    transcript: list[str] = []
    deadline = time.monotonic() + BUILD_TIMEOUT_S
    started = time.monotonic()

    configure = [cmake, "-S", str(harness), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=Release"]
    if ninja is not None:
        configure += ["-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={ninja}"]
    configure += list(plan.cmake_defines)
    sdk = None
    if plan.kind == KIND_ARM64:
        from etdeploy import runner_arm64

        sdk = runner_arm64.prepare(executorch_version(), progress)
        configure.append(f"-DCMAKE_PREFIX_PATH={sdk.prefix}")
    progress(f"configuring the {plan.abi} runner (cmake {cmake_version})")
    _run_step("configuring", configure, staging, transcript, deadline)
    progress("compiling the runner")
    jobs = str(os.cpu_count() or 2)
    _run_step(
        "compiling",
        [cmake, "--build", str(build_dir), "--parallel", jobs],
        staging,
        transcript,
        deadline,
    )
    progress("collecting the runner bundle")
    _run_step(
        "installing",
        [cmake, "--install", str(build_dir), "--prefix", str(bundle_dir)],
        staging,
        transcript,
        deadline,
    )
    if not (bundle_dir / EXECUTABLE).is_file():
        raise RunnerError(
            f"runner build produced no {EXECUTABLE}",
            "the CMake project in android_harness/ installs nothing; check it",
            log=_tail(transcript),
        )
    extra: dict[str, object] = {}
    if sdk is not None:
        from etdeploy import runner_arm64

        extra = runner_arm64.make_self_contained(bundle_dir, sdk, progress)
    files = sorted(p.name for p in bundle_dir.iterdir() if p.is_file())
    manifest = {
        "schema": BUNDLE_SCHEMA,
        "abi": plan.abi,
        "key": key,
        "executable": EXECUTABLE,
        "files": files,
        "flavor": "etdeploy",
        "kind": plan.kind,
        "executorch_version": executorch_version(),
        "kernels": list(plan.kernels),
        "backends": list(plan.backends),
        "compiler": plan.compiler,
        "cmake_version": cmake_version,
        "build_seconds": round(time.monotonic() - started, 3),
        "build_id": uuid.uuid4().hex,
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        **extra,
    }
    (bundle_dir / BUNDLE_MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return bundle_dir


def _read_bundle(directory: Path, *, fresh: bool) -> RunnerBundle | None:
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


@contextlib.contextmanager
def _build_lock(root: Path, name: str, progress: Progress) -> Iterator[None]:
    lock = filelock.FileLock(str(root / f".{name}.lock"))
    try:
        lock.acquire(timeout=0)
    except filelock.Timeout:
        progress("waiting for another process building the same runner")
        try:
            lock.acquire(timeout=LOCK_TIMEOUT_S)
        except filelock.Timeout as exc:
            raise RunnerError(
                f"another process has held the runner build lock for {LOCK_TIMEOUT_S:.0f} s",
                f"if no build is running, delete {lock.lock_file}",
            ) from exc
    try:
        yield
    finally:
        lock.release()


def ensure_runner(
    abi: str = "host",
    *,
    rebuild: bool = False,
    progress: Progress | None = None,
    kernels: Sequence[str] = (),
    backends: Sequence[str] = DEFAULT_BACKENDS,
) -> RunnerBundle:
    """The runner bundle for `abi`, built if the cache lacks it.

    abi: "host" (this machine); "x86_64", the Android ABI (needs ANDROID_NDK and
    EXECUTORCH_ANDROID_PREFIX); "arm64-v8a", the NDK build when both are set, else
    the self-contained arm64 bundle; "aarch64", that bundle always. `kernels` adds
    kernel libraries (KERNEL_LIBRARIES names or paths), `backends` picks the
    delegates (() for none); each choice is its own cached bundle. A build runs
    in a temporary directory renamed into place, under a lock, so concurrent
    callers build once and nobody sees half a bundle.
    """
    report: Progress = progress or (lambda _message: None)
    plan = _with_components(_plan(abi), kernels, backends)
    harness = harness_dir()
    key = _key(plan, harness)
    root = cache_dir("runners")
    name = f"{plan.abi}-{key[:16]}"
    final = root / name

    if not rebuild and (hit := _read_bundle(final, fresh=False)) is not None:
        return hit

    with _build_lock(root, name, report):
        # Another process may have finished the same build while this one waited.
        if not rebuild and (hit := _read_bundle(final, fresh=False)) is not None:
            return hit
        staging = Path(tempfile.mkdtemp(prefix=f".build-{name}-", dir=root))
        try:
            built = _build(plan, harness, key, staging, report)
            if final.exists():
                # A rebuild, or a damaged entry: move it aside, then swap in.
                final.rename(staging / "previous")
            built.rename(final)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    bundle = _read_bundle(final, fresh=True)
    if bundle is None:
        raise RunnerError(f"the runner bundle at {final} is incomplete right after its build")
    report(f"{bundle.kind} runner ready in {bundle.info.get('build_seconds')} s: {final}")
    return bundle


# --- which bundle a device gets ------------------------------------------------------------


@dataclass(frozen=True)
class RunnerChoice:
    """The bundle etdeploy builds for a device: `ensure_runner(abi)`, of `kind`."""

    abi: str
    kind: str
    reason: str


def runner_choice(info: DeviceInfo) -> RunnerChoice:
    """Which bundle a device gets, decided from what it reports, without building.

    This machine, or one like it over SSH: the host build. An arm64 Android phone:
    the NDK build when ANDROID_NDK and EXECUTORCH_ANDROID_PREFIX are set, else the
    self-contained arm64 bundle; another Android ABI: the NDK build. An arm64 Linux
    host (a Raspberry Pi, a Jetson, a Graviton machine): the arm64 bundle.
    Anything else is a UsageError saying how to bring a runner.
    """
    from etdeploy.devices.registry import split_abi

    arch = split_abi(info.abi)[1]
    system = platform.system().lower()
    if info.os == "android":
        if arch == "arm64" and not ndk_configured():
            return RunnerChoice(
                "arm64-v8a", KIND_ARM64, "the arm64 bundle with its own glibc (no NDK build set up)"
            )
        return RunnerChoice(info.abi, KIND_NDK, "the Android NDK build")
    if info.os == system and arch == split_abi(host_abi())[1]:
        return RunnerChoice("host", KIND_HOST, f"the host build ({info.os} {host_abi()})")
    if info.os == "linux" and arch == "arm64":
        return RunnerChoice("aarch64", KIND_ARM64, "the arm64 bundle with its own glibc")
    raise UsageError(
        f"no runner for {info.name} ({info.os} {info.abi}); etdeploy builds runners for "
        f"this machine ({system} {host_abi()}), for arm64 Linux and Android, and, with "
        "the NDK, for other Android ABIs",
        "build the runner on that machine (see ios_harness/README.md for macOS and iOS) "
        'and pass it with --runner PATH or `runner = "PATH"` in its [devices] table',
    )


def runner_for_device(info: DeviceInfo, progress: Progress | None = None) -> RunnerBundle:
    """The bundle `runner_choice` names for the device, built if the cache lacks it."""
    choice = runner_choice(info)
    if progress is not None:
        progress(f"runner for {info.name}: {choice.reason}")
    return ensure_runner(choice.abi, progress=progress)


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
        byteorder = "little" if header[5] == 1 else "big"
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
        bundle = _read_bundle(path.resolve(), fresh=False)
        if bundle is None:
            raise UsageError(
                f"{path} is not a runner bundle (no complete {BUNDLE_MANIFEST})",
                "pass the directory `etdeploy runner build` printed, or an executor_runner binary",
            )
        return bundle
    if path.name == EXECUTABLE and (bundle := _read_bundle(path.resolve().parent, fresh=False)):
        return bundle  # our runner named by its binary: keep its libraries and flags
    # A dynamically linked build loads its libraries from beside it ($ORIGIN), so
    # they travel with it; upstream's usual static build has none.
    siblings = sorted(
        p for p in path.resolve().parent.iterdir()
        if p.is_file() and (".so" in p.suffixes or p.suffix == ".dylib")
    ) if path.is_file() else []  # fmt: skip
    return external_runner(path, libraries=siblings)

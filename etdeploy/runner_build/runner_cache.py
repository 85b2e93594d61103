"""Building a planned runner into the cache: configure, compile, install into a
staging directory, then rename into place under a lock."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from etdeploy.atomic import atomic_write
from etdeploy.digests import file_sha256
from etdeploy.errors import RunnerError
from etdeploy.extras import require_build_extra
from etdeploy.paths import cache_dir
from etdeploy.quarantine import file_damage, quarantine
from etdeploy.runner_build import x86_64
from etdeploy.runner_build.plans import DEFAULT_BACKENDS, Plan, plan_for, plan_key, with_components
from etdeploy.runner_build.runner_bundle import (
    BUNDLE_MANIFEST,
    BUNDLE_SCHEMA,
    EXECUTABLE,
    KIND_ARM64,
    Progress,
    RunnerBundle,
    read_bundle,
)
from etdeploy.runner_build.toolchain import cmake_tool, executorch_version, find_tool, harness_dir

if TYPE_CHECKING:
    pass


BUILD_TIMEOUT_S = 900.0
LOCK_TIMEOUT_S = 1200.0
LOG_TAIL_LINES = 60


def cached_runner(
    abi: str = "host", *, kernels: Sequence[str] = (), backends: Sequence[str] = DEFAULT_BACKENDS
) -> RunnerBundle | None:
    """The bundle `ensure_runner` would return, if it is already built; never builds."""
    if x86_64.applies(abi):
        # The x86_64 bundle is the host runner made self-contained: both must be built.
        host = cached_runner("host", kernels=kernels, backends=backends)
        if host is None:
            return None
        key = x86_64.bundle_key(host, x86_64.host_toolchain())
        return verified_bundle(cache_dir("runners") / x86_64.bundle_name(key))
    plan = with_components(plan_for(abi), kernels, backends)
    key = plan_key(plan, harness_dir())
    return verified_bundle(cache_dir("runners") / f"{plan.abi}-{key[:16]}")


def verified_bundle(directory: Path) -> RunnerBundle | None:
    """The cached bundle in `directory` when each of its files holds the bytes its
    bundle.json records (etdeploy.quarantine); None when there is none, and after
    moving a damaged one aside. A bundle from before digests were recorded gets
    them now."""
    if directory.is_symlink():
        quarantine(directory, "runner bundle", f"{directory.name} is a link, not a folder")
        return None
    bundle = read_bundle(directory, fresh=False)
    if bundle is None:
        return None
    recorded = bundle.info.get("sha256")
    if not isinstance(recorded, dict):
        _record_digests(bundle)
        return bundle
    for path in bundle.files:
        digest = recorded.get(path.name)
        damage = file_damage(path, digest if isinstance(digest, str) else None)
        if damage is None and not isinstance(digest, str):
            damage = f"{path.name} has no digest in {BUNDLE_MANIFEST}"
        if damage is not None:
            quarantine(directory, f"{bundle.abi} runner bundle", damage)
            return None
    return bundle


def _record_digests(bundle: RunnerBundle) -> None:
    """Add each file's sha256 to an older bundle's bundle.json (a bundle.json that
    cannot be written costs the check, not the run)."""
    manifest = {**bundle.info, "sha256": {p.name: file_sha256(p) for p in bundle.files}}
    with contextlib.suppress(OSError):
        path = bundle.directory / BUNDLE_MANIFEST
        atomic_write(path, (json.dumps(manifest, indent=2) + "\n").encode())


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


def _build(plan: Plan, harness: Path, key: str, staging: Path, progress: Progress) -> Path:
    cmake, cmake_version = cmake_tool()
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
        from etdeploy.runner_build import arm64 as runner_arm64

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
        from etdeploy.runner_build import arm64 as runner_arm64

        extra = runner_arm64.make_self_contained(bundle_dir, sdk, progress)
    files = sorted(p.name for p in bundle_dir.iterdir() if p.is_file())
    # What each file holds: a cached bundle is checked against it before every use.
    digests = {name: hashlib.sha256((bundle_dir / name).read_bytes()).hexdigest() for name in files}
    manifest = {
        "schema": BUNDLE_SCHEMA,
        "abi": plan.abi,
        "key": key,
        "executable": EXECUTABLE,
        "files": files,
        "sha256": digests,
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


@contextlib.contextmanager
def _build_lock(root: Path, name: str, progress: Progress) -> Iterator[None]:
    import filelock  # here: a warm run finds its runner cached and never locks (~5 ms)

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

    abi: "host" (this machine); "x86_64", the Android ABI: the NDK build when
    ANDROID_NDK and EXECUTORCH_ANDROID_PREFIX are set, else the host build made
    self-contained with its glibc (x86_64.py); "arm64-v8a", the NDK build when both
    are set, else the self-contained arm64 bundle; "aarch64", that bundle always. `kernels` adds
    kernel libraries (KERNEL_LIBRARIES names or paths), `backends` picks the
    delegates (() for none); each choice is its own cached bundle. A build runs
    in a temporary directory renamed into place, under a lock, so concurrent
    callers build once and nobody sees half a bundle.
    """
    if x86_64.applies(abi):
        return _ensure_x86_64(rebuild, progress, kernels, backends)

    # Compiled against the executorch wheel's CMake package; a device host takes it
    # prebuilt in a job bundle instead.
    require_build_extra(f"building the {abi} runner")
    report: Progress = progress or (lambda _message: None)
    plan = with_components(plan_for(abi), kernels, backends)
    harness = harness_dir()
    key = plan_key(plan, harness)
    return cached_or_built(
        f"{plan.abi}-{key[:16]}",
        lambda staging: _build(plan, harness, key, staging, report),
        rebuild=rebuild,
        progress=report,
    )


def _ensure_x86_64(
    rebuild: bool, progress: Progress | None, kernels: Sequence[str], backends: Sequence[str]
) -> RunnerBundle:
    """The x86_64 bundle: the host runner (built if the cache lacks it) copied and
    made self-contained (x86_64.assemble), once per host bundle and glibc; under a
    lock, staged in a temporary directory renamed into place, so nobody sees half a
    bundle."""
    report: Progress = progress or (lambda _message: None)
    toolchain = x86_64.host_toolchain()
    host = ensure_runner(
        "host", rebuild=rebuild, progress=report, kernels=kernels, backends=backends
    )
    key = x86_64.bundle_key(host, toolchain)
    return cached_or_built(
        x86_64.bundle_name(key),
        lambda staging: x86_64.assemble(host, key, toolchain, staging / "bundle", report),
        rebuild=rebuild,
        progress=report,
    )


def cached_or_built(
    name: str, make: Callable[[Path], Path], *, rebuild: bool, progress: Progress
) -> RunnerBundle:
    """The bundle cached as runners/NAME; else `make(staging)` builds one in a
    temporary directory under runners/ (returning the bundle's directory there),
    renamed into place under a lock, so concurrent callers build once and nobody
    sees half a bundle."""
    root = cache_dir("runners")
    final = root / name
    if not rebuild and (hit := verified_bundle(final)) is not None:
        return hit
    with _build_lock(root, name, progress):
        # Another process may have finished the same build while this one waited.
        if not rebuild and (hit := verified_bundle(final)) is not None:
            return hit
        staging = Path(tempfile.mkdtemp(prefix=f".build-{name}-", dir=root))
        try:
            built = make(staging)
            if os.path.lexists(final):
                # A rebuild, or a damaged entry: move it aside, then swap in.
                final.rename(staging / "previous")
            built.rename(final)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    bundle = read_bundle(final, fresh=True)
    if bundle is None:
        raise RunnerError(f"the runner bundle at {final} is incomplete right after its build")
    progress(f"{bundle.kind} runner ready in {bundle.info.get('build_seconds')} s: {final}")
    return bundle

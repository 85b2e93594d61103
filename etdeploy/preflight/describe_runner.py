"""Asking a runner what it can run (`--describe`), here or on the device, and the
cache of the answers, one per bundle."""

from __future__ import annotations

import contextlib
import hashlib
import json
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from etdeploy.atomic import write_json
from etdeploy.devices.base import Device, DeviceInfo
from etdeploy.devices.lock import device_lock
from etdeploy.devices.registry import split_abi
from etdeploy.errors import EtdeployError
from etdeploy.paths import cache_dir
from etdeploy.runner import runner_failure
from etdeploy.runner.describe import (
    RunnerDescription,
    describe_argv,
    describe_unsupported,
    parse_describe,
)
from etdeploy.runner_build import (
    RunnerBundle,
    binary_abi,
    cached_runner,
    host_abi,
    runner_from_path,
)

DESCRIBE_DEADLINE_S = 60.0
CACHE_KIND = "runner-describe"

Status = Callable[[str], None]


def remote_runner_dir(device: Device, bundle: RunnerBundle) -> str:
    """Where the bundle lives on the device, named by its build key: pipeline.deploy
    pushes it there, and preflight when it asks the runner on the device."""
    return f"{device.workdir.rstrip('/')}/runners/{bundle.abi}-{(bundle.key or 'external')[:16]}"


def runs_here(bundle: RunnerBundle) -> bool:
    """Whether this machine can execute the bundle's runner: the binary's ABI is
    this machine's and, for ELF, its program interpreter (the dynamic loader it
    names) exists here; an Android build names /system/bin/linker64."""
    import platform

    executable = bundle.executable_path
    abi = binary_abi(executable)
    system = platform.system().lower()
    if abi is None:
        return False
    if abi.startswith("darwin-"):
        return system == "darwin" and abi == f"darwin-{platform.machine().lower()}"
    if system != "linux" or abi != host_abi():
        return False
    interpreter = _elf_interpreter(executable)
    return interpreter is None or Path(interpreter).exists()


def _elf_interpreter(path: Path) -> str | None:
    """PT_INTERP of a 64-bit little-endian ELF file (the System V gABI's program
    header table), or None for a static binary or another format."""
    import struct

    try:
        with path.open("rb") as handle:
            header = handle.read(64)
            if header[:4] != b"\x7fELF" or header[4] != 2 or header[5] != 1:
                return None
            (phoff,) = struct.unpack_from("<Q", header, 32)
            phentsize, phnum = struct.unpack_from("<HH", header, 54)
            handle.seek(phoff)
            table = handle.read(phentsize * phnum)
            for i in range(phnum):
                (kind,) = struct.unpack_from("<I", table, i * phentsize)
                if kind == 3:  # PT_INTERP
                    (offset,) = struct.unpack_from("<Q", table, i * phentsize + 8)
                    (size,) = struct.unpack_from("<Q", table, i * phentsize + 32)
                    handle.seek(offset)
                    return handle.read(size).rstrip(b"\0").decode(errors="replace")
    except (OSError, struct.error):
        return None
    return None


def _cache_path(bundle: RunnerBundle) -> Path:
    key = bundle.key or hashlib.sha256(bundle.executable_path.read_bytes()).hexdigest()
    return cache_dir(CACHE_KIND) / f"{key[:32]}.json"


def _read_cache(bundle: RunnerBundle) -> RunnerDescription | None:
    path = _cache_path(bundle)
    try:
        entry = json.loads(path.read_text())
        # A rebuild under the same key (--rebuild) is described afresh.
        if entry.get("build_id") != bundle.info.get("build_id"):
            return None
        return parse_describe(entry["describe"])
    except (OSError, ValueError, KeyError, TypeError, EtdeployError):
        return None


def _write_cache(bundle: RunnerBundle, description: RunnerDescription) -> None:
    entry = {
        "bundle_key": bundle.key,
        "build_id": bundle.info.get("build_id"),
        "describe": description.to_json(),
    }
    # A cache that cannot be written costs one describe next time, nothing else.
    with contextlib.suppress(OSError):
        write_json(entry, _cache_path(bundle))


def _document(stdout: str) -> str:
    # Over `adb shell` v1 stdout and stderr arrive merged: take the document alone.
    start = stdout.find('{"schema"')
    end = stdout.rfind("}")
    return stdout[start : end + 1] if 0 <= start < end else stdout


@dataclass(frozen=True)
class Described:
    """A runner's description, where it came from (cache, host, device, or none),
    and, when there is none, why."""

    description: RunnerDescription | None
    source: str
    note: str | None = None


@dataclass(frozen=True)
class _Ran:
    where: str  # host | device
    exit_code: int | None  # None: killed at the deadline
    stdout: str
    stderr: str
    command: str


def describe_runner(
    device: Device,
    bundle: RunnerBundle,
    *,
    status: Status | None = None,
    deadline_s: float = DESCRIBE_DEADLINE_S,
    verify: bool = False,
) -> Described:
    """The bundle's description: from the cache, else from the runner run here
    (when this machine can execute it) or on `device` (pushing the runner only).
    A runner that cannot describe itself gives a note instead; one that fails to
    start at all raises its RunnerFailure (exit 3)."""
    say = status or (lambda _text: None)
    if bundle.flavor != "etdeploy":
        return Described(None, "none", UPSTREAM_NOTE)
    cached = _read_cache(bundle)
    if cached is not None:
        return Described(cached, "cache")
    if device.transport == "local" or runs_here(bundle):
        say("asking the runner what it can run")
        ran = _ask_here(bundle, deadline_s)
    else:
        say(f"asking the runner on {device.name} what it can run (pushing the runner only)")
        ran = _ask_on_device(device, bundle, deadline_s, verify=verify)
    if ran.exit_code != 0:
        if ran.exit_code is not None and describe_unsupported(ran.stdout, ran.stderr):
            return Described(None, ran.where, OLD_RUNNER_NOTE)
        raise runner_failure(
            ran.exit_code,
            ran.stdout,
            ran.stderr,
            timed_out=ran.exit_code is None,
            command=ran.command,
            device=device.name if ran.where == "device" else "host",
        )
    description = parse_describe(_document(ran.stdout))
    _write_cache(bundle, description)
    return Described(description, ran.where)


UPSTREAM_NOTE = (
    "preflight skipped: the runner is upstream's executor_runner, which cannot describe "
    "itself (no --describe); a missing operator or backend shows when it loads the program"
)
OLD_RUNNER_NOTE = (
    "preflight skipped: this runner predates --describe; rebuild it (etdeploy runner build) "
    "for a check before pushing"
)


def _ask_here(bundle: RunnerBundle, deadline_s: float) -> _Ran:
    argv = describe_argv(bundle.executable_path)
    command = " ".join(argv)
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=deadline_s, check=False)
    except subprocess.TimeoutExpired as exc:
        return _Ran("host", None, _text(exc.stdout), _text(exc.stderr), command)
    except OSError as exc:
        return _Ran("host", 126, "", f"cannot execute {argv[0]}: {exc.strerror}", command)
    return _Ran("host", done.returncode, done.stdout, done.stderr, command)


def _ask_on_device(
    device: Device, bundle: RunnerBundle, deadline_s: float, *, verify: bool
) -> _Ran:
    directory = remote_runner_dir(device, bundle)
    # Under the device's lock: a job timing its runner there is not disturbed.
    with device_lock(device):
        device.makedirs(directory)
        for path in bundle.files:
            mode = 0o755 if path.name == bundle.executable else 0o644
            device.push(path, f"{directory}/{path.name}", mode=mode, verify=verify)
        out = device.run(
            describe_argv(f"{directory}/{bundle.executable}"), deadline_s=deadline_s, cwd=directory
        )
    exit_code = None if out.timed_out else out.exit_code
    return _Ran("device", exit_code, out.stdout, out.stderr, out.command)


def _text(value: str | bytes | None) -> str:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return value or ""


def built_runner_for(
    info: DeviceInfo, configured: Path | None = None
) -> tuple[RunnerBundle | None, tuple[str, str]]:
    """The bundle `run` would use on the device if it is already built (picked as
    pipeline.runner_for picks it, but never building: `configured` is the runner its
    [devices.NAME] table names), else None and (why, hint)."""
    import platform

    if configured is not None:
        return runner_from_path(configured), ("", "")
    if info.os == "android":
        abi, flag = info.abi, f" --abi {info.abi}"
    elif (
        info.os == platform.system().lower() and split_abi(info.abi)[1] == split_abi(host_abi())[1]
    ):
        abi, flag = "host", ""
    else:
        return None, (
            f"no runner for {info.os} {info.abi}: etdeploy builds runners for this machine and "
            "for Android",
            f'build one on that machine and set runner = "PATH" in [devices.{info.name}]',
        )
    try:
        bundle = cached_runner(abi)
    except EtdeployError as exc:
        return None, (exc.message, exc.hint or "")
    if bundle is None:
        return None, (
            f"the {abi} runner is not built yet, so there is nothing to compare against "
            "(`run` builds it on first use)",
            f"build it: etdeploy runner build{flag}, then run doctor again",
        )
    return bundle, ("", "")

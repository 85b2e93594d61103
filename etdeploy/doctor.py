"""`etdeploy doctor`: is this machine, and every device it is set up for, ready to run jobs?

Each check is a row: ok, warn (works, but worth knowing) or fail (a job would
fail), with a detail and, when something is wrong, a hint. The checks:

- environment: etdeploy, torch and executorch versions (importlib.metadata: this
  module never imports torch or executorch, which cost seconds), whether the
  installed pair is one executorch is built for, and executorch's own pinned
  dependencies (torchao);
- the host runner: built and cached, or built on first use;
- the arm64 bundle (for arm64 phones without an NDK build, and arm64 Linux
  hosts): the cross compiler that builds it, the aarch64 wheel it is built from
  (downloaded once), and the bundle when cached; optional, so a gap only warns;
- adb: the binary (adbutils ships one) and its version, and each adb server a
  device is configured behind: answering, and the protocol it speaks. Nothing
  is started here;
- devices: every device `--device` can name, reachable or not (registry's
  describe_devices, whose probes have short timeouts), and for each reachable
  one whether a runner can run there (its ABI against the runner's);
- ssh: each SSH host's key is in the known_hosts etdeploy reads (a strict host
  key policy refuses unknown hosts);
- with --pte: the file identifier and schema version the runtime needs, and the
  executorch version recorded at build against this machine's and the runners';
- with --pte and --device: the preflight `run` makes before pushing (the
  program's operators, delegates and version against what that device's runner
  describes), against the runner the device would get if it is built.

Nothing here prints; the CLI renders the rows.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import platform
import re
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from etdeploy.config import Config
from etdeploy.errors import EXIT_BAD_INPUT, EXIT_INFRA, EXIT_OK, EtdeployError

OK, WARN, FAIL = "ok", "warn", "fail"

# The executorch release -> the torch release its wheels are built against. Read
# from pyproject.toml's pins, whose comment cites executorch's release notes and
# its wheel metadata (read 2026-12-02): executorch 1.5.1 pairs with torch 2.13.0.
# executorch's own metadata does not pin torch, so this table is the source.
TORCH_FOR_EXECUTORCH: dict[str, str] = {"1.5.1": "2.13.0"}
PAIRING_SOURCE = (
    "pyproject.toml, which cites executorch's release notes and wheel metadata, read 2026-12-02"
)

# The program file identifier the ExecuTorch 1.x runtime accepts (schema/program.fbs:
# file_identifier "ET12"); a program with another is refused at load.
RUNTIME_FILE_IDENTIFIER = "ET12"

# Where etdeploy starts an adb server on demand (etdeploy.devices.adb does the same).
_LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")

AREAS = ("environment", "runner", "adb", "device", "ssh", "pte", "preflight")


@dataclass(frozen=True)
class Check:
    area: str  # one of AREAS
    name: str  # what was checked: "torch", "pixel8", "adb server 127.0.0.1:5037"
    status: str  # ok | warn | fail
    detail: str
    hint: str = ""

    def to_json(self) -> dict[str, str]:
        return asdict(self)


def run_doctor(
    config: Config,
    *,
    pte: Path | None = None,
    adb_host: str | None = None,
    adb_port: int | None = None,
    devices: bool = True,
    device: str | None = None,
) -> list[Check]:
    """Every check, in the order a reader fixes things: environment, runner, adb,
    devices, ssh, then the .pte and, with `device`, its preflight there."""
    checks = [*environment_checks(), *host_runner_checks(), *arm64_runner_checks()]
    checks += adb_checks(config, adb_host=adb_host, adb_port=adb_port)
    if devices:
        checks += device_checks(config, adb_host=adb_host, adb_port=adb_port)
        checks += ssh_checks(config)
    if pte is not None:
        checks += pte_checks(pte, config)
        if device is not None:
            checks += preflight_checks(pte, device, config, adb_host=adb_host, adb_port=adb_port)
    return checks


def exit_code(checks: Sequence[Check]) -> int:
    """2 when the .pte is bad or its device's runner lacks what it needs; else 3
    when anything else failed (a device, a transport, the installation a job
    needs); else 0. Warnings never fail."""
    failed = [c for c in checks if c.status == FAIL]
    if any(c.area in ("pte", "preflight") for c in failed):
        return EXIT_BAD_INPUT
    return EXIT_INFRA if failed else EXIT_OK


# -- environment --------------------------------------------------------------------------


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _release(version: str) -> str:
    """The release without its local build tag (2.13.0+cpu -> 2.13.0): the tag
    does not change the API."""
    return version.split("+", 1)[0]


def environment_checks() -> list[Check]:
    checks = [
        Check("environment", "python", OK, f"{platform.python_version()} ({sys.executable})"),
        Check(
            "environment",
            "etdeploy",
            OK,
            _version("etdeploy") or "not installed (running from source)",
        ),
    ]
    torch, executorch = _version("torch"), _version("executorch")
    for name, version in (("torch", torch), ("executorch", executorch)):
        if version is None:
            checks.append(Check("environment", name, FAIL, "not installed",
                                "pip install -e . (it pins torch 2.13.0 and executorch 1.5.1)"))  # fmt: skip
        else:
            checks.append(Check("environment", name, OK, version))
    if torch is None or executorch is None:
        return checks
    checks.append(pairing_check(torch, executorch))
    checks += _pinned_dependencies("executorch")
    return checks


def pairing_check(torch: str, executorch: str) -> Check:
    """Whether torch and executorch are a pair executorch is built for."""
    name = "torch/executorch pair"
    wanted = TORCH_FOR_EXECUTORCH.get(_release(executorch))
    if wanted is None:
        known = ", ".join(f"executorch {e} with torch {t}" for e, t in TORCH_FOR_EXECUTORCH.items())
        return Check(
            "environment", name, WARN,
            f"executorch {executorch} is not a release etdeploy knows the torch for (it knows {known})",
            "install the pair etdeploy pins: pip install -e .",
        )  # fmt: skip
    if _release(torch) != wanted:
        return Check(
            "environment", name, FAIL,
            f"executorch {executorch} is built against torch {wanted}, but torch {torch} is installed "
            f"(pairing read from {PAIRING_SOURCE})",
            f"pip install torch=={wanted} --index-url https://download.pytorch.org/whl/cpu",
        )  # fmt: skip
    return Check("environment", name, OK,
                 f"executorch {executorch} with torch {torch} (pairing read from {PAIRING_SOURCE})")  # fmt: skip


def _pinned_dependencies(dist: str) -> list[Check]:
    """The torch-family requirements `dist` declares (torchao for executorch), each
    against what is installed. Needs `packaging`, which pip brings; skipped without."""
    try:
        from packaging.requirements import InvalidRequirement, Requirement
    except ImportError:  # pragma: no cover - pip installs packaging
        return []
    checks = []
    for text in metadata.requires(dist) or []:
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            continue
        if not requirement.name.lower().startswith("torch") or requirement.marker is not None:
            continue
        installed = _version(requirement.name)
        name = f"{requirement.name} (for {dist})"
        wanted = f"{dist} asks for {requirement.name}{requirement.specifier}"
        if installed is None:
            checks.append(Check("environment", name, FAIL, f"{wanted}; not installed",
                                f'pip install "{requirement}"'))  # fmt: skip
        elif not requirement.specifier.contains(_release(installed), prereleases=True):
            checks.append(Check("environment", name, FAIL, f"{wanted}; {installed} is installed",
                                f'pip install "{requirement}"'))  # fmt: skip
        else:
            checks.append(Check("environment", name, OK, f"{installed} ({wanted})"))
    return checks


# -- the host runner ---------------------------------------------------------------------------


def _host_runner_dir() -> Path | None:
    """Where ensure_runner("host") keeps the bundle this checkout would build, or
    None when etdeploy cannot even work out its key (no executorch, no sources)."""
    from etdeploy.paths import cache_dir
    from etdeploy.runner_build import bundle_key, host_abi

    system = platform.system()
    abi = host_abi() if system == "Linux" else f"{system.lower()}-{host_abi()}"
    try:
        key = bundle_key("host")
    except EtdeployError:
        return None
    return cache_dir("runners") / f"{abi}-{key[:16]}"


def host_runner_checks() -> list[Check]:
    from etdeploy.runner_build import runner_from_path

    try:
        directory = _host_runner_dir()
    except OSError as exc:
        return [Check("runner", "host runner", WARN, f"cannot tell whether it is built: {exc}")]
    if directory is None:
        return [Check("runner", "host runner", FAIL, "cannot be built: the runner sources or executorch's "
                      "CMake package are missing", "run from a source checkout or `pip install -e .`")]  # fmt: skip
    if not (directory / "bundle.json").is_file():
        return [Check("runner", "host runner", WARN, "not built yet; the first run builds it (cmake, a C++ "
                      "compiler, a minute or two)", "build it now: etdeploy runner build")]  # fmt: skip
    try:
        bundle = runner_from_path(directory)
    except EtdeployError as exc:
        return [
            Check(
                "runner",
                "host runner",
                WARN,
                exc.message,
                "rebuild it: etdeploy runner build --rebuild",
            )
        ]
    version = bundle.info.get("executorch_version", "?")
    return [
        Check(
            "runner",
            "host runner",
            OK,
            f"{bundle.abi}, built against executorch {version}: {directory}",
        )
    ]


# -- the arm64 bundle -------------------------------------------------------------------------

_MB = 1024 * 1024


def arm64_runner_checks() -> list[Check]:
    """The cross compiler, the aarch64 wheel and the cached arm64 bundle. Nothing
    is downloaded or built here; a missing piece warns (only an arm64 device
    needs it, and its own runner row says so)."""
    from etdeploy import runner_arm64
    from etdeploy.paths import cache_dir
    from etdeploy.runner_build import bundle_key, executorch_version, runner_from_path

    build = "etdeploy runner build --abi aarch64"
    try:
        cxx = runner_arm64.cross_compiler()
        major, minor = runner_arm64.glibc_version(cxx)
        compiler = runner_arm64.compiler_identity(cxx)
    except EtdeployError as exc:
        return [Check("runner", "arm64 cross compiler", WARN, exc.message, exc.hint or "")]
    checks = [Check("runner", "arm64 cross compiler", OK, f"{compiler}, glibc {major}.{minor}")]
    try:
        release = runner_arm64.release_of(executorch_version())
    except EtdeployError:
        return checks  # the environment rows already say executorch is missing
    wheel = runner_arm64.cached_wheel(release)
    if wheel is None:
        checks.append(Check("runner", "aarch64 wheel", WARN, f"executorch {release}'s aarch64 wheel is not "
                            "downloaded yet; the first arm64 build fetches it from PyPI with pip (about 18 MB) "
                            "and checks its sha256", f"fetch it now: {build}"))  # fmt: skip
    else:
        size = wheel.path.stat().st_size / _MB
        checks.append(Check("runner", "aarch64 wheel", OK, f"{wheel.path.name}, {size:.1f} MB, sha256 "
                            f"{wheel.sha256[:12]}… as published ({wheel.hash_source})"))  # fmt: skip
    try:
        directory = cache_dir("runners") / f"{runner_arm64.ABI}-{bundle_key('aarch64')[:16]}"
        bundle = runner_from_path(directory) if (directory / "bundle.json").is_file() else None
    except (EtdeployError, OSError) as exc:
        return [
            *checks,
            Check("runner", "arm64 runner", WARN, f"cannot tell whether it is built: {exc}"),
        ]
    if bundle is None:
        checks.append(Check("runner", "arm64 runner", WARN, "not built yet; an arm64 device builds it on "
                            "first use (about half a minute)", f"build it now: {build}"))  # fmt: skip
    else:
        size = runner_arm64.bundle_size(directory) / _MB
        version = bundle.info.get("executorch_version", "?")
        checks.append(Check("runner", "arm64 runner", OK, f"{bundle.kind} bundle, {size:.1f} MB, built "
                            f"against executorch {version}: {directory}"))  # fmt: skip
    return checks


def devices_table(name: str) -> str:
    """The TOML header of a device's table: [devices.pixel8], or with the name
    quoted when it is not a bare key, as an adb serial is ([devices."127.0.0.1:5555"])."""
    key = name if re.fullmatch(r"[A-Za-z0-9_-]+", name) else json.dumps(name)
    return f"[devices.{key}]"


def _arm64_runner_check(info: Any, name: str) -> Check | None:
    """A device that gets the arm64 bundle: whether it can be built here. None for
    any other device."""
    from etdeploy import runner_arm64
    from etdeploy.runner_build import KIND_ARM64, runner_choice

    try:
        if runner_choice(info).kind != KIND_ARM64:
            return None
    except EtdeployError:
        return None  # no bundle of ours runs there: the caller's rows say so
    if runner_arm64.cross_tool("g++") is None:
        ndk = " or ANDROID_NDK and EXECUTORCH_ANDROID_PREFIX" if info.os == "android" else ""
        return Check(
            "runner", name, FAIL,
            f"no runner for {info.abi}: none configured, and the arm64 bundle needs "
            f"{runner_arm64.cross_prefix()}g++",
            f"apt-get install {runner_arm64.CROSS_PACKAGE}{ndk}, or set runner = \"PATH\" in "
            f"{devices_table(info.name)}",
        )  # fmt: skip
    return Check("runner", name, OK, f"the arm64 bundle ({KIND_ARM64}) runs on {info.os} {info.abi}; "
                 "built on first use from the aarch64 wheel")  # fmt: skip


# -- adb ----------------------------------------------------------------------------------------


def adb_checks(config: Config, *, adb_host: str | None, adb_port: int | None) -> list[Check]:
    """The adb binary, and every adb server a device sits behind (the default one
    and each configured device's). A server is asked for its version, never started."""
    from etdeploy.devices.adb import connect_server
    from etdeploy.devices.registry import PROBE_TIMEOUT_S, adb_settings

    checks = [_adb_binary()]
    wanted_by: dict[tuple[str, int], list[str]] = {}
    servers: dict[tuple[str, int], Any] = {}
    try:
        default = adb_settings(adb_host=adb_host, adb_port=adb_port, where="--adb-host/--adb-port")
        servers[(default.host, default.port)] = default
        wanted_by[(default.host, default.port)] = []
    except EtdeployError as exc:
        checks.append(Check("adb", "adb server", FAIL, exc.message, exc.hint or ""))
    for name, device in config.devices.items():
        if device.transport != "adb":
            continue
        table = {k: v for k, v in device.settings.items() if k != "runner"}
        try:
            settings = adb_settings(
                table, adb_host=adb_host, adb_port=adb_port, where=f"devices.{name}"
            )
        except EtdeployError:
            continue  # the device row reports a bad table
        servers.setdefault((settings.host, settings.port), settings)
        wanted_by.setdefault((settings.host, settings.port), []).append(name)
    for key, settings in servers.items():
        probe = dataclasses.replace(
            settings,
            start_server=False,
            connect_timeout_s=min(settings.connect_timeout_s, PROBE_TIMEOUT_S),
        )
        users = wanted_by.get(key, [])
        label = f"adb server {settings.server}"
        try:
            version = connect_server(probe).server_version()
        except EtdeployError as exc:
            # Only a server a configured device needs is a failure; the default one
            # is started on demand on this host (as `adb` does).
            status = FAIL if users else WARN
            detail = exc.message + (f" (needed by {', '.join(users)})" if users else "")
            hint = exc.hint or ""
            if not users and settings.host in _LOCAL_HOSTS:
                hint = "only Android devices need one; etdeploy starts it on this host when a job needs it"
            checks.append(Check("adb", label, status, detail, hint))
            continue
        users_text = f"; serves {', '.join(users)}" if users else ""
        checks.append(Check("adb", label, OK, f"answers, protocol 1.0.{version}{users_text}"))
    return checks


def _adb_binary() -> Check:
    try:
        import adbutils

        path = adbutils.adb_path()
    except Exception as exc:  # adbutils raises its own kinds when no binary fits this host
        return Check(
            "adb", "adb binary", WARN, f"not found: {exc}", "needed only for Android devices"
        )
    try:
        done = subprocess.run(
            [path, "version"], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check("adb", "adb binary", WARN, f"{path} does not run: {exc}", "reinstall adbutils")
    lines = done.stdout.splitlines()
    protocol = next(
        (line.rsplit(" ", 1)[-1] for line in lines if line.startswith("Android Debug Bridge")), "?"
    )
    release = next((line.split(" ", 1)[-1] for line in lines if line.startswith("Version ")), "?")
    return Check("adb", "adb binary", OK, f"{release} (protocol {protocol}): {path}")


# -- devices and their runners ---------------------------------------------------------------------


def device_checks(config: Config, *, adb_host: str | None, adb_port: int | None) -> list[Check]:
    """One row per device `--device` can name, then one per reachable device's runner."""
    from etdeploy.devices.registry import describe_devices

    checks: list[Check] = []
    runner_checks: list[Check] = []
    for row in describe_devices(config, adb_host=adb_host, adb_port=adb_port):
        if row.name == "adb" and not row.configured:
            continue  # the default server's state is the adb section's row
        what = " ".join(x for x in (row.model, row.os, row.os_version, row.abi) if x)
        via = f" via {row.via}" if row.via else ""
        if row.reachable:
            checks.append(
                Check("device", row.name, OK, f"{row.transport} {row.target}{via}: {what}")
            )
            runner = _runner_check(row, config)
            if runner.status == FAIL and not row.configured:
                # A phone that is merely attached is not one the farm or run is set up for.
                runner = dataclasses.replace(runner, status=WARN)
            runner_checks.append(runner)
        else:
            # A configured device that does not answer fails; a phone on a server
            # that nobody configured (unauthorized, offline) is worth a warning.
            status = FAIL if row.configured else WARN
            checks.append(Check("device", row.name, status, f"{row.transport} {row.target}{via}: {row.state}: "
                                f"{row.error}", row.hint))  # fmt: skip
    return checks + runner_checks


def _runner_check(row: Any, config: Config) -> Check:
    """Whether a runner can run on this device, without building one."""
    from etdeploy.devices.base import DeviceInfo
    from etdeploy.devices.registry import check_runner_abi
    from etdeploy.runner_build import host_abi, runner_from_path

    name = f"runner for {row.name}"
    info = DeviceInfo(
        name=row.name, transport=row.transport, serial=row.target, os=row.os, abi=row.abi
    )
    configured = config.devices.get(row.name)
    runner = configured.settings.get("runner") if configured else None
    try:
        if isinstance(runner, str):
            base = config.path.parent if config.path else Path.cwd()
            path = Path(os.path.expanduser(runner))
            bundle = runner_from_path(path if path.is_absolute() else base / path)
            check_runner_abi(info, bundle.abi)
            version = bundle.info.get("executorch_version")
            built = f", executorch {version}" if version else ""
            return Check(
                "runner", name, OK, f"configured runner for {bundle.abi} ({bundle.flavor}{built})"
            )
        arm64 = _arm64_runner_check(info, name)
        if arm64 is not None:
            return arm64
        if row.os == "android":
            missing = [
                v for v in ("ANDROID_NDK", "EXECUTORCH_ANDROID_PREFIX") if not os.environ.get(v)
            ]
            if missing:
                return Check(
                    "runner", name, FAIL,
                    f"no runner for {row.abi}: none configured, and building one needs {' and '.join(missing)}",
                    f'set runner = "PATH" in {devices_table(row.name)}, or set ANDROID_NDK and '
                    "EXECUTORCH_ANDROID_PREFIX (android_harness/README.md)",
                )  # fmt: skip
            return Check("runner", name, OK, f"built for {row.abi} with the NDK on first use")
        if row.os == platform.system().lower():
            check_runner_abi(info, host_abi() if row.os == "linux" else f"{row.os}-{host_abi()}")
            return Check(
                "runner", name, OK, f"the host runner ({host_abi()}) runs on {row.os} {row.abi}"
            )
        return Check(
            "runner", name, FAIL,
            f"no runner for {row.os} {row.abi}: etdeploy builds runners for this machine and for Android",
            f'build one on that machine (ios_harness/README.md) and set runner = "PATH" in {devices_table(row.name)}',
        )  # fmt: skip
    except EtdeployError as exc:
        return Check("runner", name, FAIL, exc.message, exc.hint or "")


def ssh_checks(config: Config) -> list[Check]:
    """Each SSH host (and each simulator's Mac): its key in the known_hosts file
    etdeploy reads. Reachability is the device row's; this says why a strict
    connection would be refused before it is tried."""
    import paramiko

    from etdeploy.devices.simulator import SimulatorSettings
    from etdeploy.devices.ssh import SshSettings, resolve_target

    checks = []
    for name, device in config.devices.items():
        if device.transport not in ("ssh", "ios-simulator"):
            continue
        table = {k: v for k, v in device.settings.items() if k != "runner"}
        label = f"host key for {name}"
        try:
            if device.transport == "ssh":
                settings = SshSettings.from_mapping(table, where=f"devices.{name}")
            else:
                settings = SimulatorSettings.from_mapping(table, where=f"devices.{name}").ssh
            target = resolve_target(settings)
        except EtdeployError as exc:
            checks.append(Check("ssh", label, FAIL, exc.message, exc.hint or ""))
            continue
        found = None
        for path in target.known_hosts:
            if not path.is_file():
                continue
            try:
                keys = paramiko.HostKeys(str(path))
            except (OSError, UnicodeDecodeError, paramiko.SSHException) as exc:
                checks.append(
                    Check("ssh", label, FAIL, f"cannot read {path}: {exc}", "check the file")
                )
                break
            if keys.lookup(target.host_key_name):
                found = path
                break
        else:
            policy = settings.host_key_policy
            files = ", ".join(str(p) for p in target.known_hosts)
            scan = f"ssh-keyscan -p {target.port} {target.hostname} >> {target.known_hosts[0]}"
            if policy == "accept-new":
                checks.append(Check("ssh", label, WARN, f"{target.host_key_name} is not in {files}; "
                                    "accept-new records it on first connect", f"or pin it now: {scan}"))  # fmt: skip
            else:
                checks.append(Check("ssh", label, FAIL, f"{target.host_key_name} is not in {files}, and the "
                                    "strict host key policy refuses unknown hosts",
                                    f"check the fingerprint, then: {scan}"))  # fmt: skip
        if found is not None:
            checks.append(Check("ssh", label, OK, f"{target.host_key_name} is known ({found})"))
    return checks


# -- a .pte ---------------------------------------------------------------------------------------


def pte_checks(pte: Path, config: Config) -> list[Check]:
    """What the runtime checks at load (the file identifier), what the schema
    version is, and the executorch that built it against this machine's and the
    runners', judged by ExecuTorch's compatibility policy: a pairing it does not
    promise is a warning (which operators and delegates are really missing is
    what --device checks)."""
    from etdeploy.builder.manifest import read_manifest
    from etdeploy.preflight.needs import version_verdict
    from etdeploy.sizecheck.pte import read_pte

    name = Path(pte).name
    try:
        layout = read_pte(pte)
    except EtdeployError as exc:
        return [
            Check("pte", name, FAIL, exc.message, exc.hint or "rebuild it with `etdeploy build`")
        ]
    checks = []
    header = "with" if layout.header is not None else "without"
    if layout.file_identifier != RUNTIME_FILE_IDENTIFIER:
        checks.append(Check(
            "pte", f"{name}: file identifier", FAIL,
            f"{layout.file_identifier!r}; the ExecuTorch 1.x runtime loads only {RUNTIME_FILE_IDENTIFIER!r}",
            "rebuild it with the executorch etdeploy pins (pip install -e .; etdeploy build)",
        ))  # fmt: skip
    else:
        checks.append(Check("pte", f"{name}: file identifier", OK,
                            f"{layout.file_identifier}, schema version {layout.schema_version}, {header} an "
                            f"extended header, {len(layout.methods)} method(s), {layout.file_size} bytes"))  # fmt: skip
    manifest = read_manifest(Path(pte))
    built = ((manifest or {}).get("versions") or {}).get("executorch")
    if built is None:
        checks.append(Check("pte", f"{name}: built with", WARN,
                            "no manifest beside it, so the executorch that built it is unknown",
                            "build with `etdeploy build` to get model.pte.json"))  # fmt: skip
        return checks
    checks.append(Check("pte", f"{name}: built with", OK, f"executorch {built}"))
    runtimes = [("this machine's executorch", _version("executorch"))]
    runtimes += _runner_versions(config)
    for label, version in runtimes:
        if version is None:
            continue
        # ExecuTorch's compatibility policy decides (etdeploy.preflight.needs cites it).
        verdict = version_verdict(str(built), version)
        status = OK if verdict.status == "ok" else WARN
        hint = "" if status == OK else "rebuild the .pte with that runtime's executorch"
        checks.append(Check("pte", f"{name}: vs {label}", status, verdict.text, hint))
    return checks


def _runner_versions(config: Config) -> list[tuple[str, str | None]]:
    """The executorch each known runner was built against: the cached host runner
    and every device's configured runner bundle."""
    import os

    from etdeploy.runner_build import runner_from_path

    found: list[tuple[str, str | None]] = []
    try:
        host = _host_runner_dir()
    except OSError:
        host = None
    if host is not None and (host / "bundle.json").is_file():
        with contextlib.suppress(EtdeployError):
            found.append(
                ("the host runner", str(runner_from_path(host).info.get("executorch_version")))
            )
    base = config.path.parent if config.path else Path.cwd()
    for name, device in config.devices.items():
        runner = device.settings.get("runner")
        if not isinstance(runner, str):
            continue
        path = Path(os.path.expanduser(runner))
        try:
            version = runner_from_path(path if path.is_absolute() else base / path).info.get(
                "executorch_version"
            )
        except EtdeployError:
            continue
        if version:
            found.append((f"{name}'s runner", str(version)))
    return found


# -- a .pte against a device's runner (preflight) -------------------------------------------------


def preflight_checks(
    pte: Path, device_name: str, config: Config, *, adb_host: str | None, adb_port: int | None
) -> list[Check]:
    """`--pte X --device NAME`: the comparison `run` makes before pushing, against
    the runner that device would get. Doctor never builds one: a runner not built
    yet is a warning saying how to build it."""
    from etdeploy.builder.manifest import read_manifest
    from etdeploy.devices.base import sha256_file
    from etdeploy.devices.registry import check_runner_abi, open_device
    from etdeploy.preflight import built_runner_for, check

    try:
        device = open_device(device_name, config, adb_host=adb_host, adb_port=adb_port)
    except EtdeployError as exc:
        return [Check("device", device_name, FAIL, exc.message, exc.hint or "")]
    with device:
        try:
            info = device.info()
            bundle, why = built_runner_for(device, info)
            if bundle is None:
                return [Check("preflight", f"{device_name}: runner", WARN, why[0], why[1])]
            check_runner_abi(info, bundle.abi)
            manifest = read_manifest(Path(pte))
            if manifest is not None and manifest.get("sha256") != sha256_file(Path(pte)):
                manifest = None  # it describes another file (run ignores it too)
            report = check(device, bundle, Path(pte), manifest)
        except EtdeployError as exc:
            # A bad .pte is the pte rows' failure (exit 2); a device or runner that
            # does not answer is infrastructure (exit 3).
            area = "pte" if exc.exit_code == EXIT_BAD_INPUT else "runner"
            return [Check(area, f"{device_name}: preflight", FAIL, exc.message, exc.hint or "")]
    return [
        Check("preflight", f"{device_name}: {f.subject}", f.status, f.detail, f.hint)
        for f in report.findings()
    ]

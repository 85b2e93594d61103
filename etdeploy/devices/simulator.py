"""An iOS simulator on a Mac reached over SSH: `xcrun simctl` drives it.

A simulator process is a Mac process that sees the Mac's file system, so files are
staged on the Mac by the wrapped SshDevice and the runner (built for the simulator
SDK, see ios_harness/) is started with `xcrun simctl spawn UDID PATH ARGS...` using
those Mac paths. The simulator is picked from `xcrun simctl list -j devices` by
name, UDID or runtime, and booted when needed (`simctl boot`, then
`simctl bootstatus -b`, which blocks until the boot has finished: `boot` alone
returns when CoreSimulator has accepted it).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from etdeploy.devices.base import Command, DeviceBase, DeviceInfo, RunOutput
from etdeploy.devices.digest_records import StatFlavour
from etdeploy.devices.ssh import SshDevice, SshSettings, check_setting_types
from etdeploy.devices.transfer import Download, RemoteFile, Upload
from etdeploy.errors import DeviceError, UsageError

# Runtime identifiers look like com.apple.CoreSimulator.SimRuntime.iOS-17-5; Xcode
# before 10.1 keyed the list by names like "iOS 12.1" instead (recorded samples in
# tests/data/simctl/, read 2026-12-02).
_RUNTIME_ID = re.compile(r"^com\.apple\.CoreSimulator\.SimRuntime\.([A-Za-z]+)-(\d+(?:-\d+)*)$")
_RUNTIME_NAME = re.compile(r"^([A-Za-z]+) (\d+(?:\.\d+)*)$")
_RUNTIME_WANTED = re.compile(r"^(?:([A-Za-z]+)[ -])?(\d+(?:[.-]\d+)*)$")
# simctl exits with (CoreSimulator error code & 0xff); 405, "Unable to boot device
# in current state: Booted", exits 149. Seen in public issue logs (read 2026-12-02).
_ALREADY_BOOTED_EXIT = 149
# simctl forwards variables with this prefix, prefix removed, to the spawned process.
_CHILD_ENV_PREFIX = "SIMCTL_CHILD_"


@dataclass(frozen=True)
class Simulator:
    """One entry of `simctl list -j devices`."""

    name: str
    udid: str
    runtime: str
    state: str
    is_available: bool
    device_type: str = ""
    availability_error: str = ""

    @property
    def platform(self) -> str:
        """'iOS', 'tvOS', 'watchOS', 'xrOS' ... from the runtime."""
        return runtime_platform_version(self.runtime)[0]

    @property
    def os_version(self) -> str:
        """'17.5' for com.apple.CoreSimulator.SimRuntime.iOS-17-5."""
        return runtime_platform_version(self.runtime)[1]

    @property
    def runtime_name(self) -> str:
        platform, version = runtime_platform_version(self.runtime)
        return f"{platform} {version}".strip()

    @property
    def booted(self) -> bool:
        return self.state == "Booted"

    def describe(self) -> str:
        return f"{self.name} ({self.runtime_name}, {self.state}, {self.udid})"


def runtime_platform_version(runtime: str) -> tuple[str, str]:
    """('iOS', '17.5') from either runtime spelling; ('', runtime) when neither fits."""
    match = _RUNTIME_ID.match(runtime)
    if match:
        return match.group(1), match.group(2).replace("-", ".")
    match = _RUNTIME_NAME.match(runtime)
    if match:
        return match.group(1), match.group(2)
    return "", runtime


def parse_simctl_devices(text: str) -> list[Simulator]:
    """The simulators in `xcrun simctl list -j devices` output, in listing order."""
    try:
        doc = json.loads(text)
        runtimes = doc["devices"]
        if not isinstance(runtimes, dict):
            raise TypeError("devices is not an object")
        simulators: list[Simulator] = []
        for runtime, entries in runtimes.items():
            for entry in entries:
                if "isAvailable" in entry:
                    available = bool(entry["isAvailable"])
                else:
                    # Before Xcode 10.1: "availability" : "(available)" or
                    # " (unavailable, runtime profile not found)".
                    available = str(entry.get("availability", "")).strip() == "(available)"
                simulators.append(
                    Simulator(
                        name=str(entry["name"]),
                        udid=str(entry["udid"]),
                        runtime=str(runtime),
                        state=str(entry.get("state", "")),
                        is_available=available,
                        device_type=str(entry.get("deviceTypeIdentifier", "")),
                        availability_error=str(entry.get("availabilityError", "")),
                    )
                )
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise DeviceError(
            f"`xcrun simctl list -j devices` printed something that is not a device list: {exc}",
            "run it by hand on the Mac; `xcode-select -p` should name a full Xcode",
        ) from exc
    return simulators


def _runtime_matches(simulator: Simulator, wanted: str) -> bool:
    """Whether 'wanted' names this simulator's runtime.

    Accepted: the identifier, 'iOS 17.5', 'iOS-17-5', '17.5', or a leading part of
    the version such as '17' (any 17.x).
    """
    wanted = wanted.strip()
    if wanted == simulator.runtime:
        return True
    match = _RUNTIME_WANTED.match(wanted)
    if not match:
        return False
    platform, version = match.group(1), match.group(2).replace("-", ".")
    if platform and platform.lower() != simulator.platform.lower():
        return False
    return simulator.os_version == version or simulator.os_version.startswith(version + ".")


def _ere_escape(text: str) -> str:
    """text as a literal POSIX extended regular expression (for pkill -f)."""
    return re.sub(r"([.\[\]()*+?{}|^$\\])", r"\\\1", text)


def _listing(simulators: Iterable[Simulator]) -> str:
    names = [s.describe() for s in simulators]
    if not names:
        return "none"
    shown = names[:12]
    more = f"; and {len(names) - len(shown)} more" if len(names) > len(shown) else ""
    return "; ".join(shown) + more


def select_simulator(
    simulators: Sequence[Simulator],
    *,
    name: str | None = None,
    udid: str | None = None,
    runtime: str | None = None,
    platform: str = "iOS",
) -> Simulator:
    """The one available simulator matching every given selector.

    With no selector, the single booted simulator of the platform. None or several
    matches are errors that list what there is to choose from.
    """
    if udid:
        for simulator in simulators:
            if simulator.udid.upper() == udid.upper():
                if not simulator.is_available:
                    reason = simulator.availability_error or "unavailable"
                    raise DeviceError(
                        f"simulator {simulator.describe()} is not usable: {reason}",
                        "install its runtime in Xcode (Settings > Platforms) or pick another",
                    )
                if name and simulator.name != name:
                    raise UsageError(
                        f"simulator {udid} is named {simulator.name!r}, not {name!r}",
                        "give the UDID or the name, not both",
                    )
                return simulator
        raise DeviceError(
            f"no simulator with UDID {udid} on the Mac",
            f"available: {_listing(s for s in simulators if s.is_available)}",
        )
    candidates = [
        s for s in simulators if s.is_available and s.platform.lower() == platform.lower()
    ]
    pool = candidates
    if name:
        pool = [s for s in pool if s.name == name]
    if runtime:
        pool = [s for s in pool if _runtime_matches(s, runtime)]
    if not name and not runtime:
        pool = [s for s in pool if s.booted]
        if len(pool) == 1:
            return pool[0]
        wanted = f"no {platform} simulator is booted" if not pool else "several are booted"
        raise UsageError(
            f"which simulator? {wanted}",
            f"set its name, udid or runtime; available: {_listing(pool or candidates)}",
        )
    if len(pool) == 1:
        return pool[0]
    asked = ", ".join(
        f"{key} {value!r}" for key, value in (("name", name), ("runtime", runtime)) if value
    )
    if not pool:
        raise DeviceError(
            f"no available {platform} simulator with {asked}",
            f"available: {_listing(candidates)}",
        )
    raise UsageError(
        f"{len(pool)} {platform} simulators match {asked}",
        f"add a runtime or give the UDID; they are: {_listing(pool)}",
    )


@dataclass(frozen=True)
class SimulatorSettings:
    """Which simulator on which Mac."""

    ssh: SshSettings
    name: str | None = None
    udid: str | None = None
    runtime: str | None = None
    boot: bool = True
    boot_timeout_s: float = 300.0
    xcrun: str = "xcrun"

    @classmethod
    def from_mapping(
        cls, values: Mapping[str, Any], *, where: str = "ios-simulator"
    ) -> SimulatorSettings:
        """From one etdeploy.toml device table: the Mac's ssh keys plus the selectors."""
        own = {k: v for k, v in values.items() if k in SIMULATOR_SETTING_TYPES}
        rest = {k: v for k, v in values.items() if k not in SIMULATOR_SETTING_TYPES}
        ssh = SshSettings.from_mapping(rest, where=where)
        return cls(ssh=ssh, **check_setting_types(own, SIMULATOR_SETTING_TYPES, where))


SIMULATOR_SETTING_TYPES: dict[str, type | tuple[type, ...]] = {
    "name": str,
    "udid": str,
    "runtime": str,
    "boot": bool,
    "boot_timeout_s": (int, float),
    "xcrun": str,
}


class SimulatorDevice(DeviceBase):
    """An iOS simulator, driven by simctl on a Mac over SSH."""

    transport = "ios-simulator"

    def __init__(
        self,
        settings: SimulatorSettings,
        *,
        name: str | None = None,
        mac: SshDevice | None = None,
        lock_timeout_s: float = 600.0,
    ) -> None:
        label = name or settings.name or settings.udid or f"simulator@{settings.ssh.host}"
        super().__init__(label, lock_timeout_s=lock_timeout_s)
        self.settings = settings
        self._owns_mac = mac is None
        self.mac = mac if mac is not None else SshDevice(settings.ssh, name=label)
        self._simulator: Simulator | None = None

    # -- simctl -----------------------------------------------------------------

    def _simctl(self, *args: str, deadline_s: float = 120.0) -> RunOutput:
        return self.mac.run([self.settings.xcrun, "simctl", *args], deadline_s=deadline_s)

    def _simctl_failure(self, what: str, out: RunOutput) -> DeviceError:
        detail = (out.stderr.strip() or out.stdout.strip()).splitlines()
        reason = detail[-1] if detail else f"exit status {out.exit_code}"
        if out.timed_out:
            reason = f"no answer within the deadline ({out.elapsed_s:.0f} s)"
        return DeviceError(
            f"{what} failed on {self.mac.target.display}: {reason}",
            "run the same xcrun simctl command on the Mac; `xcode-select -p` must "
            "name a full Xcode, not the command line tools",
            device=self.name,
            command=out.command,
            log=out.stderr,
        )

    def list_simulators(self) -> list[Simulator]:
        out = self._simctl("list", "-j", "devices", deadline_s=60)
        if out.exit_code != 0 or out.timed_out:
            raise self._simctl_failure("listing simulators", out)
        return parse_simctl_devices(out.stdout)

    @property
    def simulator(self) -> Simulator:
        """The selected simulator (listed once, refreshed by ensure_booted)."""
        if self._simulator is None:
            self._simulator = select_simulator(
                self.list_simulators(),
                name=self.settings.name,
                udid=self.settings.udid,
                runtime=self.settings.runtime,
            )
        return self._simulator

    def refresh(self) -> Simulator:
        udid = self.simulator.udid
        self._simulator = select_simulator(self.list_simulators(), udid=udid)
        return self._simulator

    def ensure_booted(self) -> Simulator:
        """Boot the simulator unless it is booted; wait until the boot has finished."""
        simulator = self.simulator
        if simulator.booted:
            return simulator
        if not self.settings.boot:
            raise DeviceError(
                f"simulator {simulator.describe()} is not booted",
                f"boot it (`xcrun simctl boot {simulator.udid}`) or allow booting",
                device=self.name,
            )
        if simulator.state == "Shutdown":
            out = self._simctl("boot", simulator.udid, deadline_s=self.settings.boot_timeout_s)
            if out.exit_code not in (0, _ALREADY_BOOTED_EXIT) or out.timed_out:
                raise self._simctl_failure(f"booting {simulator.describe()}", out)
        out = self._simctl(
            "bootstatus", simulator.udid, "-b", deadline_s=self.settings.boot_timeout_s
        )
        if out.exit_code != 0 or out.timed_out:
            raise self._simctl_failure(f"waiting for {simulator.describe()} to boot", out)
        simulator = self.refresh()
        if not simulator.booted:
            raise DeviceError(
                f"simulator {simulator.describe()} did not reach Booted",
                "open Simulator.app on the Mac to see why",
                device=self.name,
            )
        return simulator

    # -- identity ---------------------------------------------------------------

    def info(self) -> DeviceInfo:
        simulator = self.simulator
        # A simulator runs the Mac's own architecture (arm64 on Apple silicon).
        arch = self.mac.arch
        return DeviceInfo(
            name=self.name,
            transport=self.transport,
            serial=simulator.udid,
            os="ios-simulator",
            abi=f"ios-simulator-{arch}",
            model=simulator.name,
            os_version=simulator.os_version,
            state=simulator.state.lower(),
            extra={
                "runtime": simulator.runtime,
                "device_type": simulator.device_type,
                "mac": self.mac.target.display,
                "mac_os_version": self.mac.info().os_version,
            },
        )

    @property
    def workdir(self) -> str:
        return f"{self.mac.workdir.rstrip('/')}/ios-simulator"

    def lock_key(self) -> str:
        return f"ios-simulator:{self.mac.lock_key()}:{self.simulator.udid}"

    # -- files: the simulator sees the Mac's file system -------------------------
    # The Mac does the transfers; its hooks serve the shared push and pull.

    def resolve(self, remote: str) -> str:
        """Relative paths are below this device's work dir, as for every device."""
        if remote.startswith("/") or remote.startswith("~"):
            return self.mac.resolve(remote)
        return self.mac.resolve(f"{self.workdir}/{remote}")

    def sha256(self, remote: str) -> str | None:
        return self.mac.sha256(self.resolve(remote))

    def exists(self, remote: str) -> bool:
        return self.mac.exists(self.resolve(remote))

    def makedirs(self, remote: str) -> None:
        self.mac.makedirs(self.resolve(remote))

    def _remove(self, paths: Sequence[str], *, recursive: bool) -> None:
        self.mac._remove(paths, recursive=recursive)

    def _prepare_push(self, target: str) -> RemoteFile | None:
        return self.mac._prepare_push(target)

    def _verify(self, target: str, found: RemoteFile) -> str | None:
        return self.mac._verify(target, found)

    @property
    def stat_flavour(self) -> StatFlavour:
        return self.mac.stat_flavour

    def _helper(self, script: str, what: str, *, deadline_s: float = 120.0) -> str:
        return self.mac._helper(script, what, deadline_s=deadline_s)

    def _keep(self, target: str, found: RemoteFile, digest: str, mode: int) -> None:
        self.mac._keep(target, found, digest, mode)

    def _upload(self, upload: Upload) -> int:
        return self.mac._upload(upload)

    def _download(self, download: Download) -> None:
        self.mac._download(download)

    # -- processes ---------------------------------------------------------------

    def _run(self, command: Command) -> RunOutput:
        simulator = self.ensure_booted()
        program = command.argv[0]
        if "/" in program and not program.startswith("/"):
            program = self.resolve(program)
        spawn = [self.settings.xcrun, "simctl", "spawn", simulator.udid, program, *command.argv[1:]]
        child_env = {f"{_CHILD_ENV_PREFIX}{k}": v for k, v in command.env.items()}
        out = self.mac.run(
            spawn,
            deadline_s=command.deadline_s,
            cwd=self.resolve(command.cwd) if command.cwd else None,
            env=child_env,
            idle_timeout_s=command.idle_timeout_s,
        )
        if out.timed_out and program.startswith(self.mac.workdir.rstrip("/") + "/"):
            # The spawned process belongs to the simulator's launchd, not to simctl,
            # so killing simctl's group may leave it running: kill it by its path,
            # which is only safe for a program we staged in our own work dir.
            self.mac.run(
                ["pkill", "-KILL", "-f", "--", "^" + _ere_escape(program)],
                deadline_s=15,
            )
        return out

    def close(self) -> None:
        if self._owns_mac:
            self.mac.close()

"""`etdeploy doctor`: is this machine, and every device it is set up for, ready to run jobs?

Each check is a row: ok, warn (works, but worth knowing) or fail (a job would
fail), with a detail and, when something is wrong, a hint. The checks:

- environment: etdeploy, torch and executorch versions (importlib.metadata: this
  module never imports torch or executorch, which cost seconds), whether the
  installed pair is one executorch is built for, and executorch's own pinned
  dependencies (torchao);
- the host runner: built and cached, or built on first use (in the base install,
  without torch and executorch, runners come prebuilt in job bundles instead);
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

from collections.abc import Sequence
from pathlib import Path

from etdeploy.config import Config
from etdeploy.doctor.check import AREAS, FAIL, OK, WARN, Check, devices_table
from etdeploy.doctor.devices import adb_checks, device_checks, ssh_checks
from etdeploy.doctor.environment import environment_checks, pairing_check
from etdeploy.doctor.program import preflight_checks, pte_checks
from etdeploy.doctor.runners import arm64_runner_checks, bundled_runner_check, host_runner_checks
from etdeploy.errors import EXIT_BAD_INPUT, EXIT_INFRA, EXIT_OK
from etdeploy.extras import has_build_extra

__all__ = [
    "AREAS", "FAIL", "OK", "WARN", "Check", "adb_checks", "arm64_runner_checks",
    "device_checks", "devices_table", "environment_checks", "exit_code", "host_runner_checks",
    "pairing_check", "preflight_checks", "pte_checks", "run_doctor", "ssh_checks",
]  # fmt: skip


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
    runners = [*host_runner_checks(), *arm64_runner_checks()] if has_build_extra() else []
    checks = [*environment_checks(), *(runners or [bundled_runner_check()])]
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

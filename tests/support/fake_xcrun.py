"""A stand-in for Xcode's `xcrun simctl` on a Mac, for the simulator transport tests.

No Mac can run here, so the tests put a tiny `xcrun` shim first on the test sshd's
PATH that runs this file. It speaks the parts of simctl that SimulatorDevice uses,
with simctl's output format, exit codes and error wording (recorded from real
Xcode output, see tests/data/simctl/README.md):

- `xcrun simctl list [-j|--json] [devices]` prints the device list from a JSON state
  file (FAKE_SIMCTL_STATE), which the test seeds from a recorded sample.
- `xcrun simctl boot UDID` moves a Shutdown device to "Booting" (CoreSimulator
  returns once the boot has started, not finished); booting a Booted device fails
  with code 405 / exit 149 as simctl does.
- `xcrun simctl bootstatus UDID [-b]` finishes the boot ("Booted"); with -b it
  boots a Shutdown device first.
- `xcrun simctl spawn [-s] [-w] [-a ARCH] UDID PATH [ARGS...]` runs PATH directly
  (a simulator process is a Mac process that sees the Mac's files), with the
  caller's SIMCTL_CHILD_* variables, prefix removed, as its only environment
  beyond a minimal PATH, as simctl's launchd_sim does. The device must be Booted.

Every invocation is appended as one JSON line to FAKE_SIMCTL_LOG, so a test can
check what was asked (a boot, then a bootstatus).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

# simctl reports CoreSimulator errors as "domain=..., code=N" and exits with N & 0xff;
# code 405 (exit 149) is the "in current state" family. Seen in public issue logs,
# e.g. wix/Detox#3933, software-mansion/argent#1029 (read 2026-12-02).
SIM_ERROR_STATE = 405
SPAWN_PATH = "/usr/bin:/bin:/usr/sbin:/sbin"


def _error(code: int, message: str) -> int:
    sys.stderr.write(
        "An error was encountered processing the command "
        f"(domain=com.apple.CoreSimulator.SimError, code={code}):\n{message}\n"
    )
    return code & 0xFF


def _state_path() -> Path:
    return Path(os.environ["FAKE_SIMCTL_STATE"])


def _load() -> dict[str, object]:
    return json.loads(_state_path().read_text())


def _save(doc: dict[str, object]) -> None:
    path = _state_path()
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=2, separators=(",", " : ")) + "\n")
    os.replace(tmp, path)


def _find(doc: dict[str, object], udid: str) -> dict[str, object] | None:
    devices = doc["devices"]
    assert isinstance(devices, dict)
    for entries in devices.values():
        for device in entries:
            if udid == "booted" and device.get("state") == "Booted":
                return device
            if device.get("udid") == udid:
                return device
    return None


def _log(argv: list[str]) -> None:
    log = os.environ.get("FAKE_SIMCTL_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as f:
            f.write(json.dumps(argv) + "\n")


def _list(args: list[str]) -> int:
    doc = _load()
    words = [a for a in args if not a.startswith("-")]
    if words and words[0] != "devices":
        return _error(22, f"Unsupported list type in this stand-in: {words[0]}")
    if "-j" not in args and "--json" not in args:
        for runtime, entries in doc["devices"].items():  # type: ignore[union-attr]
            print(f"-- {runtime} --")
            for d in entries:
                print(f"    {d['name']} ({d['udid']}) ({d['state']})")
        return 0
    sys.stdout.write(
        json.dumps({"devices": doc["devices"]}, indent=2, separators=(",", " : ")) + "\n"
    )
    return 0


def _boot(args: list[str]) -> int:
    if not args:
        return _error(22, "Usage: simctl boot <device>")
    doc = _load()
    device = _find(doc, args[0])
    if device is None:
        return _error(164, f"Invalid device: {args[0]}")
    if device["state"] != "Shutdown":
        return _error(SIM_ERROR_STATE, f"Unable to boot device in current state: {device['state']}")
    device["state"] = "Booting"
    _save(doc)
    return 0


def _bootstatus(args: list[str]) -> int:
    positional = [a for a in args if not a.startswith("-")]
    if not positional:
        return _error(22, "Usage: simctl bootstatus <device> [-bcd]")
    doc = _load()
    device = _find(doc, positional[0])
    if device is None:
        return _error(164, f"Invalid device: {positional[0]}")
    print(f"Monitoring boot status for {device['name']} ({device['udid']}).")
    if device["state"] == "Shutdown" and "-b" not in args:
        # Without -b, bootstatus waits for someone else to boot the device.
        return _error(SIM_ERROR_STATE, "Device is not booted and -b was not given.")
    if device["state"] == "Booted":
        print("Device already booted, nothing to do.")
        return 0
    device["state"] = "Booted"
    _save(doc)
    print("Finished")
    return 0


def _spawn(args: list[str]) -> int:
    rest = list(args)
    while rest and rest[0].startswith("-"):
        flag = rest.pop(0)
        if flag in ("-a", "--arch") and rest:
            rest.pop(0)
    if len(rest) < 2:
        return _error(22, "Usage: simctl spawn [-w] [-s] [-a <arch>] <device> <path> [<argv>...]")
    udid, command = rest[0], rest[1:]
    doc = _load()
    device = _find(doc, udid)
    if device is None:
        return _error(164, f"Invalid device: {udid}")
    if device["state"] != "Booted":
        return _error(
            SIM_ERROR_STATE, "Process spawn via launchd failed because device is not booted."
        )
    env = {"PATH": SPAWN_PATH, "SIMULATOR_UDID": str(device["udid"])}
    for key, value in os.environ.items():
        if key.startswith("SIMCTL_CHILD_"):
            env[key.removeprefix("SIMCTL_CHILD_")] = value
    sys.stdout.flush()
    try:
        os.execvpe(command[0], command, env)
    except OSError as exc:
        return _error(2, f"Unable to spawn {command[0]}: {exc.strerror}")
    return 0  # not reached: exec replaced this process


def main(argv: list[str]) -> int:
    _log(argv)
    if not argv or argv[0] != "simctl":
        sys.stderr.write("xcrun (etdeploy test stand-in): only `simctl` is provided\n")
        return 72
    if len(argv) < 2:
        return _error(22, "Usage: simctl <subcommand> ...")
    subcommand, args = argv[1], argv[2:]
    handlers = {"list": _list, "boot": _boot, "bootstatus": _bootstatus, "spawn": _spawn}
    handler = handlers.get(subcommand)
    if handler is None:
        return _error(22, f"Unknown subcommand in this stand-in: {subcommand}")
    return handler(args)


def install(bin_dir: Path) -> Path:
    """Write an executable `xcrun` into bin_dir that runs this file with this Python."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    shim = bin_dir / "xcrun"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{Path(__file__).resolve()}" "$@"\n')
    shim.chmod(0o755)
    return shim


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

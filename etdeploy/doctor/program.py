"""A .pte: what the runtime needs of it, the executorch that built it against
this machine's and the runners', and with a device its preflight there."""

from __future__ import annotations

import contextlib
from pathlib import Path

from etdeploy.builder.manifest import read_manifest
from etdeploy.config import Config
from etdeploy.devices.registry import check_runner_abi, configured_runner, open_device
from etdeploy.digests import sha256_file
from etdeploy.doctor.check import FAIL, OK, WARN, Check
from etdeploy.doctor.environment import installed_version
from etdeploy.doctor.runners import host_runner_dir
from etdeploy.errors import EXIT_BAD_INPUT, EtdeployError
from etdeploy.preflight import built_runner_for, check
from etdeploy.preflight.needs import version_verdict
from etdeploy.runner_build import runner_from_path

# The program file identifier the ExecuTorch 1.x runtime accepts (schema/program.fbs:
# file_identifier "ET12"); a program with another is refused at load.
RUNTIME_FILE_IDENTIFIER = "ET12"


# -- a .pte ---------------------------------------------------------------------------------------


def pte_checks(pte: Path, config: Config) -> list[Check]:
    """What the runtime checks at load (the file identifier), what the schema
    version is, and the executorch that built it against this machine's and the
    runners', judged by ExecuTorch's compatibility policy: a pairing it does not
    promise is a warning (which operators and delegates are really missing is
    what --device checks)."""
    from etdeploy.pte.reader import read_pte

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
    built = manifest.executorch_version if manifest is not None else None
    if built is None:
        checks.append(Check("pte", f"{name}: built with", WARN,
                            "no manifest beside it, so the executorch that built it is unknown",
                            "build with `etdeploy build` to get model.pte.json"))  # fmt: skip
        return checks
    checks.append(Check("pte", f"{name}: built with", OK, f"executorch {built}"))
    runtimes = [("this machine's executorch", installed_version("executorch"))]
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

    found: list[tuple[str, str | None]] = []
    try:
        host = host_runner_dir()
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
    try:
        device = open_device(device_name, config, adb_host=adb_host, adb_port=adb_port)
        runner = configured_runner(device_name, config)
    except EtdeployError as exc:
        return [Check("device", device_name, FAIL, exc.message, exc.hint or "")]
    with contextlib.closing(device):
        try:
            info = device.info()
            bundle, why = built_runner_for(info, runner)
            if bundle is None:
                return [Check("preflight", f"{device_name}: runner", WARN, why[0], why[1])]
            check_runner_abi(info, bundle.abi)
            manifest = read_manifest(Path(pte))
            if manifest is not None and manifest.sha256 != sha256_file(Path(pte)):
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

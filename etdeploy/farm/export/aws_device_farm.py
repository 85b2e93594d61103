"""`etdeploy farm export aws-device-farm SPEC.toml`: a custom-environment test spec
and a test package that run one device's jobs of a farm spec on AWS Device Farm.

Device Farm runs a custom test environment on a host of its own with the phone
attached over adb, one host per phone of the device pool; the test spec (YAML)
lists the commands of its phases, and the test package (a zip) is unpacked on
the host. The host only runs: each job is made here into a job bundle
(etdeploy.bundle: the program, the device's runner, the staged samples, the
references, the settings), and the host installs etdeploy's base install, without
torch or executorch. What is written to OUT:

    OUT/testspec.yml                 upload as the run's custom test spec
    OUT/etdeploy-farm-tests.zip      upload as the test package
    OUT/package/                     what the zip holds:
        requirements.txt             etdeploy's base dependencies (no torch, no executorch)
        etdeploy-src/etdeploy/       the etdeploy that exported, run from here (PYTHONPATH)
        tests/SPEC.toml              the device's jobs, each a [[farm.job]] naming its bundle
        tests/bundles/N-MODEL/       one job bundle per job, with the device's runner

The exported spec holds the jobs of one device name (--device) with their keys
unchanged, so its results merge with other shards' (`etdeploy farm merge`). Its
[devices.NAME] table is an adb device whose serial the pre_test phase fills in
from $DEVICEFARM_DEVICE_UDID; the runner is the one the spec's table names (the
Android runner bundle, which the host cannot build), carried in every bundle. The
test phase runs the farm into $DEVICEFARM_LOG_DIR/etdeploy-farm (results.jsonl,
farm.json, junit.xml, report.html), which Device Farm keeps as the run's artifacts;
a failed check fails the test phase (exit 1), which fails the Device Farm test.

The test spec's format and the host, as read on 2026-12-03 in the AWS Device
Farm developer guide (docs.aws.amazon.com/devicefarm/latest/developerguide/):
custom-test-environment-test-spec.html (version 0.1; android_test_host; phases
install, pre_test, test, post_test, each a list of commands; artifacts, a list
of locations, no wildcards; a failed command in the test phase fails the
test), custom-test-environment-variables.html and
custom-test-environment-env-common.html ($DEVICEFARM_DEVICE_UDID,
$DEVICEFARM_DEVICE_NAME, $DEVICEFARM_DEVICE_PLATFORM_NAME,
$DEVICEFARM_DEVICE_OS_VERSION, $DEVICEFARM_LOG_DIR, whose files become the
artifacts; $DEVICEFARM_TEST_PACKAGE_PATH, where the package is unpacked),
custom-test-environments-hosts.html (Android: amazon_linux_2, x86_64, Android 6
and later), amazon-linux-2-supported-software.html and
amazon-linux-2-devicefarm-cli.html (`devicefarm-cli use python 3.11`; Python
3.8 to 3.11 preinstalled).

Amazon Linux 2 has glibc 2.26, and the torch 2.13.0 and executorch 1.5.1 wheels are
manylinux_2_28 (their WHEEL tags): they cannot install there, which is why the host
runs bundles. The base install's dependencies are asked for as ranges with
--only-binary=:all:, so pip takes the newest release of each that has a wheel for
that glibc (numpy 2.2.x where 2.3 and later are manylinux_2_27 or newer): a
resolution checked here with pip's --platform manylinux_2_26_x86_64 (tests/farm/
test_aws_device_farm.py). Not tried here (no AWS account): an upload, a run, the
package type's upload validator, the install on Amazon Linux 2 itself.
"""

from __future__ import annotations

import os
import shutil
import sys
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import etdeploy
from etdeploy.errors import EtdeployError, UsageError
from etdeploy.extras import BUILD_PACKAGES
from etdeploy.farm.export import toml_text
from etdeploy.farm.spec import FarmJob, FarmSpec, load_farm_spec
from etdeploy.jsonvalue import read_str
from etdeploy.runner_build import RunnerBundle, runner_from_path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - 3.10
    import tomli as tomllib

TARGET = "aws-device-farm"
TEST_SPEC_NAME = "testspec.yml"
PACKAGE_ZIP_NAME = "etdeploy-farm-tests.zip"
PACKAGE_DIR_NAME = "package"
# Where the farm writes on the host, below $DEVICEFARM_LOG_DIR (kept as artifacts).
RESULTS_DIR_NAME = "etdeploy-farm"
# The exported device table's serial until pre_test writes $DEVICEFARM_DEVICE_UDID in.
UDID_PLACEHOLDER = "@DEVICEFARM_DEVICE_UDID@"
# devicefarm-cli offers Python 3.8 to 3.11 on the amazon_linux_2 host (read 2026-12-03,
# amazon-linux-2-supported-software.html).
HOST_PYTHON = "3.11"
# The host's C library (amazon-linux-2-supported-software.html: Amazon Linux 2, glibc 2.26).
HOST_PLATFORM = "manylinux_2_26_x86_64"
# The farm's own keys an exported [farm] keeps: how it paces the device's jobs.
_PACING_KEYS = ("backoff_s", "backoff_max_s", "lock_timeout_s", "cooldown_s", "jobs_per_device")
# Tables of the spec the size verdicts read, kept as they are.
_SIZE_TABLES = ("limits", "sizecheck")
# Files and folders the etdeploy source copy leaves out.
_SOURCE_SKIP = ("__pycache__", "*.pyc", "*.pyo", ".*")


@dataclass
class Export:
    """What an export wrote, and what the user should know about it."""

    out_dir: Path
    device: str
    jobs: list[FarmJob]
    test_spec: Path
    package_zip: Path
    package_dir: Path
    spec_in_package: str  # the exported spec, relative to the package root
    files: list[str] = field(default_factory=list)  # the bundles, package-relative
    notes: list[str] = field(default_factory=list)


def export_aws_device_farm(spec_path: Path, out_dir: Path, device: str | None = None) -> Export:
    """Write OUT/testspec.yml, OUT/package/ and its zip for DEVICE's jobs of SPEC."""
    spec_path = Path(spec_path).resolve()
    spec = load_farm_spec(spec_path)
    name = _pick_device(spec, device)
    jobs = [job for job in spec.jobs if job.device == name]
    runner = runner_from_path(_runner_of(spec, name))
    out_dir = Path(out_dir)
    package = out_dir / PACKAGE_DIR_NAME
    if package.exists():
        shutil.rmtree(package)  # ours from an earlier export: rewritten whole
    tests = package / "tests"
    tests.mkdir(parents=True)
    entries, bundles = [], []
    for i, job in enumerate(jobs):
        relative = f"bundles/{i:02d}-{_slug(job.model)}"
        _bundle_job(job, tests / relative, runner)
        bundles.append(f"tests/{relative}")
        entries.append({
            "model": job.model, "bundle": relative, "backend": job.backend,
            "quantize": job.quantize or "none", "device": name,
            "job_timeout_s": job.job_timeout_s, "retries": job.retries,
        })  # fmt: skip
    exported_spec = tests / spec_path.name
    exported_spec.write_text(
        f"# {name}'s jobs of {spec_path.name}, exported by etdeploy for AWS Device Farm:\n"
        "# each a job bundle made where torch is; the host runs them without it.\n"
        f"# The pre_test phase writes the attached phone's serial over {UDID_PLACEHOLDER}.\n"
        + toml_text.dumps(_exported_document(spec, spec_path, name, entries))
    )
    _check_same_jobs(exported_spec, jobs)
    (package / "requirements.txt").write_text(requirements_text())
    _copy_source(package / "etdeploy-src" / "etdeploy")
    package_spec = str(exported_spec.relative_to(package))
    test_spec = out_dir / TEST_SPEC_NAME
    test_spec.write_text(test_spec_text(package_spec))
    archive = out_dir / PACKAGE_ZIP_NAME
    _zip(package, archive)
    return Export(out_dir, name, jobs, test_spec, archive, package, package_spec, bundles)


def _bundle_job(job: FarmJob, target: Path, runner: RunnerBundle) -> None:
    """The job as a bundle carrying the device's runner; a job that is a bundle
    already is copied as it is."""
    from etdeploy.pipeline.make_bundle import make_bundle

    existing = job.settings.get("bundle")
    if existing is not None:
        shutil.copytree(existing, target)
        return
    make_bundle(job.run_job(), target, [runner])


def _exported_document(
    spec: FarmSpec, spec_path: Path, name: str, entries: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """The exported spec: the device's jobs as bundles, its pacing, its size tables."""
    original = tomllib.loads(spec_path.read_text())
    paced = {key: original["farm"][key] for key in _PACING_KEYS if key in original["farm"]}
    document: dict[str, Any] = {"farm": {**paced, "job": list(entries)}}
    document.update({key: original[key] for key in _SIZE_TABLES if key in original})
    document["devices"] = {name: {"transport": "adb", "serial": UDID_PLACEHOLDER}}
    return document


def _slug(model: str) -> str:
    """A folder name for a model reference ("models/kws.py:build" -> "kws-build")."""
    stem = Path(model.replace(":", "-")).name
    return "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in stem) or "model"


# -- which device, which runner ----------------------------------------------------------------


def _pick_device(spec: FarmSpec, wanted: str | None) -> str:
    provided = {n for source in spec.sources for n in source.names}
    android = [
        d for d in spec.devices
        if d in provided or (d in spec.config.devices and spec.config.devices[d].transport == "adb")
    ]  # fmt: skip
    if wanted is None:
        if len(android) != 1:
            found = ", ".join(android) or "none"
            raise UsageError(
                f"{spec.path.name}: which device's jobs? Android devices with jobs: {found}",
                "give --device NAME: its jobs run on each phone of the Device Farm device pool",
            )
        return android[0]
    if wanted not in spec.devices:
        raise UsageError(f"{spec.path.name}: no job runs on {wanted!r}",
                         f"devices with jobs: {', '.join(spec.devices)}")  # fmt: skip
    if wanted not in android:
        transport = spec.config.devices[wanted].transport if wanted in spec.config.devices else None
        raise UsageError(
            f"{spec.path.name}: {wanted} is {'a ' + transport if transport else 'not an adb'} "
            "device; Device Farm's custom environments for Android attach a phone over adb",
            f"export one of: {', '.join(android) or 'no adb device in this spec'}",
        )
    return wanted


def _runner_of(spec: FarmSpec, name: str) -> Path:
    table = spec.config.devices.get(name)
    runner: str | None = None
    if table is not None:
        runner = read_str(table.settings, "runner", None, f"devices.{name}")
    else:
        runner = next((s.runner for s in spec.sources if name in s.names), None)
    if not runner:
        raise UsageError(
            f"{spec.path.name}: {name} names no runner",
            f'give [devices.{name}] runner = "PATH" (the Android runner bundle, `etdeploy runner '
            "build --abi arm64-v8a`): the Device Farm host cannot build one",
        )
    path = Path(runner).expanduser()
    path = path if path.is_absolute() else spec.path.parent / path
    if not path.exists():
        raise UsageError(f"{spec.path.name}: {name}'s runner not found: {path}", "build it first")
    return path


def _check_same_jobs(exported_spec: Path, jobs: Sequence[FarmJob]) -> None:
    """The exported spec must plan exactly NAME's jobs of the original, same keys."""
    try:
        again = load_farm_spec(exported_spec)
    except UsageError as exc:
        raise EtdeployError(f"the exported spec does not read: {exc.message}",
                            "report this: the export changed the spec") from None  # fmt: skip
    want, got = [j.key for j in jobs], [j.key for j in again.jobs]
    if sorted(want) != sorted(got):
        raise EtdeployError(
            f"the exported spec plans other jobs than the original ({len(got)} vs {len(want)})",
            "report this with the spec: the export changed the matrix",
        )


# -- files -------------------------------------------------------------------------------------


def _copy(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    if source.is_dir():
        shutil.copytree(
            source, target, dirs_exist_ok=True, ignore=shutil.ignore_patterns(*_SOURCE_SKIP)
        )
    else:
        shutil.copy2(source, target)


def _copy_source(target: Path) -> None:
    """The etdeploy package that is running, as source."""
    _copy(Path(etdeploy.__file__).resolve().parent, target)


def _zip(folder: Path, archive: Path) -> None:
    """The package as a zip, entries in a stable order, file modes kept."""
    tmp = archive.with_name(f".{archive.name}.partial")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                zf.write(path, path.relative_to(folder).as_posix())
    os.replace(tmp, archive)


def requirements_text() -> str:
    """etdeploy's base dependencies as it declares them (ranges, no extras): the host
    installs them with --only-binary=:all:, so pip picks releases with wheels for its
    glibc (module docstring)."""
    lines = ["# etdeploy's base install: no torch, no executorch (the jobs are bundles)."]
    lines += base_requirements()
    return "\n".join(lines) + "\n"


def base_requirements() -> list[str]:
    """The running etdeploy's base dependencies: from pyproject.toml beside the package
    in a source checkout, else from its installed metadata."""
    pyproject = Path(etdeploy.__file__).resolve().parent.parent / "pyproject.toml"
    if pyproject.is_file():
        project = tomllib.loads(pyproject.read_text()).get("project", {})
        declared = list(project.get("dependencies", []))
    else:
        declared = [r for r in metadata.requires("etdeploy") or [] if "extra ==" not in r]
    # Never torch or executorch on the host, whatever an old install's metadata says.
    return [r for r in declared if _project_name(r).lower() not in BUILD_PACKAGES]


def _project_name(requirement: str) -> str:
    for i, ch in enumerate(requirement):
        if not (ch.isalnum() or ch in "-_."):
            return requirement[:i].strip()
    return requirement.strip()


# -- the test spec -----------------------------------------------------------------------------


def test_spec_phases(package_spec: str) -> dict[str, list[str]]:
    """The commands of each phase; package_spec is the spec's path in the package."""
    package = "$DEVICEFARM_TEST_PACKAGE_PATH"
    results = f"$DEVICEFARM_LOG_DIR/{RESULTS_DIR_NAME}"
    spec = f'"{package}/{package_spec}"'
    return {
        "install": [
            f"devicefarm-cli use python {HOST_PYTHON}",
            "python --version",
            f"python -m pip install --disable-pip-version-check --only-binary=:all: "
            f'-r "{package}/requirements.txt"',
        ],
        "pre_test": [
            f'cd "{package}"',
            # etdeploy runs from the package's copy; its farm workers inherit the path.
            f'export PYTHONPATH="{package}/etdeploy-src${{PYTHONPATH:+:$PYTHONPATH}}"',
            f'sed -i "s|{UDID_PLACEHOLDER}|$DEVICEFARM_DEVICE_UDID|" {spec}',
            'python -c \'import etdeploy; print("etdeploy", etdeploy.__version__, "from", etdeploy.__file__)\'',
            "python -m etdeploy devices",
        ],
        "test": [
            f'python -m etdeploy farm run {spec} --out "{results}" '
            f'--junit "{results}/junit.xml" --html "{results}/report.html"',
        ],
        "post_test": [f'ls -l "{results}"'],
    }


def test_spec_text(package_spec: str) -> str:
    """The test spec as YAML: every command a double-quoted scalar (json.dumps
    writes one: JSON's escapes are YAML's too), no tabs."""
    import json

    lines = [
        "# AWS Device Farm custom test environment, written by `etdeploy farm export aws-device-farm`.",
        "# Test spec syntax: docs.aws.amazon.com/devicefarm/latest/developerguide/"
        "custom-test-environment-test-spec.html",
        "version: 0.1",
        "",
        "android_test_host: amazon_linux_2",
        "",
        "phases:",
    ]
    for phase, commands in test_spec_phases(package_spec).items():
        lines += [f"  {phase}:", "    commands:"]
        lines += [f"      - {json.dumps(command)}" for command in commands]
    lines += ["", "artifacts:", "  # Its files are kept after the run: the farm's results and reports.",
              "  - $DEVICEFARM_LOG_DIR"]  # fmt: skip
    return "\n".join(lines) + "\n"

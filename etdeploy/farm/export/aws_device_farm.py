"""`etdeploy farm export aws-device-farm SPEC.toml`: a custom-environment test spec
and a test package that run one device's jobs of a farm spec on AWS Device Farm.

Device Farm runs a custom test environment on a host of its own with the phone
attached over adb, one host per phone of the device pool; the test spec (YAML)
lists the commands of its phases, and the test package (a zip) is unpacked on
the host. What is written to OUT:

    OUT/testspec.yml                 upload as the run's custom test spec
    OUT/etdeploy-farm-tests.zip      upload as the test package
    OUT/package/                     what the zip holds:
        requirements.txt             etdeploy's dependencies, pinned to this machine's versions
        etdeploy-src/etdeploy/       the etdeploy that exported, run from here (PYTHONPATH)
        runner/NAME/                 the device's runner bundle (Android: the NDK build)
        tests/...                    the spec, and the files it names, in their relative layout

The exported spec holds the jobs of one device name (--device) with their keys
unchanged, so its results merge with other shards' (`etdeploy farm merge`). Its
[devices.NAME] table is an adb device whose serial the pre_test phase fills in
from $DEVICEFARM_DEVICE_UDID. The test phase runs the farm into
$DEVICEFARM_LOG_DIR/etdeploy-farm (results.jsonl, farm.json, junit.xml,
report.html), which Device Farm keeps as the run's artifacts; a failed check
fails the test phase (exit 1), which fails the Device Farm test.

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

Not tried here (no AWS account): an upload, a run, the package type's upload
validator. Known problem: Amazon Linux 2 has glibc 2.26, and the torch 2.13.0 and
executorch 1.5.1 wheels are manylinux_2_28 (glibc 2.28 or later; read from the
installed wheels' WHEEL tags), so pip cannot install them on that host; the
install phase checks the host's glibc first and stops with that message.
"""

from __future__ import annotations

import glob
import os
import shutil
import sys
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from etdeploy.errors import EtdeployError, UsageError
from etdeploy.farm.export import toml_text
from etdeploy.farm.spec import FarmJob, FarmSpec, load_farm_spec

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
# amazon-linux-2-supported-software.html); etdeploy's wheels of torch and executorch
# are built for 3.11 here.
HOST_PYTHON = "3.11"
# manylinux_2_28: the tag of the torch 2.13.0 and executorch 1.5.1 wheels (their
# WHEEL files), i.e. glibc 2.28 or later on the host.
MIN_GLIBC = (2, 28)
# torch's CPU-only wheels ("2.13.0+cpu"); PyPI's torch for Linux bundles CUDA (GBs).
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
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
    files: list[str] = field(default_factory=list)  # spec files copied in, package-relative
    notes: list[str] = field(default_factory=list)


def export_aws_device_farm(spec_path: Path, out_dir: Path, device: str | None = None) -> Export:
    """Write OUT/testspec.yml, OUT/package/ and its zip for DEVICE's jobs of SPEC."""
    spec_path = Path(spec_path).resolve()
    spec = load_farm_spec(spec_path)
    name = _pick_device(spec, device)
    jobs = [job for job in spec.jobs if job.device == name]
    runner = _runner_of(spec, name)
    out_dir = Path(out_dir)
    package = out_dir / PACKAGE_DIR_NAME
    if package.exists():
        shutil.rmtree(package)  # ours from an earlier export: rewritten whole
    package.mkdir(parents=True)
    notes: list[str] = []

    data = tomllib.loads(spec_path.read_text())
    exported = _spec_for_device(data, name)
    refs = list(_file_refs(exported, spec_path.parent))
    root = _common_root([spec_path.parent, *(path for _text, path in refs)])
    tests = package / "tests"
    spec_rel = spec_path.relative_to(root)
    copied: list[str] = []
    for _text, path in refs:
        for source in _expand(path):
            target = tests / source.relative_to(root)
            _copy(source, target)
            copied.append(str(target.relative_to(package)))
    runner_dir = package / "runner" / runner.name
    _copy(runner, runner_dir)
    exported_spec = tests / spec_rel
    exported["devices"] = {
        name: {
            "transport": "adb",
            "serial": UDID_PLACEHOLDER,
            "runner": os.path.relpath(runner_dir, exported_spec.parent),
        }
    }
    exported_spec.parent.mkdir(parents=True, exist_ok=True)
    exported_spec.write_text(
        f"# {name}'s jobs of {spec_path.name}, exported by etdeploy for AWS Device Farm.\n"
        f"# The pre_test phase writes the attached phone's serial over {UDID_PLACEHOLDER}.\n"
        + toml_text.dumps(exported)
    )
    _check_same_jobs(exported_spec, jobs)
    (package / "requirements.txt").write_text(requirements_text())
    _copy_source(package / "etdeploy-src" / "etdeploy")
    package_spec = str(exported_spec.relative_to(package))
    test_spec = out_dir / TEST_SPEC_NAME
    test_spec.write_text(test_spec_text(package_spec))
    archive = out_dir / PACKAGE_ZIP_NAME
    _zip(package, archive)
    if any(Path(text).is_absolute() for text, _path in refs):
        notes.append(
            "files named by absolute paths were copied in their absolute layout below tests/"
        )
    return Export(out_dir, name, jobs, test_spec, archive, package, package_spec, copied, notes)


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
        runner = table.settings.get("runner")
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


# -- the exported spec -------------------------------------------------------------------------


def _spec_for_device(data: Mapping[str, Any], name: str) -> dict[str, Any]:
    """The spec's TOML document with only NAME's jobs: farm.devices and each
    [[farm.job]] narrowed to NAME, device sources and other devices dropped."""
    exported = {k: _copy_value(v) for k, v in data.items() if k != "devices"}
    farm = exported["farm"]
    farm.pop("sources", None)
    in_matrix = name in farm.get("devices", [])
    if in_matrix:
        farm["devices"] = [name]
    else:  # NAME has explicit jobs only: the matrix has none of its cells
        for key in ("devices", "models"):
            farm.pop(key, None)
    entries = []
    for entry in farm.get("job", []):
        targets = [entry["device"]] if "device" in entry else entry.get("devices")
        if targets is None and in_matrix:  # the entry runs on farm.devices
            entries.append(entry)
        elif targets is not None and name in targets:
            entry.pop("devices", None)
            entries.append({**entry, "device": name})
    if "job" in farm:
        farm["job"] = entries
        if not entries:
            del farm["job"]
    return exported


def _copy_value(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy_value(v) for v in value]
    return value


def _strings(node: Any) -> Iterator[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for value in node.values():
            yield from _strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from _strings(value)


def _file_refs(exported: Mapping[str, Any], base: Path) -> Iterator[tuple[str, Path]]:
    """(text, path) of every string in the spec that names a file or folder (a
    model file, samples, a glob of samples, a runner), relative to the spec's
    folder or absolute."""
    for text in dict.fromkeys(_strings(exported)):
        location = text
        head, sep, _factory = text.rpartition(":")
        if sep and head.endswith(".py"):
            location = head
        if not location or "\n" in location:
            continue
        path = Path(location).expanduser()
        path = path if path.is_absolute() else base / path
        if any(ch in location for ch in "*?["):
            if glob.glob(str(path)):
                yield text, path
        elif path.exists():
            yield text, path


def _expand(path: Path) -> list[Path]:
    """The files a reference brings: a glob's matches; a model file's folder's
    Python files (a factory may import what is beside it); else the path."""
    if any(ch in str(path) for ch in "*?["):
        return [Path(p) for p in sorted(glob.glob(str(path)))]
    if path.is_file() and path.suffix == ".py":
        return sorted(p for p in path.parent.glob("*.py") if p.is_file())
    return [path]


def _common_root(paths: Sequence[Path]) -> Path:
    folders = [os.path.abspath(p if p.is_dir() else p.parent) for p in paths]
    return Path(os.path.commonpath([os.path.normpath(f) for f in folders]))


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
    import etdeploy

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
    """etdeploy's runtime dependencies, each pinned to the version installed here:
    the host runs what this machine built and checked with."""
    lines = [
        "# etdeploy's dependencies, pinned to the versions of the machine that exported.",
        f"--extra-index-url {TORCH_CPU_INDEX}",
    ]
    for requirement in metadata.requires("etdeploy") or []:
        name, _, marker = requirement.partition(";")
        if "extra ==" in marker:
            continue  # the test extra
        project = _project_name(name)
        try:
            version = metadata.version(project)
        except metadata.PackageNotFoundError:
            continue  # a marker-only dependency not needed here (tomli on 3.11)
        lines.append(f"{project}=={version}" + (f" ;{marker}" if marker.strip() else ""))
    return "\n".join(lines) + "\n"


def _project_name(requirement: str) -> str:
    for i, ch in enumerate(requirement):
        if not (ch.isalnum() or ch in "-_."):
            return requirement[:i].strip()
    return requirement.strip()


# -- the test spec -----------------------------------------------------------------------------

# The host's glibc, checked before pip meets wheels it cannot install.
_GLIBC_CHECK = (
    'python -c \'import platform, sys; v = platform.libc_ver()[1] or "0"; '
    f'sys.exit(0 if tuple(map(int, v.split(".")[:2])) >= {MIN_GLIBC!r} else '
    f'"this host has glibc " + v + ": the torch and executorch wheels etdeploy needs are '
    f"manylinux_2_28 (glibc {MIN_GLIBC[0]}.{MIN_GLIBC[1]} or later)\")'"
)


def test_spec_phases(package_spec: str) -> dict[str, list[str]]:
    """The commands of each phase; package_spec is the spec's path in the package."""
    package = "$DEVICEFARM_TEST_PACKAGE_PATH"
    results = f"$DEVICEFARM_LOG_DIR/{RESULTS_DIR_NAME}"
    spec = f'"{package}/{package_spec}"'
    return {
        "install": [
            f"devicefarm-cli use python {HOST_PYTHON}",
            "python --version",
            _GLIBC_CHECK,
            f'python -m pip install --disable-pip-version-check -r "{package}/requirements.txt"',
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

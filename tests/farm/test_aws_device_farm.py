"""etdeploy.farm.export.aws_device_farm: the custom-environment test spec and test
package `etdeploy farm export aws-device-farm` writes, checked against the test
spec's documented schema, and its commands run on a stand-in Device Farm host
against a loopback phone.

The stand-in host (run_on_device_farm_host) stands for Device Farm's
amazon_linux_2 Android host, as the developer guide describes it (read
2026-12-03: custom-test-environment-test-spec.html,
custom-test-environment-variables.html, amazon-linux-2-devicefarm-cli.html):
the package unzipped at $DEVICEFARM_TEST_PACKAGE_PATH; the phases' commands run
in order in one shell, so `cd`, `export` and `devicefarm-cli use` carry over; a
failed command ends its phase and fails the test, post_test runs regardless;
the variables Device Farm sets ($DEVICEFARM_DEVICE_UDID, ..._NAME,
..._PLATFORM_NAME, ..._OS_VERSION, $DEVICEFARM_LOG_DIR,
$DEVICEFARM_TEST_PACKAGE_PATH); the phone on the host's adb server (the
testbed's real adb server, on its own port, where Device Farm's is on 5037).
`devicefarm-cli use python X` is a shell function that puts the base install's
Python first on PATH (tests/support/base_install.py: no torch, no executorch, as on
the real host, which cannot install them), and only when X is its version. The host
has no package index here (PIP_NO_INDEX): the requirements must already be met, and
nothing is installed. Not stood in: Amazon Linux 2 itself (that its glibc 2.26 gets
wheels of every base requirement is checked with pip's --platform below), the
upload and its validator, the artifact upload.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from etdeploy.farm import RESULTS_NAME, load_farm_spec
from etdeploy.farm.export.aws_device_farm import (
    PACKAGE_ZIP_NAME,
    RESULTS_DIR_NAME,
    TEST_SPEC_NAME,
    UDID_PLACEHOLDER,
)
from tests.support.farm_fixtures import QUICK, FarmTestbed, farm, lines_of, write_spec

# The test spec's schema as the developer guide documents it (custom-test-environment-
# test-spec.html, read 2026-12-03): version 0.1 (a number, required); android_test_host
# and ios_test_host (strings, optional); phases install, pre_test, test, post_test (each
# optional, with commands: a list of strings); artifacts (a list of strings, no wildcards).
TOP_KEYS = {"version", "android_test_host", "ios_test_host", "phases", "artifacts"}
PHASES = ("install", "pre_test", "test", "post_test")
# The Android test hosts the guide lists (custom-test-environments-hosts.html).
ANDROID_HOSTS = {"amazon_linux_2"}


def check_test_spec(text: str) -> dict[str, Any]:
    """The test spec, read by PyYAML and held to the documented schema."""
    import yaml

    assert "\t" not in text  # the guide: tabs are not allowed
    doc = yaml.safe_load(text)
    assert isinstance(doc, dict) and set(doc) <= TOP_KEYS, doc.keys()
    assert doc["version"] == 0.1 and isinstance(doc["version"], float)
    assert doc["android_test_host"] in ANDROID_HOSTS
    phases = doc["phases"]
    assert isinstance(phases, dict) and set(phases) <= set(PHASES)
    assert list(phases) == [p for p in PHASES if p in phases]  # in the order they run
    for phase in phases.values():
        assert set(phase) == {"commands"}
        assert all(isinstance(c, str) and c for c in phase["commands"])
    assert all(isinstance(a, str) and not any(ch in a for ch in "*?[") for a in doc["artifacts"])
    return doc


def run_on_device_farm_host(
    doc: dict[str, Any], env: dict[str, str], log: Path, python: Path
) -> subprocess.CompletedProcess[bytes]:
    """The phases' commands in one bash, as the stand-in host runs them (module docstring),
    with `python` (the base install's) as the host's Python."""
    python_bin = python.parent
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    lines = [
        "devicefarm-cli() {",
        f'  if [ "$1 $2 $3" = "use python {version}" ]; then export PATH="{python_bin}:$PATH"; hash -r;',
        '  else echo "devicefarm-cli (stand-in): cannot $*" >&2; return 1; fi',
        "}",
        "failed=",
    ]
    for phase, body in doc["phases"].items():
        lines.append(f"echo '== {phase}'")
        for command in body["commands"]:
            guard = "true" if phase == "post_test" else '[ -z "$failed" ]'
            lines.append(f"if {guard}; then {command} || failed=${{failed:-{phase}}}; fi")
    lines += ['echo "failed phase: ${failed:-none}"', '[ -z "$failed" ]']
    script = log.with_suffix(".sh")
    script.write_text("\n".join(lines) + "\n")
    with open(log, "wb") as out:
        return subprocess.run(["bash", str(script)], env=env, stdout=out, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL, cwd=log.parent, timeout=900, check=False)  # fmt: skip


def host_env(bed: FarmTestbed, phone_serial: str, package: Path, logs: Path) -> dict[str, str]:
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": os.environ.get("HOME", "/root"),
        "LANG": "C.UTF-8",
        "DEVICEFARM_DEVICE_UDID": phone_serial,
        "DEVICEFARM_DEVICE_NAME": phone_serial,
        "DEVICEFARM_DEVICE_PLATFORM_NAME": "Android",
        "DEVICEFARM_DEVICE_OS_VERSION": "15",
        "DEVICEFARM_TEST_PACKAGE_PATH": str(package),
        "DEVICEFARM_LOG_DIR": str(logs),
        # The host's adb server with the phone on it (Device Farm's is on 5037).
        "ANDROID_ADB_SERVER_PORT": str(bed.adb.server.port),
        # The session's cache: the builds are what other tests check, not this one.
        "ETDEPLOY_CACHE_DIR": os.environ["ETDEPLOY_CACHE_DIR"],
        "PIP_NO_INDEX": "1",
    }


@pytest.mark.slow
def test_the_exported_test_spec_runs_the_devices_jobs_on_the_attached_phone(
    bed: FarmTestbed, base_venv: Path, tmp_path: Path
) -> None:
    tables = bed.device_tables(tmp_path)
    (tmp_path / "repo" / "farm").mkdir(parents=True)
    digits = {"model": "digits"}
    spec = write_spec(
        tmp_path / "repo" / "farm" / "nightly.toml",
        {"models": [digits], "devices": ["pixel8", "local"], **QUICK, "retries": 0},
        {"pixel8": tables["pixel-a"]},
        jobs=[{"model": "digits", "backend": "portable", "device": "local"}],
    )  # fmt: skip
    out = tmp_path / "df"
    done = farm("export", "aws-device-farm", spec, "--out", out)
    assert done.exit_code == 0, done.output
    assert "1 job(s) of pixel8" in done.output  # local's jobs stay behind
    doc = check_test_spec((out / TEST_SPEC_NAME).read_text())
    assert doc["artifacts"] == ["$DEVICEFARM_LOG_DIR"]

    # Device Farm unpacks the package on the host.
    package = tmp_path / "host" / "package"
    with zipfile.ZipFile(out / PACKAGE_ZIP_NAME) as archive:
        names = set(archive.namelist())
        archive.extractall(package)
    assert {"requirements.txt", "etdeploy-src/etdeploy/__init__.py", "tests/nightly.toml",
            "tests/bundles/00-digits/bundle.json"} <= names  # fmt: skip
    # The job is a bundle with the phone's runner in it; the host builds nothing.
    assert any(n.startswith("tests/bundles/00-digits/runners/") for n in names)
    assert UDID_PLACEHOLDER in (package / "tests" / "nightly.toml").read_text()
    required = (package / "requirements.txt").read_text().splitlines()[1:]
    assert not [line for line in required if "torch" in line]

    logs = tmp_path / "host" / "logs"
    logs.mkdir()
    phone = bed.phone("pixel-a")
    ran = run_on_device_farm_host(doc, host_env(bed, phone.address, package, logs),
                                  tmp_path / "host" / "run.log", base_venv / "bin" / "python")  # fmt: skip
    transcript = (tmp_path / "host" / "run.log").read_text()
    assert ran.returncode == 0, transcript
    assert "failed phase: none" in transcript and "Requirement already satisfied" in transcript

    results_dir = logs / RESULTS_DIR_NAME
    for name in (RESULTS_NAME, "farm.json", "junit.xml", "report.html"):
        assert (results_dir / name).is_file(), name
    (result,) = lines_of(results_dir / RESULTS_NAME)
    assert result["status"] == "passed" and result["device"]["serial"] == phone.address
    # The same job key as in the original spec: Device Farm's results merge with other shards'.
    wanted = [j.key for j in load_farm_spec(spec).jobs if j.device == "pixel8"]
    assert [result["farm"]["key"]] == wanted
    farm_doc = json.loads((results_dir / "farm.json").read_text())
    assert farm_doc["summary"]["passed"] == 1
    # etdeploy ran from the package's copy.
    assert f"from {package}/etdeploy-src/etdeploy/__init__.py" in transcript


@pytest.mark.slow
def test_the_hosts_glibc_gets_a_wheel_of_every_base_requirement(tmp_path: Path) -> None:
    """Amazon Linux 2 has glibc 2.26: pip, asked for the base requirements as the
    install phase asks (--only-binary=:all:), finds a wheel of each for that glibc.
    The real index is asked (no download: a dry run)."""
    from etdeploy.farm.export.aws_device_farm import HOST_PLATFORM, requirements_text

    requirements = tmp_path / "requirements.txt"
    requirements.write_text(requirements_text())
    assert not [r for r in requirements.read_text().splitlines()[1:] if "torch" in r]
    # pip takes one platform tag literally; the older manylinux tags a 2.26 glibc also runs.
    legacy = ("manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64")
    platforms = [arg for tag in (HOST_PLATFORM, *legacy) for arg in ("--platform", tag)]
    report = tmp_path / "report.json"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--only-binary=:all:",
         "--target", str(tmp_path / "t"), *platforms, "--python-version", "3.11",
         "--implementation", "cp", "--report", str(report), "-r", str(requirements)],
        check=True, timeout=600, capture_output=True,
    )  # fmt: skip
    planned = {
        item["metadata"]["name"].lower() for item in json.loads(report.read_text())["install"]
    }
    assert {"numpy", "paramiko", "adbutils", "typer", "matplotlib"} <= planned
    assert not {"torch", "executorch"} & planned


@pytest.mark.slow
def test_an_export_bundles_each_of_the_devices_jobs_and_keeps_their_keys(tmp_path: Path) -> None:
    from etdeploy.runner_build import ensure_runner

    repo = tmp_path / "repo"
    (repo / "farm").mkdir(parents=True)
    runner = ensure_runner("host").directory  # stands for the Android runner bundle
    spec = write_spec(
        repo / "farm" / "n.toml",
        {"models": ["digits"], "backends": ["xnnpack", "portable"],
         "devices": ["pixel8", "local", "mac"], "iterations": 5, "retries": 1,
         "exclude": [{"backend": "portable", "device": "local"}]},
        {"pixel8": {"transport": "adb", "serial": "38121FDJH00XYZ", "runner": str(runner)},
         "mac": {"transport": "ssh", "host": "mac-mini.local", "user": "ci"}},
    )  # fmt: skip
    out = tmp_path / "df"
    done = farm("export", "aws-device-farm", spec, "--out", out)
    assert done.exit_code == 0, done.output
    package = out / "package"
    exported = package / "tests" / "n.toml"
    text = exported.read_text()
    assert "38121FDJH00XYZ" not in text and "mac-mini" not in text
    again = load_farm_spec(exported)
    original = load_farm_spec(spec)
    assert [j.key for j in again.jobs] == [j.key for j in original.jobs if j.device == "pixel8"]
    assert {j.device for j in again.jobs} == {"pixel8"} and len(again.jobs) == 2
    assert again.config.devices["pixel8"].settings["serial"] == UDID_PLACEHOLDER
    assert "runner" not in again.config.devices["pixel8"].settings  # the bundles carry it
    for job in again.jobs:
        run_job = job.run_job()
        assert run_job.bundle is not None and run_job.iterations == 5 and job.retries == 1
        carried = json.loads((run_job.bundle / "bundle.json").read_text())["runners"]
        assert [r["kind"] for r in carried] == ["host"]

    # Which device: the only adb one by default; a ssh one is refused; a missing runner too.
    done = farm("export", "aws-device-farm", spec, "--out", out, "--device", "mac")
    assert done.exit_code == 2 and "Device Farm's custom environments for Android" in done.output
    done = farm("export", "aws-device-farm", spec, "--out", out, "--device", "nowhere")
    assert done.exit_code == 2 and "no job runs on 'nowhere'" in done.output
    done = farm("export", "ios-farm", spec, "--out", out)
    assert done.exit_code == 2 and "unknown export target" in done.output
    bare = write_spec(tmp_path / "bare.toml", {"models": ["digits"], "devices": ["p"]},
                      {"p": {"transport": "adb", "serial": "S"}})  # fmt: skip
    done = farm("export", "aws-device-farm", bare, "--out", tmp_path / "o")
    assert done.exit_code == 2 and "names no runner" in done.output

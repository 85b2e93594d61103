"""A program whose weights live in a .ptd (`--external-weights`): `run` pushes the pair
content-addressed, the runner loads the .ptd with --data_path as upstream's
executor_runner does, the host check loads the pair, the size verdict counts both files,
and a change to the code alone re-sends only the small .pte; on the local device and on
the loopback phone (a real adb server; tests/support/loopback_adb.py).

A .pte built elsewhere runs as a pair too (`--pte model.pte --data model.ptd`), and a pair
that does not belong together is bad input before anything is pushed.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from etdeploy.builder import BuildOptions, build
from etdeploy.cli import app
from etdeploy.config import Config
from etdeploy.devices.local import LocalDevice
from etdeploy.pipeline import RunJob, run_job
from etdeploy.sizecheck import summary_for_result
from tests.builder.test_external_weights import variant
from tests.support.adb_server import AdbTestbed, adb_testbed
from tests.support.device_config import write_config

pytestmark = pytest.mark.slow


def cli(*args: str | Path) -> Any:
    return CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)


def run(job: RunJob, device: LocalDevice) -> dict[str, Any]:
    return run_job(job, device).to_json()


@pytest.fixture
def device(tmp_path: Path) -> LocalDevice:
    return LocalDevice(workdir=tmp_path / "device")


@pytest.fixture(scope="module")
def host_runner() -> Path:
    from etdeploy.runner_build import ensure_runner

    return ensure_runner("host").directory


@pytest.fixture
def phone(tmp_path: Path, host_runner: Path) -> Iterator[tuple[AdbTestbed, Path]]:
    """A Pixel 8 on a real adb server of its own, and an etdeploy.toml naming it."""
    with adb_testbed(tmp_path / "adb", ("pixel",)) as bed:
        table = {
            "serial": bed.serial("pixel"),
            "adb_port": bed.server.port,
            "runner": str(host_runner),
        }
        yield bed, write_config(tmp_path / "etdeploy.toml", {"pixel8": table})


def pair_of(built: Any) -> tuple[int, int]:
    assert built.data is not None
    return built.pte.stat().st_size, built.data.stat().st_size


# -- the local device ----------------------------------------------------------------


def test_digits_with_external_weights_passes_and_records_the_pair(device: LocalDevice) -> None:
    result = run(
        RunJob(model="digits", external_weights=True, iterations=2, warmup=1, host_check=True),
        device,
    )

    assert result["status"] == "passed", result["verdict"]["reason"]
    built = build("digits", BuildOptions(external_weights=True))
    pte_bytes, ptd_bytes = pair_of(built)
    artifact = result["artifact"]
    assert artifact["size_bytes"] == pte_bytes
    assert artifact["data"] == {
        "path": str(built.data),
        "sha256": built.manifest.to_json()["data"]["sha256"],
        "size_bytes": ptd_bytes,
    }
    # The host runtime loaded the same pair: bit for bit what the device computed.
    assert result["host_check"]["device_vs_host"]["worst"]["max_abs"] == 0.0
    # The size verdict is of what ships: both files.
    size = result["size"]
    assert size["data_path"] == str(built.data)
    assert size["raw_bytes"] == pte_bytes + ptd_bytes
    # Both are under content-addressed names on the device; the runner was given the .ptd.
    programs = sorted(p.name for p in (Path(device.workdir) / "programs").iterdir())
    assert programs == sorted(
        [
            f"{built.manifest.to_json()['sha256'][:24]}.pte",
            f"{built.manifest.to_json()['data']['sha256'][:24]}.ptd",
        ]
    )
    assert any("--data_path=" in log for log in result["logs"])


def test_a_change_to_the_code_alone_sends_only_the_pte(device: LocalDevice, tmp_path: Path) -> None:
    first_model, second_model = variant(tmp_path / "v1", 1.5), variant(tmp_path / "v2", 2.5)
    first = run(RunJob(model=first_model, external_weights=True, iterations=1, warmup=0), device)
    assert first["status"] == "passed", first["verdict"]["reason"]

    second = run(RunJob(model=second_model, external_weights=True, iterations=1, warmup=0), device)

    assert second["status"] == "passed", second["verdict"]["reason"]
    new_pte = build(second_model, BuildOptions(external_weights=True)).pte
    assert second["artifact"]["data"]["sha256"] == first["artifact"]["data"]["sha256"]
    assert second["deploy"]["files_sent"] == 1
    assert second["deploy"]["bytes_sent"] == new_pte.stat().st_size


def test_a_pair_built_elsewhere_runs_with_pte_and_data(tmp_path: Path, device: LocalDevice) -> None:
    done = cli("build", "digits", "--backend", "portable", "--external-weights",
               "-o", tmp_path / "built" / "model.pte")  # fmt: skip
    assert done.exit_code == 0, done.output
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # Renamed and without its manifest: nothing but the two files and the flags tie them.
    (elsewhere / "program.pte").write_bytes((tmp_path / "built" / "model.pte").read_bytes())
    (elsewhere / "weights.ptd").write_bytes((tmp_path / "built" / "model.ptd").read_bytes())

    result = run(
        RunJob(model="digits", pte=elsewhere / "program.pte", data=elsewhere / "weights.ptd",
               iterations=1, warmup=0, host_check=True),
        device,
    )  # fmt: skip

    assert result["status"] == "passed", result["verdict"]["reason"]
    assert result["artifact"]["data"]["path"] == str(elsewhere / "weights.ptd")
    assert result["host_check"]["device_vs_host"]["passed"]


def test_a_pte_beside_its_manifest_finds_its_ptd(tmp_path: Path, device: LocalDevice) -> None:
    done = cli("build", "digits", "--external-weights", "-o", tmp_path / "model.pte")
    assert done.exit_code == 0, done.output
    result = run(RunJob(model="digits", pte=tmp_path / "model.pte", iterations=1, warmup=0), device)
    assert result["status"] == "passed", result["verdict"]["reason"]
    assert result["artifact"]["data"]["path"] == str(tmp_path / "model.ptd")
    assert result["warnings"] == []


def test_a_pair_that_does_not_belong_together_is_bad_input_before_any_push(
    tmp_path: Path,
) -> None:
    xnnpack = build("digits", BuildOptions(external_weights=True))
    portable = build("digits", BuildOptions(backend="portable", external_weights=True))
    lone = tmp_path / "lone.pte"
    lone.write_bytes(xnnpack.pte.read_bytes())  # no manifest, no .ptd beside it
    work = tmp_path / "device"
    config = write_config(tmp_path / "etdeploy.toml", {"here": {"transport": "local",
                                                                "workdir": str(work)}})  # fmt: skip

    missing = cli("run", "digits", "--pte", lone, "--device", "here", "--config", config)
    assert missing.exit_code == 2, missing.output
    assert "keeps 6 weight(s) in external data" in missing.output and "--data" in missing.output

    assert portable.data is not None
    foreign = cli("run", "digits", "--pte", lone, "--data", portable.data, "--device", "here",
                  "--config", config)  # fmt: skip
    assert foreign.exit_code == 2, foreign.output
    assert "belongs to another build" in foreign.output
    assert not (work / "programs").exists()  # refused before deploy

    alone = cli("run", "digits", "--data", portable.data, "--config", config)
    assert alone.exit_code == 2 and "--pte" in alone.output


def test_a_ptd_given_to_a_program_that_keeps_its_weights_is_not_pushed(
    device: LocalDevice,
) -> None:
    inside = build("digits", BuildOptions())
    other = build("digits", BuildOptions(external_weights=True))
    result = run(
        RunJob(model="digits", pte=inside.pte, data=other.data, iterations=1, warmup=0), device
    )
    assert result["status"] == "passed"
    assert "data" not in result["artifact"]
    assert any("keeps its weights inside" in w for w in result["warnings"])
    assert not list((Path(device.workdir) / "programs").glob("*.ptd"))


def test_upstreams_runner_takes_the_data_path_flag(device: LocalDevice, tmp_path: Path) -> None:
    from etdeploy.runner_build import ensure_runner

    # Our binary under upstream's name, driven with upstream's flags only (as
    # tests/pipeline/test_run.py does): --data_path is one of them.
    bundle = ensure_runner()
    upstream = tmp_path / "upstream"
    upstream.mkdir()
    for path in bundle.files:
        target = upstream / ("executor_runner" if path.name == bundle.executable else path.name)
        target.write_bytes(path.read_bytes())
        target.chmod(0o755)
    result = run(
        RunJob(model="digits", external_weights=True, iterations=2, warmup=0,
               runner=upstream / "executor_runner"),
        device,
    )  # fmt: skip
    assert result["runner"]["flavor"] == "upstream"
    assert result["status"] == "passed", result["verdict"]["reason"]


def test_the_runner_loads_the_ptd_and_names_a_bad_one(tmp_path: Path) -> None:
    from etdeploy.runner_build import ensure_runner

    runner = str(ensure_runner().executable_path)
    built = build("digits", BuildOptions(backend="portable", external_weights=True))
    assert built.data is not None
    paired = subprocess.run(
        [runner, f"--model_path={built.pte}", f"--data_path={built.data}",
         f"--result_json={tmp_path / 'r.json'}"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert paired.returncode == 0, paired.stderr
    assert json.loads((tmp_path / "r.json").read_text())["data_path"] == str(built.data)

    without = subprocess.run([runner, f"--model_path={built.pte}"], capture_output=True, text=True)
    assert without.returncode == 1 and "error: method load failed" in without.stderr

    wrong = subprocess.run(
        [runner, f"--model_path={built.pte}", f"--data_path={built.pte}"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert wrong.returncode == 1
    assert f"error: data load {built.pte} failed: InvalidExternalData" in wrong.stderr


def test_the_size_verdict_counts_the_pte_and_the_ptd() -> None:
    built = build("digits", BuildOptions(external_weights=True))
    assert built.data is not None
    alone = summary_for_result(built.pte, Config())
    pair = summary_for_result(
        built.pte, Config(), sha256=built.manifest.to_json()["sha256"], data=built.data,
        data_sha256=built.manifest.to_json()["data"]["sha256"],
    )  # fmt: skip
    ptd_bytes = built.data.stat().st_size
    assert pair["raw_bytes"] == alone["raw_bytes"] + ptd_bytes
    assert alone["download_bytes"] < pair["download_bytes"] < alone["download_bytes"] + ptd_bytes
    headroom = {v["key"]: v["headroom_bytes"] for v in alone["verdicts"]}
    for verdict in pair["verdicts"]:
        assert verdict["headroom_bytes"] < headroom[verdict["key"]]


# -- the loopback phone ----------------------------------------------------------------


def test_on_the_phone_the_pair_passes_and_a_code_change_sends_only_the_pte(
    phone: tuple[AdbTestbed, Path], tmp_path: Path
) -> None:
    bed, config = phone
    first_model, second_model = variant(tmp_path / "v1", 1.5), variant(tmp_path / "v2", 2.5)

    def run_on_phone(model: str, name: str) -> dict[str, Any]:
        done = cli("run", model, "--external-weights", "--device", "pixel8", "--config", config,
                   "-n", "2", "--json", tmp_path / name)  # fmt: skip
        assert done.exit_code == 0, done.output
        assert "PASS" in done.stdout
        return json.loads((tmp_path / name).read_text())

    first = run_on_phone(first_model, "1.json")
    assert first["device"]["transport"] == "adb"
    programs = bed.phones["pixel"].device_path("/data/local/tmp/etdeploy/programs")
    ptd = programs / f"{first['artifact']['data']['sha256'][:24]}.ptd"
    assert ptd.read_bytes() == Path(first["artifact"]["data"]["path"]).read_bytes()

    second = run_on_phone(second_model, "2.json")
    new_pte = build(second_model, BuildOptions(external_weights=True)).pte
    assert second["deploy"]["files_sent"] == 1
    assert second["deploy"]["bytes_sent"] == new_pte.stat().st_size
    assert sorted(p.suffix for p in programs.iterdir() if not p.name.startswith(".")) == [
        ".ptd",
        ".pte",
        ".pte",
    ]


def test_sizecheck_takes_the_pte_and_its_ptd_together(tmp_path: Path) -> None:
    built = build("digits", BuildOptions(external_weights=True))
    assert built.data is not None
    done = cli("sizecheck", built.pte, built.data, "--json", tmp_path / "size.json", "--no-level9")
    assert done.exit_code == 0, done.output
    report = json.loads((tmp_path / "size.json").read_text())
    sized = {Path(f["path"]).suffix: f for f in report["files"]}
    assert set(sized) == {".pte", ".ptd"}
    assert sized[".ptd"]["raw_bytes"] == built.data.stat().st_size
    assert sized[".ptd"]["kind"] == "file"  # data, sized whole: no .pte layout to read
    assert report["total"]["raw_bytes"] == built.pte.stat().st_size + built.data.stat().st_size

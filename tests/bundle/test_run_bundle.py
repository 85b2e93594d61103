"""`etdeploy run --bundle DIR`: the job a bundle carries runs from deploy on, with the
verdict `etdeploy run MODEL` reaches; a damaged bundle, a planted regression and flags
a bundle cannot take are told apart."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from etdeploy.bundle.job_bundle import open_bundle, prepare
from etdeploy.cli import app
from etdeploy.devices.base import DeviceInfo
from etdeploy.errors import UsageError
from etdeploy.pipeline.deploy import carried_runner
from tests.cli.conftest import assert_one_line_error, etdeploy
from tests.support.bundles import copy_bundle, rewrite_table

pytestmark = pytest.mark.slow


def run(*args: str | Path) -> Any:
    return CliRunner().invoke(app, ["run", *map(str, args)], catch_exceptions=False)


def result(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())  # type: ignore[no-any-return]


def test_a_bundle_reaches_the_verdict_of_a_full_run(digits_bundle: Path, tmp_path: Path) -> None:
    full = run("digits", "--json", tmp_path / "full.json")
    assert full.exit_code == 0, full.output
    bundled = run("--bundle", digits_bundle, "--json", tmp_path / "bundle.json")
    assert bundled.exit_code == 0, bundled.output
    a, b = result(tmp_path / "full.json"), result(tmp_path / "bundle.json")
    # The same runner, program and samples: the same outputs, metrics, budget and kinds.
    assert b["verdict"] == a["verdict"] and b["verdict"]["passed"]
    assert b["job"]["model"] == "digits" and b["inputs"] == a["inputs"]
    assert b["artifact"]["sha256"] == a["artifact"]["sha256"]
    assert b["runner"]["path"].startswith(str(digits_bundle))  # the bundle's, not the cache's
    assert b["warnings"] == a["warnings"]


def test_the_bundle_is_read_as_the_pipeline_records_it_replaces(digits_bundle: Path) -> None:
    ready = prepare(open_bundle(digits_bundle))
    assert ready.program.method == "forward" and ready.program.output_names == ["logits"]
    assert len(ready.staged.samples) == len(ready.staged.references) == 360
    # The held-out split's labels travel with it, and what they score.
    assert ready.staged.labels is not None and len(ready.staged.labels.values) == 360
    assert ready.staged.task == "classification"
    assert ready.staged.reference_kind == "eager" and ready.staged.quantized is None
    assert ready.host_outputs is None and [r.kind for r in ready.runners] == ["host"]


def test_a_planted_regression_in_the_references_fails_the_device_stage(
    digits_bundle: Path, tmp_path: Path
) -> None:
    bundle = copy_bundle(digits_bundle, tmp_path / "job")

    def drift(arrays: dict[str, np.ndarray]) -> None:
        drifted = arrays["o0"].copy()  # output 0 of every sample, stacked
        drifted[3] += np.float32(0.05)
        arrays["o0"] = drifted

    rewrite_table(bundle, "references/float.npz", drift)
    done = run("--bundle", bundle, "--json", tmp_path / "r.json")
    assert done.exit_code == 1, done.output
    verdict = result(tmp_path / "r.json")["verdict"]
    assert not verdict["passed"] and verdict["worst"]["sample"] == "held_out[3]"
    assert "FAIL" in done.stdout


def test_a_damaged_file_is_refused_before_anything_runs(
    digits_bundle: Path, tmp_path: Path
) -> None:
    bundle = copy_bundle(digits_bundle, tmp_path / "job")
    pte = bundle / "program" / "digits.pte"
    data = bytearray(pte.read_bytes())
    data[-1] ^= 0xFF
    pte.write_bytes(bytes(data))
    done = etdeploy("run", "--bundle", bundle, cwd=tmp_path)
    assert_one_line_error(done, 2, "program/digits.pte is not the file the bundle was made with")


def test_flags_spent_on_making_the_bundle_are_refused(digits_bundle: Path, tmp_path: Path) -> None:
    done = etdeploy("run", "--bundle", digits_bundle, "--inputs", tmp_path, cwd=tmp_path)
    assert_one_line_error(done, 2, "--inputs cannot be used with --bundle")
    done = etdeploy("run", "digits", "--bundle", digits_bundle, cwd=tmp_path)
    assert_one_line_error(done, 2, "MODEL (digits) and --bundle both given")
    done = etdeploy("run", "--bundle", tmp_path, cwd=tmp_path)
    assert_one_line_error(done, 2, "not a job bundle")


def test_the_job_settings_travel_and_a_flag_still_wins(digits_bundle: Path, tmp_path: Path) -> None:
    made = etdeploy(
        "bundle", "digits", "-n", "4", "--warmup", "1", "--output-kind", "logits=classifier",
        "-o", tmp_path / "job", cwd=tmp_path,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    # This machine's etdeploy.toml names the device (a machine setting) but its [run]
    # iterations were written for its own runs, not this job's.
    (tmp_path / "etdeploy.toml").write_text('[run]\ndevice = "local"\niterations = 7\n')
    done = run("--bundle", tmp_path / "job", "--json", tmp_path / "r.json",
               "--config", tmp_path / "etdeploy.toml")  # fmt: skip
    assert done.exit_code == 0, done.output
    doc = result(tmp_path / "r.json")
    assert (doc["job"]["iterations"], doc["job"]["warmup"]) == (4, 1)
    assert [(k["name"], k["kind"], k["declared"]) for k in doc["verdict"]["kinds"]] == [
        ("logits", "classifier", True)
    ]
    again = run("--bundle", tmp_path / "job", "-n", "2", "--json", tmp_path / "r2.json")
    assert again.exit_code == 0 and result(tmp_path / "r2.json")["job"]["iterations"] == 2


def test_a_device_gets_the_carried_runner_of_its_abi_or_a_clear_refusal(
    digits_bundle: Path,
) -> None:
    runners = prepare(open_bundle(digits_bundle)).runners
    local = DeviceInfo(name="local", transport="local", serial="", os="linux", abi="x86_64")
    assert carried_runner(runners, local).kind == "host"
    phone = DeviceInfo(name="pixel8", transport="adb", serial="", os="android", abi="arm64-v8a")
    with pytest.raises(UsageError, match=r"no runner for pixel8 \(android arm64-v8a\).*x86_64"):
        carried_runner(runners, phone)


def test_an_int8_bundle_carries_the_quantized_reference_and_keeps_both_budget_stages(
    tmp_path: Path,
) -> None:
    """The quantized eager outputs, which a run computes with torch from the converted
    program, travel as a table: the run of the bundle judges both stages of the budget."""
    made = etdeploy("bundle", "digits", "--quantize", "int8", "-o", tmp_path / "job", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert (tmp_path / "job" / "references" / "quantized.npz").is_file()
    full = run("digits", "--quantize", "int8", "--json", tmp_path / "full.json")
    assert full.exit_code == 0, full.output
    bundled = run("--bundle", tmp_path / "job", "--json", tmp_path / "bundle.json")
    assert bundled.exit_code == 0, bundled.output
    a, b = result(tmp_path / "full.json"), result(tmp_path / "bundle.json")
    assert [s["stage"] for s in b["verdict"]["budget"]] == ["quantization", "device"]
    assert b["verdict"] == a["verdict"] and b["artifact"]["quantization"] == "int8"


def test_a_bundle_of_the_first_schema_one_array_a_sample_still_runs(
    digits_bundle: Path, tmp_path: Path
) -> None:
    """Schema /1 kept each sample's arrays apart (s<S>_i<K>); a farm host may still hold one."""
    bundle = copy_bundle(digits_bundle, tmp_path / "job")

    def one_a_sample(letter: str) -> Callable[[dict[str, np.ndarray]], None]:
        def split(arrays: dict[str, np.ndarray]) -> None:
            for key in [k for k in arrays if k.startswith(letter)]:
                stacked = arrays.pop(key)
                for s, row in enumerate(stacked):
                    arrays[f"s{s}_{key}"] = row

        return split

    rewrite_table(bundle, "inputs.npz", one_a_sample("i"))
    rewrite_table(bundle, "references/float.npz", one_a_sample("o"))
    manifest = bundle / "bundle.json"
    manifest.write_text(
        manifest.read_text().replace("etdeploy.job_bundle/2", "etdeploy.job_bundle/1")
    )
    ready = prepare(open_bundle(bundle))
    assert len(ready.staged.samples) == 360
    assert ready.staged.samples[3][0].shape == (1, 1, 8, 8)
    assert ready.staged.references[3][0].shape == (1, 10)

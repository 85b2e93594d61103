"""`etdeploy run --localize`: when the device departs from eager, the operator
where it starts, named with its module, source line and partition.

The failing model is real, not planted: ExecuTorch's CPU kernel for
native_layer_norm computes the variance as E[x^2] - E[x]^2 in float32, so over
barometric pressure (a mean near 1000 hPa, a spread of a few hPa) it is off by
percent, on the portable and the XNNPACK backend alike (XNNPACK does not take
layer_norm). The model (tests/data/models/pressure_chain.py) puts it in the
middle of a chain: an exact large-magnitude add before it, linear layers after.
Real runner, real inputs (pressure windows, not noise), the real local device
and the loopback ADB phone behind the real adb server.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from etdeploy.builder.tapped import TapInfo
from etdeploy.cli import app
from etdeploy.numerics import DEFAULT_THRESHOLDS
from etdeploy.pipeline.taps import judge_sample, tap_metrics, tap_results, tap_tolerance
from etdeploy.results.result import RunResult

MODELS = Path(__file__).parent.parent / "data" / "models"
CHAIN = MODELS / "pressure_chain.py"
NORM_LINE = next(
    i + 1
    for i, line in enumerate(CHAIN.read_text().splitlines())
    if "normalised = self.norm(calibrated)" in line
)


def cli(tmp_path: Path, *args: str | Path) -> tuple[int, dict[str, Any] | None, str]:
    """`etdeploy run ARGS --json`: the exit code, the result document, the output."""
    out = tmp_path / "result.json"
    done = CliRunner().invoke(
        app, ["run", *map(str, args), "-n", "1", "--warmup", "0", "--json", str(out)]
    )
    document = json.loads(out.read_text()) if out.is_file() else None
    return done.exit_code, document, done.output


def taps_by_op(localization: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f"{t['op']}@{t['module'] or ''}": t for t in localization["taps"]}


# -- the judgement, on values made to measure -------------------------------------------------


def _tap(node: str, inputs: tuple[str, ...] = (), step: float | None = None) -> TapInfo:
    return TapInfo(
        node=node, op=node, target=f"aten.{node}.default", output_index=1, reducer="full",
        fields=(), shape=(1, 64), dtype="float32", nbytes=256, inputs=inputs, partition="CPU",
        step=step,
    )  # fmt: skip


def test_one_ulp_on_a_large_value_is_innocent_and_the_operator_whose_error_grows_is_blamed() -> (
    None
):
    hours = np.arange(64, dtype=np.float32)
    pressure = (1013.0 + 3.0 * np.sin(hours / 9.0)).astype(np.float32)
    normalised = (pressure - pressure.mean()) / pressure.std()
    features = np.tanh(normalised[:32] * 0.7).astype(np.float32)
    # The device's values: the add one ULP off (6e-5 at 1013, over an absolute
    # 1e-5 tolerance); the normalisation 4% off; the layer after carries it on.
    add_device = np.nextafter(pressure, np.float32(np.inf))
    norm_device = normalised * np.float32(1.04)
    features_device = np.tanh(norm_device[:32] * 0.7).astype(np.float32)
    taps = [_tap("add"), _tap("layer_norm", ("add",)), _tap("linear", ("layer_norm",))]
    measured = {
        "add": tap_metrics(taps[0], add_device, pressure),
        "layer_norm": tap_metrics(taps[1], norm_device, normalised),
        "linear": tap_metrics(taps[2], features_device, features),
    }
    assert measured["add"].max_abs > 1e-5 and measured["add"].ulps == pytest.approx(1.0)
    judged = judge_sample(taps, measured, tap_tolerance(DEFAULT_THRESHOLDS, quantized=False))
    assert [judged[t.node].status for t in taps] == ["ok", "departs", "carried"]
    rows, first = tap_results(taps, {"s0": judged})
    assert first is not None and first.node == "layer_norm"
    assert rows[1].growth is not None and rows[1].growth > 1e4
    assert rows[2].growth is not None and rows[2].growth < 2


def test_a_value_on_a_quantization_grid_is_judged_in_its_steps() -> None:
    tolerance = tap_tolerance(DEFAULT_THRESHOLDS, quantized=True)
    grid = np.round(np.linspace(-1, 1, 64) / 0.01) * 0.01
    tap = _tap("conv2d", step=0.01)
    one_step = tap_metrics(tap, grid + 0.01, grid)
    three_steps = tap_metrics(tap, grid + np.where(np.arange(64) == 5, 0.03, 0.0), grid)
    assert one_step.steps == pytest.approx(1.0) and three_steps.steps == pytest.approx(3.0)
    assert judge_sample([tap], {"conv2d": one_step}, tolerance)["conv2d"].status == "ok"
    assert judge_sample([tap], {"conv2d": three_steps}, tolerance)["conv2d"].status == "departs"


# -- the precision loss, localised on the local device ---------------------------------------


@pytest.fixture(scope="module", params=["portable", "xnnpack"])
def chain(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp(f"chain-{request.param}")
    code, document, output = cli(
        tmp, f"{CHAIN}:build", "--backend", request.param, "--localize", "--localize-samples", "1"
    )
    return request.param, code, document, output


@pytest.mark.slow
def test_the_layer_norm_is_named_not_the_add_before_it_nor_the_layers_after(chain: Any) -> None:
    backend, code, result, output = chain
    assert code == 1, output
    assert result["status"] == "failed"
    assert result["verdict"]["budget"][-1]["stage"] == "device"
    found = result["localization"]
    assert found["status"] == "localized" and found["reference"] == "float eager"
    assert found["granularity"] == "ops" and found["attempts"][0]["reproduced"] is True
    assert len(found["samples"]) == 2  # the most divergent and one more
    first = found["first_divergence"]
    assert first["op"] == "layer_norm" and first["node"] == "layer_norm"
    assert first["module"] == "norm"
    assert first["source"] == f"pressure_chain.py:{NORM_LINE}"
    assert first["code"] == "normalised = self.norm(calibrated)"
    # XNNPACK does not take layer_norm: it runs on the CPU kernel in both builds.
    assert first["partition"] == "CPU" and first["kernel"] == "native_layer_norm"
    assert first["metrics"]["rel"] > 1e-2 and first["metrics"]["sqnr_db"] < 40
    taps = taps_by_op(found)
    assert taps["add@"]["status"] == "ok"
    assert [taps[k]["status"] for k in ("linear@head.0", "relu@head.1", "linear@head.2")] == [
        "carried"
    ] * 3
    delegated = "XNNPACK" if backend == "xnnpack" else "CPU"
    assert {taps[k]["partition"] for k in ("add@", "linear@head.0", "linear@head.2")} == {delegated}
    # The table, in graph order, the first divergence marked.
    lines = [
        line
        for line in output.splitlines()
        if "pressure_chain.py:" in line and line.split()[0].isdigit()
    ]
    assert [line.split()[1] for line in lines] == ["add", "layer_norm", "linear", "relu", "linear"]
    assert "ORIGIN" in lines[1] and "native_layer_norm" in lines[1]
    assert "LOCALIZE the device departs from eager at layer_norm in norm" in output
    # Given the device's own inputs, the layer_norm is off by far more than float32
    # allows a normalisation over 64 values; the layers after it compute right.
    origin = found["origin"]
    assert origin["node"] == "layer_norm" and origin["over_bound"] is True
    assert origin["error"]["kind"] == "normalization" and origin["error"]["n"] == 64
    assert origin["error"]["ratio"] > 3 and found["amplifiers"] == []
    assert all(taps[k]["local"]["ratio"] < 1 for k in ("add@", "linear@head.0", "linear@head.2"))
    assert found["status"] == "localized" and "hint" not in found
    # The document reads back whole and fits the result schema.
    from etdeploy.results.schema import validate_result

    validate_result(result)
    assert RunResult.from_json(result).to_json() == result


@pytest.mark.slow
def test_a_failing_run_without_localize_suggests_it(chain: Any, tmp_path: Path) -> None:
    backend, *_ = chain
    code, result, output = cli(tmp_path, f"{CHAIN}:build", "--backend", backend)
    assert code == 1 and "localization" not in result
    assert "rerun with --localize to name the operator where it starts" in " ".join(output.split())


@pytest.mark.slow
def test_a_correct_model_reports_every_tap_within_tolerance_and_no_culprit(tmp_path: Path) -> None:
    code, result, output = cli(tmp_path, f"{CHAIN}:correct", "--localize")
    assert code == 0, output
    found = result["localization"]
    assert found["status"] == "clean" and found["first_divergence"] is None
    assert len(found["taps"]) == 5
    assert all(t["status"] == "ok" and t["metrics"]["rel"] <= 1e-4 for t in found["taps"])
    assert found["attempts"] == [
        {"granularity": "ops", "taps": 5, "reproduced": None,
         "note": "nothing to reproduce: the device matched its reference"},
    ]  # fmt: skip
    assert "LOCALIZE every tap (5) is within tolerance" in output
    assert "rerun with --localize" not in output


@pytest.mark.slow
def test_over_the_byte_budget_summaries_still_name_the_layer_norm_and_spare_the_add(
    tmp_path: Path,
) -> None:
    code, result, _ = cli(
        tmp_path, f"{CHAIN}:build", "--backend", "portable", "--localize", "--localize-budget", "0"
    )
    assert code == 1
    found = result["localization"]
    assert {t["reducer"] for t in found["taps"]} == {"stats"}
    assert found["program"]["full_taps"] == 0 and found["program"]["summary_taps"] == 5
    # The device's summary of the add (values near 1000) has a std that lost its
    # digits; the summary is judged without it, so the add stays innocent.
    assert taps_by_op(found)["add@"]["status"] == "ok"
    assert found["first_divergence"]["node"] == "layer_norm"


@pytest.mark.slow
def test_localizing_one_module_says_when_the_divergence_starts_before_it(tmp_path: Path) -> None:
    code, result, _ = cli(
        tmp_path,
        f"{CHAIN}:build",
        "--backend",
        "portable",
        "--localize",
        "--localize-module",
        "head",
    )
    assert code == 1
    found = result["localization"]
    assert found["module"] == "head"
    # head's three operators and the value carried into it (the layer_norm's output).
    assert [(t["node"], t["context"]) for t in found["taps"]] == [
        ("layer_norm", True), ("linear", False), ("relu", False), ("linear_1", False),
    ]  # fmt: skip
    assert found["status"] == "unexplained" and found["first_divergence"] is None
    assert "values carried into head already depart" in found["reason"]


@pytest.mark.slow
def test_a_module_the_model_does_not_have_is_bad_input_before_anything_runs(
    tmp_path: Path,
) -> None:
    code, result, output = cli(
        tmp_path, f"{CHAIN}:build", "--backend", "portable", "--localize",
        "--localize-module", "encoder.layers.3",
    )  # fmt: skip
    assert code == 2
    assert "matches no module" in output and "norm, head" in output
    assert result["status"] == "error" and "verdict" not in result


# -- quantized builds: against the quantized eager program --------------------------------------


@pytest.mark.slow
def test_a_quantized_build_is_localised_against_the_quantized_eager_program(
    tmp_path: Path,
) -> None:
    code, result, _ = cli(tmp_path, f"{CHAIN}:uncalibrated", "--quantize", "int8", "--localize")
    assert code == 1
    assert result["verdict"]["budget"][-1]["stage"] == "device"
    found = result["localization"]
    assert found["reference"] == "quantized eager"
    assert found["first_divergence"]["node"] == "layer_norm"
    assert found["first_divergence"]["partition"] == "CPU"
    taps = taps_by_op(found)
    # The int8 layers after it are judged in steps of their grids, and only carry it.
    for key in ("linear@head.0", "linear@head.2"):
        assert taps[key]["metrics"]["steps"] > 1 and taps[key]["status"] == "carried"
        assert taps[key]["partition"] == "XNNPACK"


@pytest.mark.slow
def test_a_correct_int8_build_is_clean_against_the_quantized_program_not_the_float_one(
    tmp_path: Path,
) -> None:
    code, result, _ = cli(tmp_path, f"{CHAIN}:correct", "--quantize", "int8", "--localize")
    assert code == 0
    found = result["localization"]
    assert found["status"] == "clean" and found["reference"] == "quantized eager"
    assert all(t["status"] == "ok" for t in found["taps"])
    grid = [t for t in found["taps"] if t.get("step")]
    assert [t["op"] for t in grid] == ["add", "linear", "relu", "linear"]  # int8 on XNNPACK
    # Against the float model the same values are off by quantization's own error:
    # had it been the reference, most taps would be over tolerance.
    import torch

    from etdeploy.builder.tapped import load_reference, tapped_reference_path
    from etdeploy.model.loader import load_model, parse_model_ref

    pte = Path(found["program"]["pte"])
    taps = [TapInfo.from_json(t) for t in json.loads(Path(f"{pte}.json").read_text())["taps"]]
    model = load_model(parse_model_ref(f"{CHAIN}:correct")).module
    pressure = torch.from_numpy(np.load(_sample_path(found["samples"][0])))
    with torch.no_grad():
        tapped = load_reference(tapped_reference_path(pte))(pressure)
        calibrated = pressure + model.calibration
        normalised = model.norm(calibrated)
        hidden = model.head[0](normalised)
        floats = [calibrated, normalised, hidden, model.head[1](hidden), model(pressure)]
    measured = {
        t.node: tap_metrics(t, tapped[t.output_index].numpy(), f.numpy())
        for t, f in zip(taps, floats, strict=True)
    }
    against_float = judge_sample(taps, measured, tap_tolerance(DEFAULT_THRESHOLDS, quantized=True))
    assert sum(j.status != "ok" for j in against_float.values()) >= 3


def _sample_path(name: str) -> Path:
    """Where pressure_chain.py wrote the sample (beside the test run's cache)."""
    import os

    return Path(os.environ["ETDEPLOY_CACHE_DIR"]) / "pressure-chain" / "anomalies" / f"{name}.npy"


# -- confirm before blaming; bad input ------------------------------------------------------------


@pytest.mark.slow
def test_a_divergence_the_tapped_twin_does_not_reproduce_is_not_localisable(
    tmp_path: Path,
) -> None:
    """A .pte whose weights were changed after the build (its manifest says it is
    the model's build): every tapped twin built from the model computes the
    model, so none reproduces the divergence; ops, modules and partitions are
    each tried before it says so."""
    from etdeploy.pte.reader import read_pte

    built = CliRunner().invoke(
        app, ["build", f"{CHAIN}:correct", "--backend", "portable", "-o", str(tmp_path / "c.pte")]
    )
    assert built.exit_code == 0, built.output
    pte = tmp_path / "c.pte"
    data = bytearray(pte.read_bytes())
    weight = max(
        (c for c in read_pte(pte).constant_tensors if c.dtype == "float" and len(c.sizes) == 2),
        key=lambda c: c.nbytes,
    )
    values = np.frombuffer(bytes(data[weight.offset : weight.offset + weight.nbytes]), np.float32)
    data[weight.offset : weight.offset + weight.nbytes] = (values * -3.0).tobytes()
    altered = tmp_path / "altered.pte"
    altered.write_bytes(bytes(data))
    manifest = json.loads(Path(f"{pte}.json").read_text())
    import hashlib

    manifest["sha256"] = hashlib.sha256(bytes(data)).hexdigest()
    Path(f"{altered}.json").write_text(json.dumps(manifest))

    code, result, output = cli(tmp_path, f"{CHAIN}:correct", "--pte", altered, "--localize")
    assert code == 1, output
    found = result["localization"]
    assert found["status"] == "not_localizable" and found["first_divergence"] is None
    # Portable has no delegate: every value leaves its partition, so the partition
    # boundaries are every operator again, which is not run twice.
    assert [(a["granularity"], a["reproduced"], a["taps"]) for a in found["attempts"]] == [
        ("ops", False, 5), ("modules", False, 4), ("partitions", None, 5),
    ]  # fmt: skip
    assert found["attempts"][2]["note"] == "the same taps as ops: not run again"
    assert "not localisable by taps" in found["reason"]
    assert "altered.pte may not be what its export builds" in found["reason"]


def test_a_pte_without_a_model_is_bad_input_with_a_hint(tmp_path: Path) -> None:
    reference = tmp_path / "expected.npz"
    np.savez(reference, o0=np.zeros((1, 8), np.float32))
    done = CliRunner().invoke(
        app, ["run", "--pte", str(tmp_path / "model.pte"), "--reference", str(reference),
              "--localize"],
    )  # fmt: skip
    assert done.exit_code == 2
    assert "--localize needs MODEL: a --pte alone has no graph to tap" in done.output
    assert "hint:" in done.output and "Traceback" not in done.output


@pytest.mark.slow
def test_a_model_that_is_not_the_one_the_pte_was_built_from_is_refused(tmp_path: Path) -> None:
    built = CliRunner().invoke(
        app, ["build", f"{CHAIN}:build", "--backend", "portable", "-o", str(tmp_path / "p.pte")]
    )
    assert built.exit_code == 0, built.output
    code, result, output = cli(tmp_path, "digits", "--pte", tmp_path / "p.pte", "--localize")
    assert code == 2
    assert "p.pte and digits disagree" in " ".join(output.split())
    assert "fingerprint" in " ".join(output.split())
    assert result["status"] == "error" and result["error"]["hint"]


@pytest.mark.slow
def test_localize_settings_come_from_etdeploy_toml(tmp_path: Path) -> None:
    from tests.support.device_config import write_config

    config = write_config(
        tmp_path / "etdeploy.toml", {},
        run={"localize": True, "localize_samples": 1, "localize_budget": "0.6KB"},
    )  # fmt: skip
    code, result, _ = cli(tmp_path, f"{CHAIN}:correct", "--config", config)
    assert code == 0
    found = result["localization"]
    assert found["program"]["budget_bytes"] == 600 and len(found["samples"]) == 2
    # In graph order, whole while they fit: 256 + 256 bytes, then neither 128-byte
    # value (640 > 600), then the last 32 bytes (544).
    assert [t["reducer"] for t in found["taps"]] == ["full", "full", "stats", "stats", "full"]


@pytest.mark.slow
def test_a_dynamic_batch_is_tapped_at_each_samples_size_within_the_budget(tmp_path: Path) -> None:
    """Batch dims exported dynamic (1..16): each tap's size is bounded by the
    largest batch; one over the budget is left untapped (a summary would pin its
    size to the example's), and the result says which."""
    code, result, output = cli(
        tmp_path, f"{MODELS / 'two_io.py'}:dynamic_mlp", "--inputs", _batches(tmp_path),
        "--localize", "--localize-budget", "600", "--localize-samples", "1",
    )  # fmt: skip
    assert code == 0, output
    found = result["localization"]
    # 16 x 8 float32 (the first linear, at the largest batch) fits 600 bytes; the rest do not.
    assert [t["node"] for t in found["taps"]] == ["linear"]
    assert found["program"]["untapped"] == ["tanh", "linear_1"]
    assert found["status"] == "clean" and sorted(found["samples"]) == ["b3", "b9"]
    assert "not tapped (of dynamic size, over --localize-budget): tanh, linear_1" in output


def _batches(tmp_path: Path) -> Path:
    """Two batches of 3 and 9 rows of a smooth signal, for the dynamic-batch model."""
    samples = tmp_path / "batches"
    samples.mkdir()
    for rows in (3, 9):
        grid = np.linspace(-1.5, 1.5, rows * 5, dtype=np.float32).reshape(rows, 5)
        np.save(samples / f"b{rows}.npy", np.sin(grid * 2.0).astype(np.float32))
    return samples


@pytest.mark.slow
def test_a_tapped_program_no_granularity_can_build_is_said_once(tmp_path: Path) -> None:
    """Every value of dynamic size and a budget of 0: nothing can be tapped at
    any granularity. The run's verdict stands; why localisation failed is one
    line, not one per granularity tried."""
    code, result, output = cli(
        tmp_path, f"{MODELS / 'two_io.py'}:dynamic_mlp", "--inputs", _batches(tmp_path),
        "--localize", "--localize-budget", "0",
    )  # fmt: skip
    assert code == 0, output
    found = result["localization"]
    assert found["status"] == "not_localizable"
    why = "every value to tap is of dynamic size and over --localize-budget"
    assert found["reason"] == (
        f"no tapped program could be built (tried ops, modules, partitions): {why}"
    )
    assert " ".join(output.split()).count(why) == 1


# -- on the phone --------------------------------------------------------------------------------


@pytest.fixture
def phone(tmp_path: Path) -> Iterator[Path]:
    """A config naming a loopback Pixel 8 behind a real adb server on a free port."""
    from etdeploy.runner_build import ensure_runner
    from tests.support.adb_server import adb_testbed
    from tests.support.device_config import write_config

    runner = ensure_runner("host").directory
    with adb_testbed(tmp_path / "adb", ("pixel",)) as bed:
        table = {"serial": bed.serial("pixel"), "adb_port": bed.server.port, "runner": str(runner)}
        yield write_config(tmp_path / "etdeploy.toml", {"pixel8": table})


@pytest.mark.slow
def test_the_layer_norm_is_named_on_the_phone_over_adb(phone: Path, tmp_path: Path) -> None:
    code, result, output = cli(
        tmp_path, f"{CHAIN}:build", "--device", "pixel8", "--config", phone, "--localize"
    )
    assert code == 1, output
    assert result["device"]["transport"] == "adb"
    first = result["localization"]["first_divergence"]
    assert (first["node"], first["module"], first["partition"]) == ("layer_norm", "norm", "CPU")
    assert math.isfinite(first["metrics"]["rel"]) and first["metrics"]["rel"] > 1e-2

"""Baseline comparison: real regressions are flagged, run-to-run noise is not."""

from __future__ import annotations

import json
import random

from etdeploy.results import Regression, compare_to_baseline, job_key
from etdeploy.results.baseline import BUSY_HOST
from tests.results.docs import (
    Doc,
    as_result,
    as_results,
    input_error,
    numeric_failure,
    on_device,
    scale_error,
    with_cpu,
    with_latency,
)


def compare(results: list[Doc], baseline: list[Doc], **thresholds: float) -> list[Regression]:
    """compare_to_baseline of these documents, read as the typed results it takes."""
    return compare_to_baseline(as_results(results), as_results(baseline), **thresholds)


def _noisy(median: float, spread: float, n: int = 50, seed: int = 0) -> list[float]:
    """Iteration times of a device with scheduler noise: mostly around the
    median, a few slow outliers (a core migration, a thermal step)."""
    rng = random.Random(seed)
    times = [max(0.0, rng.gauss(median, spread)) for _ in range(n)]
    for i in range(0, n, 10):
        times[i] = median + 4 * spread
    return times


def test_identical_runs_have_no_regressions(
    passed: Doc, passed_portable: Doc, infra_error: Doc
) -> None:
    results = [passed, passed_portable, infra_error]
    assert compare(results, json.loads(json.dumps(results))) == []


def test_latency_regression_is_flagged(passed: Doc) -> None:
    baseline = with_latency(passed, _noisy(2.0, 0.05, seed=1))
    slower = with_latency(passed, _noisy(2.6, 0.05, seed=2))  # +30%
    (found,) = compare([slower], [baseline])
    assert found.kind == "latency"
    assert found.key == job_key(as_result(passed))
    assert 1.9 < found.baseline < 2.1 and 2.5 < found.current < 2.7
    assert "+30%" in found.message or "+29%" in found.message or "+31%" in found.message


def test_latency_noise_is_not_flagged(passed: Doc) -> None:
    # A noisy device: a median over 10% slower, but within the baseline's own spread.
    baseline = with_latency(passed, _noisy(2.0, 0.4, seed=3))
    noisy = with_latency(passed, _noisy(2.3, 0.4, seed=4))
    assert noisy["latency_ms"]["median"] > baseline["latency_ms"]["median"] * 1.10
    assert noisy["latency_ms"]["median"] < baseline["latency_ms"]["p90"]
    assert compare([noisy], [baseline]) == []
    # A slowdown past the noise on the same device is flagged.
    much_slower = with_latency(passed, _noisy(3.2, 0.4, seed=4))
    assert [r.kind for r in compare([much_slower], [baseline])] == ["latency"]
    # The same shift on a quiet device is real.
    quiet_base = with_latency(passed, _noisy(2.0, 0.02, seed=3))
    quiet_now = with_latency(passed, _noisy(2.3, 0.02, seed=4))
    assert [r.kind for r in compare([quiet_now], [quiet_base])] == ["latency"]
    # And a small shift on a quiet device is under the threshold.
    small = with_latency(passed, _noisy(2.1, 0.02, seed=4))
    assert compare([small], [quiet_base]) == []


def test_faster_is_not_a_regression(passed: Doc) -> None:
    baseline = with_latency(passed, _noisy(2.0, 0.02))
    assert compare([with_latency(passed, _noisy(1.0, 0.02))], [baseline]) == []


def test_numeric_drift_is_flagged(passed: Doc) -> None:
    # 10x the error: SQNR down 20 dB (from ~125 dB, capped at 100 before comparing)
    # and max abs x10; still passing, but a lowering changed.
    drifted = scale_error(passed, 1e3)
    found = compare([drifted], [passed])
    kinds = {r.kind: r for r in found}
    assert set(kinds) == {"sqnr", "max_abs"}
    assert kinds["sqnr"].output == "logits"
    assert kinds["sqnr"].baseline > kinds["sqnr"].current
    assert kinds["max_abs"].current == max(m["max_abs"] for m in drifted["verdict"]["metrics"])
    assert "x1000" in kinds["max_abs"].message


def test_float_rounding_is_not_drift(passed: Doc, passed_portable: Doc) -> None:
    # XNNPACK and portable differ by fp32 reassociation: 1.5e-5 vs 9.5e-6 max abs,
    # 124.8 vs 128.4 dB; as baseline and current of the same key that is no drift.
    portable_as_xnnpack = json.loads(json.dumps(passed_portable))
    portable_as_xnnpack["artifact"]["backend"] = "xnnpack"
    portable_as_xnnpack["latency_ms"] = passed["latency_ms"]  # numerics only here
    assert compare([passed], [portable_as_xnnpack]) == []
    assert compare([portable_as_xnnpack], [passed]) == []
    # Doubling a tiny error (under the floor) is rounding too.
    assert compare([scale_error(passed, 1.5)], [passed]) == []


def test_sqnr_drop_in_the_quantized_range(passed: Doc) -> None:
    # An int8 build at ~35 dB that loses 4 dB is flagged; one that loses 1 dB is not.
    baseline = scale_error(passed, 10 ** ((125 - 35) / 20))
    assert [r.kind for r in compare([scale_error(baseline, 10 ** (1 / 20))], [baseline])] == []
    found = compare([scale_error(baseline, 10 ** (4 / 20))], [baseline], abs_error_factor=10)
    assert [r.kind for r in found] == ["sqnr"]
    assert "more than 3 dB" in found[0].message


def test_exact_baseline(passed: Doc) -> None:
    # An exact match is written as max_abs 0 and sqnr_db null (infinite).
    exact = json.loads(json.dumps(passed))
    for row in [*exact["verdict"]["metrics"], exact["verdict"]["worst"]]:
        row.update(max_abs=0.0, sqnr_db=None)
    assert compare([passed], [exact]) == []
    # NaN in the output now: null SQNR with a null (non-finite) max abs.
    broken = json.loads(json.dumps(passed))
    broken["verdict"]["metrics"][0].update(max_abs=None, sqnr_db=None)
    kinds = sorted(r.kind for r in compare([broken], [exact]))
    assert kinds == ["max_abs", "sqnr"]


def test_pass_that_became_fail_or_error(
    passed: Doc, passed_portable: Doc, infra_error: Doc
) -> None:
    failed = numeric_failure(passed_portable)
    error = on_device(infra_error, "local")
    error["artifact"] = {**passed["artifact"]}  # same key as the passing xnnpack job
    del error["artifact"]["delegation"]
    found = compare([failed, error], [passed_portable, passed])
    status = [r for r in found if r.kind == "status"]
    assert [(r.key.backend, r.baseline, r.current) for r in status] == [
        ("portable", "passed", "failed"),
        ("xnnpack", "passed", "error"),
    ]
    assert "passed in the baseline, now failed: max abs error" in status[0].message
    assert "infrastructure.RunnerFailure" in status[1].message
    # A failure that was already failing is not a new status regression.
    assert [r for r in compare([failed], [failed]) if r.kind == "status"] == []


def test_jobs_are_matched_by_key(passed: Doc, infra_error: Doc) -> None:
    slower = with_latency(passed, _noisy(3.0, 0.01))
    baseline = with_latency(passed, _noisy(1.0, 0.01))
    # Another device, another backend: not the same job, nothing to compare.
    assert compare([on_device(slower, "pixel8")], [baseline]) == []
    other_backend = json.loads(json.dumps(slower))
    other_backend["artifact"]["quantization"] = "int8"
    assert compare([other_backend], [baseline]) == []
    # Errors on both sides: nothing to compare, no crash.
    assert compare([input_error(infra_error)], [infra_error]) == []


def test_a_regression_line_names_its_job(passed: Doc) -> None:
    baseline = with_latency(passed, _noisy(1.0, 0.01))
    (found,) = compare([on_device(with_latency(passed, _noisy(3.0, 0.01)), "pixel8")],
                       [on_device(baseline, "pixel8")])  # fmt: skip
    assert found.line.startswith("digits[xnnpack] on pixel8: median latency 1")
    assert found.line == f"{found.key.label}: {found.message}"


def test_regression_to_json(passed: Doc) -> None:
    found = compare([scale_error(passed, 1e3)], [passed])
    doc = json.loads(json.dumps([r.to_json() for r in found]))
    assert doc[0]["label"] == "digits[xnnpack] on local"
    assert doc[0]["key"] == {
        "model": "digits",
        "backend": "xnnpack",
        "quantization": None,
        "device": "local",
    }


def test_an_unchanged_program_on_a_busy_machine_does_not_regress(passed: Doc) -> None:
    """Issue 38's back-to-back farms of unchanged programs: 28.9 µs -> 224.1 µs
    (+675%) with a baseline stdev of 0.2 µs, and +56% of a 0.3 ms program, both
    within the 0.25 ms floor that one pair of runs cannot see past."""
    quiet = with_latency(passed, [0.0287, 0.0289, 0.0292])
    busy = with_latency(passed, [0.2241, 0.2238, 0.2250])
    assert compare([busy], [quiet]) == []
    assert (
        compare(
            [with_latency(passed, [0.47, 0.48, 0.47])], [with_latency(passed, [0.30, 0.31, 0.30])]
        )
        == []
    )
    # Growth past the floor and both runs' spread is still a regression...
    (found,) = compare(
        [with_latency(passed, [2.9, 3.0, 3.1])], [with_latency(passed, [2.0, 2.0, 2.1])]
    )
    assert found.kind == "latency" and "0.25 ms floor" in found.message.replace(
        "250.0 µs", "0.25 ms"
    )
    # ...but not when the current run's own spread covers it (a busy night's iterations).
    scattered = with_latency(passed, [1.9, 2.0, 2.1, 3.9, 4.1, 4.3])
    assert scattered["latency_ms"]["median"] > 2.0 * 1.10 + 0.25
    assert compare([scattered], [with_latency(passed, [2.0, 2.0, 2.1])]) == []


def test_a_whole_run_slowed_evenly_with_the_same_cpu_time_is_a_busy_host(passed: Doc) -> None:
    """Every iteration 3x slower, the spread tight (spread cannot tell it), the CPU
    time unchanged: told as a busy host, in the message and the JSON, not failed."""
    quiet = with_cpu(passed, [2.0, 2.0, 2.1, 2.0], [1.9, 1.9, 2.0, 1.9])
    busy = with_cpu(passed, [6.0, 6.1, 6.0, 6.2], [1.9, 2.0, 1.9, 1.9])
    (note,) = compare([busy], [quiet])
    assert note.kind == "latency" and note.alarm == BUSY_HOST and not note.is_regression
    assert "the host was busy" in note.message and "CPU time" in note.message
    assert note.to_json()["alarm"] == "busy host"
    # The CPU time grew with it: a regression, saying so.
    slower = with_cpu(passed, [6.0, 6.1, 6.0, 6.2], [5.7, 5.8, 5.7, 5.9])
    (found,) = compare([slower], [quiet])
    assert found.is_regression and found.alarm is None and "CPU time" in found.message
    # A modest real slowdown on a quiet host (+30% wall, +30% CPU, under the 50% that
    # load can do to CPU time): the CPU time grew with the wall time, a regression.
    modest = with_cpu(passed, [2.6, 2.6, 2.7, 2.6], [2.5, 2.5, 2.6, 2.5])
    (found,) = compare([modest], [quiet])
    assert found.is_regression and found.alarm is None
    # A baseline written before CPU times were measured: judged on wall time as before.
    (old_way,) = compare([busy], [with_latency(passed, [2.0, 2.0, 2.1, 2.0])])
    assert old_way.is_regression and "CPU time" not in old_way.message

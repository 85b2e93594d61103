"""Verification metrics and verdicts on known arrays."""

from __future__ import annotations

import math

import numpy as np

from etdeploy.numerics import (
    DEFAULT_THRESHOLDS,
    Comparison,
    Measurements,
    Tolerance,
    budget_verdict,
    compare,
    judge_stage,
    measure,
    output_kinds,
    verify,
)


def test_identical_outputs_have_infinite_sqnr_and_pass() -> None:
    x = np.linspace(-1, 1, 20, dtype=np.float32).reshape(2, 10)
    m = compare(x, x, Tolerance())
    assert m["max_abs"] == 0 and m["sqnr_db"] == math.inf and m["cosine"] == 1.0 and m["allclose"]


def test_sqnr_of_a_known_perturbation() -> None:
    e = np.ones(100)
    a = e + 0.1  # noise power 0.01 per element vs signal 1: 20 dB
    assert abs(compare(a, e, Tolerance())["sqnr_db"] - 20.0) < 1e-9


def test_the_diverging_output_and_sample_are_named() -> None:
    ref = [[np.zeros((1, 4)), np.zeros((1, 10))], [np.zeros((1, 4)), np.zeros((1, 10))]]
    out = [[np.zeros((1, 4)), np.zeros((1, 10))], [np.zeros((1, 4)), np.full((1, 10), 0.5)]]
    verdict = verify(out, ref, ["a", "b"], ["feat", "logits"], Tolerance())
    assert not verdict.passed
    assert verdict.worst is not None and (verdict.worst.name, verdict.worst.sample) == (
        "logits",
        "b",
    )
    assert "logits" in verdict.reason and "sample b" in verdict.reason


def test_quantized_builds_are_judged_by_sqnr_and_top1_not_allclose() -> None:
    rng = np.random.default_rng(0)
    ref = [[rng.normal(size=(1, 10))] for _ in range(4)]
    close = [[r[0] + rng.normal(scale=0.01, size=(1, 10))] for r in ref]
    verdict = verify(close, ref, list("abcd"), ["logits"], Tolerance(quantized=True))
    assert verdict.passed and verdict.top1_agreement == 1.0
    assert not any(m.allclose for m in verdict.metrics)  # int8-sized error fails fp32 allclose
    scrambled = [[-r[0]] for r in ref]
    assert not verify(scrambled, ref, list("abcd"), ["logits"], Tolerance(quantized=True)).passed


def test_shape_mismatch_is_a_failure_naming_the_output() -> None:
    verdict = verify([[np.zeros((1, 3))]], [[np.zeros((1, 4))]], ["s"], ["y"], Tolerance())
    assert not verdict.passed and "output y" in verdict.reason


def test_noise_verdicts_say_so() -> None:
    x = [[np.zeros((1, 2))]]
    assert "random inputs" in verify(x, x, ["s"], ["y"], Tolerance(), on_noise=True).reason


# -- the error budget: each stage by its rule ------------------------------------------

STEP = 0.125  # an int8 output's scale


def _grid(values: list[float]) -> np.ndarray:
    return (np.array(values, dtype=np.float32) * STEP).reshape(1, -1)


def test_a_quantized_output_is_judged_in_steps_of_its_scale() -> None:
    want = [[_grid([3, -7, 12, 0])]]
    kinds = output_kinds(["y"], [(1, 4)], {"y": "regression"})
    one_step = judge_stage(
        Comparison("device", "device vs quantized eager", [[_grid([3, -6, 12, 0])]], want, "steps"),
        ["s"], kinds, DEFAULT_THRESHOLDS, [STEP],
    )  # fmt: skip
    assert one_step.passed and one_step.steps == 1.0
    two_steps = judge_stage(
        Comparison("device", "device vs quantized eager", [[_grid([3, -7, 10, 0])]], want, "steps"),
        ["s"], kinds, DEFAULT_THRESHOLDS, [STEP],
    )  # fmt: skip
    assert not two_steps.passed and two_steps.steps == 2.0
    assert two_steps.reason.startswith("the device departs from the quantized program")
    assert "2.0 step(s) of 0.125" in two_steps.reason


def test_an_output_that_is_not_quantized_is_judged_relative_to_its_range() -> None:
    want = [[np.array([[100.0, -50.0]], dtype=np.float32)]]
    kinds = output_kinds(["y"], [(1, 2)], {"y": "regression"})
    close = [[np.array([[100.05, -50.0]], dtype=np.float32)]]  # 5e-4 of the range
    far = [[np.array([[100.5, -50.0]], dtype=np.float32)]]  # 5e-3 of the range
    judge = lambda got: judge_stage(  # noqa: E731
        Comparison("device", "device vs quantized eager", got, want, "steps"),
        ["s"], kinds, DEFAULT_THRESHOLDS, [None],
    )  # fmt: skip
    assert judge(close).passed and not judge(far).passed


def _logits(rows: list[list[float]]) -> list[list[np.ndarray]]:
    return [[np.array([row], dtype=np.float32)] for row in rows]


def test_top1_is_required_only_of_a_declared_classifier() -> None:
    # Equal peaks: the float model picks the first, int8 the second.
    want = _logits([[1.0, 0.999, 0.0], [0.5, 0.499, 0.1]])
    got = _logits([[0.999, 1.0, 0.0], [0.499, 0.5, 0.1]])
    comparison = Comparison("quantization", "quantized eager vs float eager", got, want, "accuracy")
    guessed = judge_stage(
        comparison, ["a", "b"], output_kinds(["y"], [(1, 3)], {}), DEFAULT_THRESHOLDS, []
    )
    assert guessed.passed and guessed.top1_agreement == 0.0 and "reported" in guessed.reason
    declared = judge_stage(
        comparison,
        ["a", "b"],
        output_kinds(["y"], [(1, 3)], {"y": "classifier"}),
        DEFAULT_THRESHOLDS,
        [],
    )
    assert not declared.passed and "y top-1 agreement 0% < 90%" in declared.reason


def test_an_embedding_is_held_to_cosine_not_sqnr() -> None:
    want = [[np.array([[1.0, 2.0, 3.0, 4.0]], dtype=np.float32)]]
    # Scaled by 3: SQNR is poor, the direction (what an embedding is) is intact.
    got = [[np.array([[3.0, 6.0, 9.0, 12.0]], dtype=np.float32)]]
    comparison = Comparison("quantization", "quantized eager vs float eager", got, want, "accuracy")
    kinds = output_kinds(["e"], [(1, 4)], {"e": "embedding"})
    stage = judge_stage(comparison, ["s"], kinds, DEFAULT_THRESHOLDS, [])
    assert stage.passed and stage.sqnr_db < 15 and "cosine 1.0000" in stage.reason


def test_the_verdict_names_the_stage_that_broke_its_limit() -> None:
    want = [[_grid([1, 2, 3])]]
    kinds = output_kinds(["y"], [(1, 3)], {"y": "regression"})
    quantization = judge_stage(
        Comparison("quantization", "quantized eager vs float eager", want, want, "accuracy"),
        ["s"], kinds, DEFAULT_THRESHOLDS, [],
    )  # fmt: skip
    device = judge_stage(
        Comparison("device", "device vs quantized eager", [[_grid([1, 2, 9])]], want, "steps"),
        ["s"], kinds, DEFAULT_THRESHOLDS, [STEP],
    )  # fmt: skip
    end_to_end = verify([[_grid([1, 2, 9])]], want, ["s"], ["y"], Tolerance(quantized=True))
    verdict = budget_verdict(
        [quantization, device], end_to_end, kinds, DEFAULT_THRESHOLDS, "float eager"
    )
    assert not verdict.passed and verdict.failed_stage is device
    assert verdict.reason.startswith("the device departs from the quantized program")
    assert [s.stage for s in verdict.budget] == ["quantization", "device"]


def test_one_run_measures_a_comparison_once_and_a_different_one_again() -> None:
    rng = np.random.default_rng(0)
    want = [[rng.standard_normal((1, 10)).astype(np.float32)] for _ in range(4)]
    got = [[w[0] + np.float32(1e-3)] for w in want]
    names, outputs = [f"s{i}" for i in range(4)], ["logits"]
    measured = Measurements()
    first = measured.measure(got, want, names, outputs, Tolerance())
    assert measured.measure(got, want, names, outputs, Tolerance()) is first
    # Equal values in other objects, other tolerances or steps: measured afresh, and
    # what is measured is what measure() alone says.
    copy = [[a.copy() for a in row] for row in got]
    again = measured.measure(copy, want, names, outputs, Tolerance())
    assert again is not first and again == first
    loose = measured.measure(got, want, names, outputs, Tolerance(atol=1.0))
    assert loose == measure(got, want, names, outputs, Tolerance(atol=1.0)) and loose != first
    stepped = measured.measure(got, want, names, outputs, Tolerance(), [0.5])
    assert isinstance(stepped, list) and stepped[0].steps is not None

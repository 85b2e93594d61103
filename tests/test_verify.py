"""Verification metrics and verdicts on known arrays."""

from __future__ import annotations

import math

import numpy as np

from etdeploy.verify import Tolerance, compare, verify


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

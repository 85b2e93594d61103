"""etdeploy.accuracy: a task's metric and the statistics that say whether the device
moved it. The figures are checked against independent computations (scipy's exact
binomial test) and against cases whose answer is known by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from etdeploy import accuracy
from etdeploy.errors import InputError, UsageError


def _pairs(both: int, ref_only: int, other_only: int, neither: int) -> tuple[np.ndarray, ...]:
    reference = np.array(
        [True] * both + [True] * ref_only + [False] * other_only + [False] * neither
    )
    other = np.array([True] * both + [False] * ref_only + [True] * other_only + [False] * neither)
    return reference, other


@pytest.mark.parametrize(("b", "c"), [(0, 10), (3, 12), (7, 7), (1, 0), (20, 35)])
def test_mcnemars_exact_p_is_the_two_sided_binomial_test_of_the_disagreements(
    b: int, c: int
) -> None:
    from scipy.stats import binomtest

    expected = binomtest(b, b + c, 0.5).pvalue
    assert accuracy.mcnemar_exact(b, c) == pytest.approx(expected, rel=1e-9)


def test_no_disagreement_is_no_evidence_of_a_change() -> None:
    reference, other = _pairs(350, 0, 0, 10)
    paired = accuracy.paired_classification(reference, other)
    assert paired.difference == 0 and paired.p_value == 1.0
    # Newcombe's interval is not degenerate with no disagreements: it still allows
    # a drop of the order of 3/n (the rule of three) either way.
    assert -0.02 < paired.low < -0.001 and 0.001 < paired.high < 0.02


def test_a_large_paired_drop_is_significant_and_its_interval_excludes_zero() -> None:
    reference, other = _pairs(300, 30, 2, 28)
    paired = accuracy.paired_classification(reference, other)
    assert paired.difference == pytest.approx(-28 / 360)
    assert paired.p_value is not None and paired.p_value < 1e-5
    assert paired.low < paired.difference < paired.high < 0
    assert (paired.reference_only, paired.other_only) == (30, 2)


def test_newcombes_interval_matches_a_hand_computation() -> None:
    # a=40 b=5 c=1 d=4 (n=50): p_ref = 0.9, p_other = 0.82, difference -0.08.
    reference, other = _pairs(40, 5, 1, 4)
    paired = accuracy.paired_classification(reference, other)
    l1, u1 = accuracy.wilson(45, 50)
    l2, u2 = accuracy.wilson(41, 50)
    phi = (40 * 4 - 5 * 1) / math.sqrt(45 * 5 * 41 * 9)
    low = -0.08 - math.sqrt((0.82 - l2) ** 2 - 2 * phi * (0.82 - l2) * (u1 - 0.9) + (u1 - 0.9) ** 2)
    high = -0.08 + math.sqrt(
        (u2 - 0.82) ** 2 - 2 * phi * (u2 - 0.82) * (0.9 - l1) + (0.9 - l1) ** 2
    )
    assert (paired.low, paired.high) == pytest.approx((low, high))
    assert paired.low < -0.08 < paired.high


def test_wilsons_interval_for_a_known_case() -> None:
    # 81 of 263 (Wilson 1927's construction; scipy's binomtest gives the same interval).
    from scipy.stats import binomtest

    found = binomtest(81, 263).proportion_ci(method="wilson")
    assert accuracy.wilson(81, 263) == pytest.approx((found.low, found.high))


def test_top_k_counts_a_label_among_the_k_best_scores() -> None:
    scores = np.array([[0.1, 0.5, 0.4], [0.9, 0.05, 0.05], [0.2, 0.3, 0.5]])
    labels = np.array([2, 0, 0])
    assert accuracy.top_k_correct(scores, labels, 1).tolist() == [False, True, False]
    assert accuracy.top_k_correct(scores, labels, 2).tolist() == [True, True, False]


def test_the_gate_fails_a_significant_drop_and_lets_noise_pass() -> None:
    task = accuracy.Task()
    noise = accuracy.paired_classification(*_pairs(340, 3, 1, 16))
    big = accuracy.paired_classification(*_pairs(300, 30, 2, 28))
    gate = accuracy.Gate(max_drop=0.005)
    assert accuracy.gate_reason(task, 0.94, noise, gate) is None
    reason = accuracy.gate_reason(task, 0.84, big, gate)
    assert reason is not None and "more than --max-accuracy-drop 0.5 pp" in reason
    below = accuracy.gate_reason(task, 0.84, noise, accuracy.Gate(min_accuracy=0.9))
    assert below is not None and "below --min-accuracy 90.00%" in below


def test_regression_is_scored_by_mean_abs_error_with_a_bootstrap_interval() -> None:
    rng = np.random.default_rng(0)
    reference = rng.random(200)
    worse = reference + 0.05
    paired = accuracy.paired_regression(reference, worse)
    assert paired.difference == pytest.approx(0.05)
    assert paired.low == pytest.approx(0.05) and paired.high == pytest.approx(0.05)
    same = accuracy.paired_regression(reference, reference + rng.normal(0, 0.01, 200))
    assert same.low < 0 < same.high


@pytest.mark.parametrize(
    ("text", "task"),
    [
        ("classification", accuracy.Task()),
        ("classification:5", accuracy.Task(top_k=(1, 5))),
        ("classification@probs", accuracy.Task(output="probs")),
        ("regression", accuracy.Task(kind="regression")),
    ],
)
def test_a_task_is_read_from_its_text(text: str, task: accuracy.Task) -> None:
    assert accuracy.parse_task(text) == task


@pytest.mark.parametrize("text", ["detection", "classification:0", "regression:5"])
def test_a_task_that_does_not_exist_is_bad_input(text: str) -> None:
    with pytest.raises(InputError) as info:
        accuracy.parse_task(text)
    assert info.value.hint


def test_labels_outside_the_models_classes_are_named() -> None:
    scores = np.zeros((3, 10))
    with pytest.raises(InputError, match=r"label 12 of sample 1 is outside the model's 10 classes"):
        accuracy.check_labels(accuracy.Task(), scores, np.array([1, 12, 3]))
    with pytest.raises(InputError, match="class indices"):
        accuracy.check_labels(accuracy.Task(), scores, np.array([0.5, 1.5, 2.5]))


@pytest.mark.parametrize(("text", "value"), [("0.5pp", 0.005), ("1%", 0.01), (0.02, 0.02)])
def test_an_accuracy_drop_is_read_in_percentage_points(text: str | float, value: float) -> None:
    assert accuracy.parse_drop(text, "--max-accuracy-drop") == pytest.approx(value)


def test_an_unreadable_drop_is_bad_input() -> None:
    with pytest.raises(UsageError, match="cannot read 'lots' as an accuracy drop"):
        accuracy.parse_drop("lots", "--max-accuracy-drop")

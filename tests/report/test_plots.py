"""The HTML report's plots, read from the figures they draw: each job's limit on
the error plot (a float build's allclose tolerance, a quantized build's SQNR
floor) and the baseline's median on the latency plot."""

from __future__ import annotations

import math

from matplotlib.figure import Figure

from etdeploy.report.plots import error_limits, plot_errors, plot_latency
from etdeploy.report.plots_base import Job
from etdeploy.results import job_key
from tests.results.docs import Doc, as_result, on_device, with_latency


def _jobs(*docs: Doc) -> list[Job]:
    results = [as_result(doc) for doc in docs]
    return [Job(i, r, job_key(r)) for i, r in enumerate(results)]


def _marks(ax: object, label: str) -> list[tuple[float, float]]:
    """(x, row) of each dashed limit mark of `label` on an axis (rows are y = 0, 1, ...)."""
    lines = [line for line in ax.get_lines() if line.get_linestyle() == "--"]  # type: ignore[attr-defined]
    legend = {text.get_text() for text in ax.get_legend().get_texts()}  # type: ignore[attr-defined]
    assert label in legend, legend
    return [(line.get_xdata()[0], sum(line.get_ydata()) / 2) for line in lines]


def test_the_error_plot_marks_each_jobs_own_limit(passed_int8: Doc, passed_two_io: Doc) -> None:
    int8, two_io = as_result(passed_int8), as_result(passed_two_io)
    # What decided each: allclose at atol for the float build, the accuracy budget's
    # SQNR floor for the int8 one (its device stage is in quantization steps).
    assert error_limits(two_io.verdict) == (1e-4, None)
    assert error_limits(int8.verdict) == (None, 15.0)

    drawn = plot_errors(_jobs(passed_int8, passed_two_io), Figure)
    assert drawn is not None
    left, right = drawn[0].axes
    rows = [t.get_text() for t in left.get_yticklabels()]
    assert rows == ["digits[xnnpack+int8] on local: logits",
                    "two_io.py:build[xnnpack] on local: output_0",
                    "two_io.py:build[xnnpack] on local: output_1"]  # fmt: skip
    # The tolerance on the two float outputs' rows only; the floor on the int8 row only.
    assert _marks(left, "tolerance (atol)") == [(1e-4, 1.0), (1e-4, 2.0)]
    assert _marks(right, "SQNR floor (int8 accuracy budget)") == [(15.0, 0.0)]
    # And the bars sit where they must for a passing job: under the tolerance, over the floor.
    assert all(bar.get_x() + bar.get_width() < 1e-4 for bar in left.patches[1:])
    assert right.patches[0].get_width() > 15.0


def test_a_baseline_reports_latency_plot_shows_the_baselines_median(passed: Doc) -> None:
    now = with_latency(passed, [2.0 + 0.01 * (i % 5) for i in range(20)])
    other = on_device(now, "pixel8")
    baseline = {job_key(as_result(now)): as_result(with_latency(passed, [1.0] * 20)).latency_ms}
    drawn = plot_latency(_jobs(now, other), Figure, baseline=baseline)  # type: ignore[arg-type]
    assert drawn is not None
    (ax,) = drawn[0].axes
    legend = [text.get_text() for text in ax.get_legend().get_texts()]
    assert legend == ["median", "baseline median"]
    (diamond,) = [line for line in ax.get_lines() if line.get_label() == "baseline median"]
    # At the baseline's 1 ms on the first job's row; the second job has no baseline.
    assert (list(diamond.get_xdata()), list(diamond.get_ydata())) == ([1.0], [0])
    assert math.isclose(ax.get_lines()[0].get_xdata()[0], 2.02)  # this run's median bar
    # Without a baseline there is no diamond and no such legend entry.
    plain = plot_latency(_jobs(now), Figure, baseline={})
    assert plain is not None
    labels = [t.get_text() for t in plain[0].axes[0].get_legend().get_texts()]
    assert labels == ["median"]

"""The task-accuracy block in every report: a real result of a planted regression
(tests/data/results/accuracy_regressed_int8.json) in the HTML page, JUnit and the
console, and the baseline comparison that names the accuracy drop."""

from __future__ import annotations

import copy
import io
import xml.etree.ElementTree as ET
from pathlib import Path

from rich.console import Console

from etdeploy.report import write_html, write_junit
from etdeploy.report.console import RunConsole
from etdeploy.results import compare_to_baseline
from tests.results.docs import Doc, as_result, load_sample


def regressed() -> Doc:
    return load_sample("accuracy_regressed_int8")


def with_device_accuracy(doc: Doc, value: float) -> Doc:
    doc = copy.deepcopy(doc)
    doc["accuracy"]["scores"][0]["device"] = value
    return doc


def test_the_html_page_shows_the_three_scores_the_interval_and_the_disagreements(
    tmp_path: Path,
) -> None:
    out = tmp_path / "report.html"
    write_html([as_result(regressed())], out)
    page = out.read_text()
    assert "Task accuracy: classification of logits on 360 labelled samples" in page
    assert "quantized eager" in page and "device vs float eager: -31.7 pp" in page
    assert "122 sample(s) where device and eager disagree" in page
    assert "<td>held_out[100]</td><td>3</td><td>3</td><td>9</td>" in page


def test_junit_fails_the_case_with_the_accuracy_reason(tmp_path: Path) -> None:
    out = tmp_path / "junit.xml"
    write_junit([as_result(regressed())], out)
    failure = ET.parse(out).getroot().find(".//failure")
    assert failure is not None
    assert "task accuracy: device top-1 is 31.67 pp below eager" in (failure.text or "")


def test_an_accuracy_gate_alone_is_the_failure_a_report_names(tmp_path: Path) -> None:
    doc = regressed()
    # As if the program matched the quantized one and only the task's gate failed.
    doc["verdict"]["passed"] = True
    for stage in doc["verdict"]["budget"]:
        stage["passed"] = True
    out = tmp_path / "report.html"
    write_html([as_result(doc)], out)
    assert "FAIL accuracy" in out.read_text()


def test_the_console_prints_the_scores_the_paired_difference_and_the_worst_samples() -> None:
    buffer = io.StringIO()
    printer = RunConsole(Console(file=buffer, width=4096), Console(file=io.StringIO()))
    result = as_result(regressed())
    assert result.accuracy is not None
    printer.render_accuracy(result.accuracy)
    text = buffer.getvalue()
    assert "top-1" in text and "97.22%" in text and "65.56%" in text
    assert "p = 9.6e-35; 114 only eager right, 0 only device right" in text
    assert text.count("disagrees:") == 10 and "... and 112 more" in text
    assert "ACCURACY FAIL" in text


def test_a_drop_in_device_accuracy_against_the_baseline_is_a_regression() -> None:
    baseline = with_device_accuracy(regressed(), 0.90)
    found = compare_to_baseline([as_result(regressed())], [as_result(baseline)])
    drops = [r for r in found if r.kind == "accuracy"]
    assert len(drops) == 1 and "90.00% -> " in drops[0].message
    assert drops[0].output == "logits"


def test_the_same_accuracy_or_a_tie_flip_is_not_a_regression() -> None:
    now = as_result(regressed())
    assert not [r for r in compare_to_baseline([now], [now]) if r.kind == "accuracy"]
    device = regressed()["accuracy"]["scores"][0]["device"]
    nearly = as_result(with_device_accuracy(regressed(), device + 0.003))
    assert not [r for r in compare_to_baseline([now], [nearly]) if r.kind == "accuracy"]

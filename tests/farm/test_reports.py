"""etdeploy.farm.reports: the farm's exit code, the cells that cannot run in every
report (and not in the exit code), and a baseline's regressions in the reports and
the exit code."""

from __future__ import annotations

import dataclasses
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from etdeploy.farm import FARM_DOC_NAME, RESULTS_NAME, exit_code
from etdeploy.results import JobKey, Regression, validate_farm
from etdeploy.results.baseline import BUSY_HOST, OUTLIER
from tests.support.farm_fixtures import QUICK, farm, lines_of, tiny_result, write_spec


def table_rows(output: str) -> list[list[str]]:
    """The cells of the first line of each row of the farm table (a job name may
    wrap onto more lines; the device and status columns never do)."""
    rows = []
    for line in output.splitlines():
        cells = [cell.strip() for cell in line.strip("│").split("│")]
        if line.startswith("│") and len(cells) == 7 and cells[1]:
            rows.append(cells)
    return rows


def test_exit_codes_rank_a_failed_check_over_bad_input_over_infrastructure() -> None:
    passed, failed = tiny_result("passed"), tiny_result("failed")
    infra = tiny_result("error", infrastructure=True)
    bad = tiny_result("error", infrastructure=False)
    assert exit_code([passed, passed]) == 0
    assert exit_code([passed, infra]) == 3
    assert exit_code([infra, bad]) == 2
    assert exit_code([infra, bad, failed]) == 1
    slower = Regression(JobKey("digits", "xnnpack", None, "local"), "latency", 1.0, 2.0, "slower")
    assert exit_code([passed], regressions=[slower]) == 1
    # A history's single-night outlier is told, not failed on.
    outlier = dataclasses.replace(slower, alarm=OUTLIER)
    assert exit_code([passed], regressions=[outlier]) == 0
    # So is a one-file baseline's busy host.
    assert exit_code([passed], regressions=[dataclasses.replace(slower, alarm=BUSY_HOST)]) == 0
    assert exit_code([]) == 0


@pytest.mark.slow
def test_a_regression_against_the_baseline_is_flagged_and_exit_1(tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "n.toml", {"models": ["digits"], "devices": ["local"], **QUICK})
    first = farm(spec, "--out", tmp_path / "first")
    assert first.exit_code == 0, first.output
    # The same job with 4 MiB less memory at every phase's peak in the baseline (its
    # runner part): the job now needs 4 MiB more. Latency growth this small job can
    # show is under what one pair of runs can tell (report.baseline.LATENCY_FLOOR_MS).
    (result,) = lines_of(tmp_path / "first" / RESULTS_NAME)
    memory, removed = result["memory"], 4 << 20
    for phase in memory["phases"]:
        for part in phase["parts"]:
            if part["part"] == "runner":
                part["bytes"] -= removed
        phase["peak_bytes"] -= removed
    memory["peak_bytes"] -= removed
    baseline = tmp_path / "baseline.jsonl"
    baseline.write_text(json.dumps(result) + "\n")
    again = farm(
        spec, "--out", tmp_path / "second", "--baseline", baseline, "--junit", tmp_path / "j.xml"
    )
    assert again.exit_code == 1, again.output
    # The regression line names its job, and the job's row does not say pass.
    assert "regression: digits[xnnpack] on local: memory, " in again.output
    (row,) = table_rows(again.output)
    assert row[1:3] == ["local", "REGRESSED"]
    assert "1 passed, 0 failed, 0 error(s), 1 regression(s)" in again.output
    (case,) = ET.parse(tmp_path / "j.xml").getroot().iter("testcase")
    failure = case.find("failure")
    assert failure is not None and failure.get("type") == "regression"


@pytest.mark.slow
def test_cells_that_cannot_run_are_skipped_in_every_report_and_the_farm_passes(
    tmp_path: Path,
) -> None:
    # int8 crossed with portable: its cell cannot build (the XNNPACK quantizer).
    spec = write_spec(tmp_path / "n.toml", {"models": ["digits"], "backends": ["xnnpack", "portable"],
                                            "quantize": ["int8"], "devices": ["local"], **QUICK})  # fmt: skip
    reports = {"--json": tmp_path / "farm.json", "--junit": tmp_path / "junit.xml",
               "--html": tmp_path / "report.html"}  # fmt: skip
    done = farm(spec, "--out", tmp_path / "out", *[a for kv in reports.items() for a in kv])
    assert done.exit_code == 0, done.output  # every job that can run passed
    why = "int8 uses the XNNPACK quantizer, which backend portable does not take"
    # The console: a progress line before anything starts, a table row, the count.
    assert f"skipped digits[portable+int8] on local: {why}" in done.output
    assert [row[1:3] for row in table_rows(done.output)] == [
        ["local", "pass"],
        ["local", "skipped"],
    ]
    assert "1 passed, 0 failed, 0 error(s), 1 skipped" in done.output
    (ran,) = lines_of(tmp_path / "out" / RESULTS_NAME)  # never started: no result, no worker
    assert ran["farm"]["key"] == "digits|xnnpack|int8|local"

    doc = json.loads(reports["--json"].read_text())
    validate_farm(doc)
    assert doc == json.loads((tmp_path / "out" / FARM_DOC_NAME).read_text())
    assert doc["skipped"] == [{"model": "digits", "backend": "portable", "quantization": "int8",
                               "device": "local", "reason": why}]  # fmt: skip
    assert doc["not_run"] == [] and len(doc["matrix"]) == 1

    suite = ET.parse(reports["--junit"]).getroot().find("testsuite")
    assert suite is not None and (suite.get("tests"), suite.get("skipped")) == ("2", "1")
    skipped = [c for c in suite.iter("testcase") if c.find("skipped") is not None]
    assert [c.get("name") for c in skipped] == ["digits[portable+int8] on local"]
    assert skipped[0].find("skipped").get("message") == f"skipped: {why}"  # type: ignore[union-attr]

    html = reports["--html"].read_text()
    assert 'data-status="skipped" data-key="digits[portable+int8] on local"' in html
    assert f"<td>{why}</td>" in html and "1 skipped</span>" in html

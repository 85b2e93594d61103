"""etdeploy.farm.reports: the farm's exit code, and a baseline's regressions in
the reports and the exit code."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from etdeploy.farm import RESULTS_NAME, exit_code
from tests.support.farm_fixtures import QUICK, farm, lines_of, tiny_result, write_spec


def test_exit_codes_rank_a_failed_check_over_bad_input_over_infrastructure() -> None:
    passed, failed = tiny_result("passed"), tiny_result("failed")
    infra = tiny_result("error", infrastructure=True)
    bad = tiny_result("error", infrastructure=False)
    assert exit_code([passed, passed]) == 0
    assert exit_code([passed, infra]) == 3
    assert exit_code([infra, bad]) == 2
    assert exit_code([infra, bad, failed]) == 1
    assert exit_code([passed], regressions=["slower"]) == 1
    assert exit_code([]) == 0


@pytest.mark.slow
def test_a_slower_run_than_the_baseline_is_a_regression_and_exit_1(tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "n.toml", {"models": ["digits"], "devices": ["local"], **QUICK})
    first = farm(spec, "--out", tmp_path / "first")
    assert first.exit_code == 0, first.output
    # The same job, a hundred times faster in the baseline than it can be now.
    (result,) = lines_of(tmp_path / "first" / RESULTS_NAME)
    latency = result["latency_ms"]
    fast = latency["median"] / 100
    latency.update(
        min=fast, median=fast, p90=fast, max=fast, trimmed_mean=fast, stdev=0.0, iterations=[fast]
    )
    baseline = tmp_path / "baseline.jsonl"
    baseline.write_text(json.dumps(result) + "\n")
    again = farm(
        spec, "--out", tmp_path / "second", "--baseline", baseline, "--junit", tmp_path / "j.xml"
    )
    assert again.exit_code == 1, again.output
    assert "regression:" in again.output
    (case,) = ET.parse(tmp_path / "j.xml").getroot().iter("testcase")
    failure = case.find("failure")
    assert failure is not None and failure.get("type") == "regression"

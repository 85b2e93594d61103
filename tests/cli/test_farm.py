"""`etdeploy farm` on the console: with -q, no line per job started or passed; a job
that did not pass still gets its line, and the summary is printed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.farm_fixtures import MODELS, QUICK, farm, write_spec

pytestmark = pytest.mark.slow

# "[1/2 00:03] start ...", "[2/2 00:05] pass ...": a job's progress line.
JOB_LINE = re.compile(r"^\[\s*\d+/\d+ [\d:]+\] (\S+)")


def job_lines(output: str) -> list[str]:
    """What each per-job line says (start, pass, error, ...), in order."""
    return [m.group(1) for line in output.splitlines() if (m := JOB_LINE.match(line))]


def test_quiet_prints_only_the_jobs_that_did_not_pass_and_the_summary(tmp_path: Path) -> None:
    spec = write_spec(
        tmp_path / "farm.toml",
        {"models": ["digits", f"{MODELS / 'broken.py'}:raises"], "devices": ["local"], **QUICK},
    )
    loud = farm(spec, "--out", tmp_path / "loud")
    assert loud.exit_code != 0, loud.output
    assert sorted(job_lines(loud.output)) == ["error", "pass", "start", "start"], loud.output

    quiet = farm(spec, "--out", tmp_path / "quiet", "-q")
    assert quiet.exit_code == loud.exit_code, quiet.output
    assert job_lines(quiet.output) == ["error"], quiet.output
    assert "weights file missing" in quiet.output
    assert "1 passed, 0 failed, 1 error(s)" in quiet.output  # the summary still comes

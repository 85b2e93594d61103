"""JUnit XML: parsed back with ElementTree, counted, and checked against the
structure of the common JUnit schema (Ant's, as Jenkins and GitLab read it)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from etdeploy.report import write_junit
from etdeploy.results import JobKey, NotRun, Regression, job_key
from tests.results.docs import (
    Doc,
    as_result,
    as_results,
    input_error,
    numeric_failure,
    on_device,
    size_failure,
)

SUITE_ATTRS = ("name", "tests", "failures", "errors", "skipped", "time", "timestamp", "hostname")


def _check_structure(root: ET.Element) -> None:
    """What the common schema requires, so a CI server does not drop the file."""
    assert root.tag == "testsuites"
    suites = root.findall("testsuite")
    assert suites
    for suite in suites:
        for attr in SUITE_ATTRS:
            assert suite.get(attr) is not None, attr
        cases = suite.findall("testcase")
        assert int(suite.get("tests")) == len(cases)
        assert int(suite.get("failures")) == sum(len(c.findall("failure")) for c in cases)
        assert int(suite.get("errors")) == sum(len(c.findall("error")) for c in cases)
        assert int(suite.get("skipped")) == sum(len(c.findall("skipped")) for c in cases)
        assert float(suite.get("time")) >= 0
        assert suite[0].tag == "properties"
        assert [child.tag for child in suite][-2:] == ["system-out", "system-err"]
        for case in cases:
            assert case.get("classname") and case.get("name")
            float(case.get("time"))
            outcomes = [c for c in case if c.tag in ("failure", "error", "skipped")]
            assert len(outcomes) <= 1  # Ant's schema allows one outcome per testcase
            order = [c.tag for c in case]
            assert order == sorted(
                order, key=["failure", "error", "skipped", "system-out", "system-err"].index
            )
    for attr in ("tests", "failures", "errors", "skipped"):
        assert int(root.get(attr)) == sum(int(s.get(attr)) for s in suites)


def test_counts_and_outcomes(
    tmp_path: Path, passed: Doc, passed_portable: Doc, infra_error: Doc
) -> None:
    results = [
        passed,
        passed_portable,
        numeric_failure(passed_portable),
        size_failure(on_device(passed, "pixel8")),
        infra_error,
        input_error(infra_error),
    ]
    out = tmp_path / "junit.xml"
    write_junit(as_results(results), out, suite_name="nightly")
    root = ET.parse(out).getroot()
    _check_structure(root)
    suite = root.find("testsuite")
    assert suite.get("name") == "nightly"
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("6", "2", "2")

    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases[:2]] == [
        "digits[xnnpack] on local",
        "digits[portable] on local",
    ]
    assert {c.get("classname") for c in cases} == {"digits"}
    assert cases[0].get("time") == f"{passed['seconds']:.3f}"
    assert cases[0].find("failure") is None and cases[0].find("error") is None

    # A check that failed is a failure, typed by what failed.
    numerics = cases[2].find("failure")
    assert numerics is not None and numerics.get("type") == "numerics"
    assert numerics.get("message").startswith("max abs error")
    assert "worst: logits" in numerics.text
    size = cases[3].find("failure")
    assert size.get("type") == "size"
    assert "Play base module: over by 8.53 kB" in size.get("message")
    assert cases[3].get("name") == "digits[xnnpack] on pixel8"

    # A run that could not finish is an error, typed by who is at fault.
    infra = cases[4].find("error")
    assert infra.get("type") == "infrastructure.RunnerFailure"
    assert "timed out" in infra.get("message")
    assert "hint: raise the deadline" in infra.text
    assert cases[4].find("failure") is None
    bad_input = cases[5].find("error")
    assert bad_input.get("type") == "input.ModelError"

    # Logs (clipped) in system-out, warnings in system-err.
    assert "Model loaded in" in cases[0].find("system-out").text
    assert cases[5].find("system-out") is None  # that error kept no log
    assert len(cases[4].find("system-out").text) <= 8100


def test_warnings_and_unprintable_log(tmp_path: Path, passed: Doc) -> None:
    passed["warnings"] = ["backend claimed 40% of the graph"]
    passed["logs"] = ["\x1b[31mred\x1b[0m and a NUL \x00 from a crash & <tag>"]
    out = tmp_path / "junit.xml"
    write_junit([as_result(passed)], out)
    case = ET.parse(out).getroot().find("testsuite/testcase")
    assert case.find("system-err").text == "backend claimed 40% of the graph"
    assert (
        case.find("system-out").text == "\\x1b[31mred\\x1b[0m and a NUL \\x00 from a crash & <tag>"
    )


def test_regressions_fail_a_passing_job(tmp_path: Path, passed: Doc, passed_portable: Doc) -> None:
    failing = numeric_failure(passed_portable)
    regressions = [
        Regression(
            job_key(as_result(passed)),
            "latency",
            0.0033,
            0.0066,
            "median latency 0.0033 ms -> 0.0066 ms",
        ),
        Regression(
            job_key(as_result(failing)),
            "sqnr",
            128.0,
            34.0,
            "logits: worst SQNR 128.0 dB -> 34.0 dB",
        ),
    ]
    out = tmp_path / "junit.xml"
    write_junit(as_results([passed, failing]), out, regressions=regressions)
    root = ET.parse(out).getroot()
    _check_structure(root)
    first, second = root.findall("testsuite/testcase")
    regression = first.find("failure")
    assert regression.get("type") == "regression"
    assert regression.get("message") == "median latency 0.0033 ms -> 0.0066 ms"
    # Already failing: still one failure, of its own kind, with the regression in its text.
    assert len(second.findall("failure")) == 1
    assert second.find("failure").get("type") == "numerics"
    assert "regression (sqnr)" in second.find("failure").text
    assert root.get("failures") == "2"


def test_jobs_without_a_result_are_skipped_testcases_with_the_reason(
    tmp_path: Path, passed: Doc
) -> None:
    not_run = [
        NotRun(JobKey("digits", "portable", "int8", "local"),
               "int8 uses the XNNPACK quantizer, which backend portable does not take", skipped=True),
        NotRun(JobKey("digits", "xnnpack", None, "pixel8"),
               "no result: shard 1 of 2 did not report it"),
    ]  # fmt: skip
    out = tmp_path / "junit.xml"
    write_junit([as_result(passed)], out, not_run=not_run)
    root = ET.parse(out).getroot()
    _check_structure(root)
    assert (root.get("tests"), root.get("skipped"), root.get("failures"), root.get("errors")) == (
        "3", "2", "0", "0",
    )  # fmt: skip
    _ran, cannot, lost = root.findall("testsuite/testcase")
    assert (cannot.get("classname"), cannot.get("name")) == (
        "digits",
        "digits[portable+int8] on local",
    )
    assert cannot.find("skipped").get("message") == (
        "skipped: int8 uses the XNNPACK quantizer, which backend portable does not take"
    )
    assert lost.get("name") == "digits[xnnpack] on pixel8" and lost.get("time") == "0.000"
    assert (
        lost.find("skipped").get("message") == "not run: no result: shard 1 of 2 did not report it"
    )


def test_atomic_and_replaces(tmp_path: Path, passed: Doc) -> None:
    out = tmp_path / "reports" / "junit.xml"
    write_junit([as_result(passed)], out)
    write_junit([], out)
    assert ET.parse(out).getroot().get("tests") == "0"
    assert sorted(p.name for p in out.parent.iterdir()) == ["junit.xml"]  # no temp left
    assert out.stat().st_mode & 0o777 == 0o644

"""JUnit XML for CI: one <testcase> per job.

The layout is the common one CI servers read (Jenkins, GitLab, GitHub actions
that render test reports): <testsuites> holding one <testsuite> with the counts
tests/failures/errors/skipped/time, and per testcase at most one <failure> or
<error>, then <system-out> (the error budget, the task-accuracy block when the samples
carry labels, the clipped logs) and <system-err> (the warnings).
A planned job without a result (etdeploy.results.NotRun: a combination that
cannot run, a shard that never reported) is a testcase with <skipped>, so CI
lists it instead of forgetting it.
A failed check is a <failure> (type "numerics", "size" or "regression"); a run
that could not finish is an <error> whose type says who is at fault:
"infrastructure.<Kind>" (device, transport, runner) or "input.<Kind>".
"""

from __future__ import annotations

import re
import socket
import time
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

from etdeploy.atomic import atomic_write
from etdeploy.report.text import accuracy_lines, budget_lines, clip, joined_logs
from etdeploy.results.baseline import OUTLIER, Regression
from etdeploy.results.jobs import JobKey, NotRun, error_type, failure_kind, failure_message, job_key
from etdeploy.results.result import RunResult

# XML 1.0 cannot hold most control characters, not even escaped; runner logs
# carry them (ANSI colours, a NUL from a crashed process).
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _xml_text(text: object) -> str:
    return _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}", str(text))


def write_junit(
    results: Sequence[RunResult],
    path: Path,
    *,
    suite_name: str = "etdeploy",
    regressions: Sequence[Regression] | None = None,
    not_run: Sequence[NotRun] = (),
) -> None:
    """Write the JUnit XML of `results` to `path`, atomically.

    A regression against a baseline makes its testcase a <failure
    type="regression"> when the job itself passed, and is added to the text of
    the failure or error it already has otherwise. Each of `not_run` is a
    testcase with <skipped message="skipped: REASON"> (or "not run: REASON"),
    after the results.
    """
    by_key: dict[JobKey, list[Regression]] = {}
    for regression in regressions or ():
        by_key.setdefault(regression.key, []).append(regression)

    suites = ET.Element("testsuites", name=_xml_text(suite_name))
    suite = ET.SubElement(suites, "testsuite", name=_xml_text(suite_name))
    properties = ET.SubElement(suite, "properties")
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    total_seconds = 0.0
    for result in results:
        key = job_key(result)
        seconds = result.seconds
        total_seconds += seconds
        counts["tests"] += 1
        case = ET.SubElement(
            suite, "testcase", classname=_xml_text(key.model), name=_xml_text(key.label),
            time=f"{seconds:.3f}",
        )  # fmt: skip
        outcome = _outcome(result, by_key.get(key, []))
        if outcome is not None:
            tag, message, kind, text = outcome
            counts["failures" if tag == "failure" else "errors"] += 1
            node = ET.SubElement(case, tag, message=_xml_text(message), type=_xml_text(kind))
            node.text = _xml_text(text)
        told = [f"{_alarm_name(r)} ({r.kind}): {r.message}" for r in by_key.get(key, [])
                if not r.is_regression]  # fmt: skip
        out = "\n".join(
            [*told, *budget_lines(result.verdict), *accuracy_lines(result), joined_logs(result)]
        ).strip()
        if out:
            ET.SubElement(case, "system-out").text = _xml_text(out)
        if result.warnings:
            ET.SubElement(case, "system-err").text = _xml_text(clip("\n".join(result.warnings)))
    for job in not_run:
        counts["tests"] += 1
        counts["skipped"] += 1
        case = ET.SubElement(suite, "testcase", classname=_xml_text(job.key.model),
                             name=_xml_text(job.key.label), time="0.000")  # fmt: skip
        ET.SubElement(case, "skipped", message=_xml_text(f"{job.status}: {job.reason}"))

    _add_properties(properties, results)
    for element in (suites, suite):
        for name, value in counts.items():
            element.set(name, str(value))
        element.set("time", f"{total_seconds:.3f}")
    suite.set("timestamp", _first_start(results))
    suite.set("hostname", _xml_text(socket.gethostname()))
    # Suite-level output, empty: the strict Ant schema wants both elements present.
    ET.SubElement(suite, "system-out")
    ET.SubElement(suite, "system-err")

    ET.indent(suites)
    body = ET.tostring(suites, encoding="unicode")
    atomic_write(Path(path), ('<?xml version="1.0" encoding="UTF-8"?>\n' + body + "\n").encode())


def _outcome(result: RunResult, regressions: list[Regression]) -> tuple[str, str, str, str] | None:
    """(tag, message, type, text) of the testcase's failure or error, or None."""
    # A history's single-night outliers are told, never failed on (etdeploy.history.judge).
    notes = [f"{_alarm_name(r)} ({r.kind}): {r.message}" for r in regressions]
    regressions = [r for r in regressions if r.is_regression]
    if result.status == "error":
        error = result.error
        lines = [error.message if error is not None else "error"]
        if error is not None:
            where = (("hint", error.hint), ("device", error.device), ("command", error.command))
            lines += [f"{label}: {value}" for label, value in where if value]
        retryable = error is not None and error.retryable
        lines.append(f"exit code {result.exit_code}; retryable: {retryable}")
        return "error", lines[0], error_type(result), "\n".join([*lines, *notes])
    if result.status == "failed":
        kind = failure_kind(result)
        return (
            "failure",
            failure_message(result),
            kind,
            "\n".join([*_failure_details(result), *notes]),
        )
    if regressions:
        return "failure", "; ".join(r.message for r in regressions), "regression", "\n".join(notes)
    return None


def _alarm_name(regression: Regression) -> str:
    """regression, regression (change point), outlier (single night) or busy host."""
    if regression.alarm is None:
        return "regression"
    if regression.is_regression:
        return f"regression, {regression.alarm}"
    if regression.alarm == OUTLIER:
        return f"{regression.alarm}, single night, not a regression"
    return f"{regression.alarm}, not a regression"  # a one-file baseline's busy host


def _failure_details(result: RunResult) -> list[str]:
    verdict = result.verdict
    lines = [verdict.reason if verdict is not None else ""]
    worst = verdict.worst if verdict is not None else None
    if worst is not None:
        lines.append(
            f"worst: {worst.name} (sample {worst.sample}): max abs {worst.max_abs}, "
            f"SQNR {worst.sqnr_db} dB, cosine {worst.cosine}, allclose {worst.allclose}"
        )
    if verdict is not None and verdict.top1_agreement is not None:
        lines.append(f"top-1 agreement: {verdict.top1_agreement:.3f}")
    lines += budget_lines(verdict)
    found = result.accuracy
    if found is not None and not found.passed:
        lines.append(f"task accuracy: {found.reason}")
    for v in result.size.verdicts if result.size is not None else ():
        if v.status == "over":
            lines.append(f"size: {v.label}: {v.text} (limit {v.limit_bytes} bytes)")
    return lines


def _add_properties(properties: ET.Element, results: Sequence[RunResult]) -> None:
    versions = sorted({r.etdeploy for r in results if r.etdeploy})
    if versions:
        ET.SubElement(properties, "property", name="etdeploy", value=", ".join(versions))
    devices = sorted({job_key(r).device for r in results})
    if devices:
        ET.SubElement(properties, "property", name="devices", value=_xml_text(", ".join(devices)))


def _first_start(results: Sequence[RunResult]) -> str:
    """The earliest job start, as the Ant schema's timestamp (no zone; it is UTC)."""
    starts = sorted(r.started_at for r in results if r.started_at)
    if starts:
        return starts[0].removesuffix("Z")[:19]
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())

"""The memory account and the --shapes points in every report: the schema (the
parts of a phase must sum to its peak), the failure line, JUnit and the HTML page
(the account table, the limit, the points, the stacked bar per phase), on a real
result document (tests/data/results/passed_memory_shapes.json)."""

from __future__ import annotations

import copy
import io
import re
from pathlib import Path

import pytest
from rich.console import Console

from etdeploy.errors import UsageError
from etdeploy.report import write_html, write_junit
from etdeploy.report.console import RunConsole
from etdeploy.results import farm_document, validate_farm, validate_result
from etdeploy.results.jobs import failure_kind, failure_message
from tests.results.docs import Doc, as_result


def over_limit(doc: Doc) -> Doc:
    """The same run judged against a limit below its peak, as the pipeline writes it."""
    failed = copy.deepcopy(doc)
    memory = failed["memory"]
    limit = memory["peak_bytes"] - 1
    memory["limit"].update(
        limit_bytes=limit, passed=False, source="--max-memory 6MB",
        message=f"peak memory {memory['peak_bytes']} B exceeds the limit {limit} B (--max-memory 6MB)",
    )  # fmt: skip
    failed.update(status="failed", exit_code=1)
    return failed


def test_the_account_validates_and_each_phase_sums_to_its_peak(passed_memory: Doc) -> None:
    validate_result(passed_memory)
    result = as_result(passed_memory)
    assert result.memory is not None and result.shapes is not None
    assert [p.phase for p in result.memory.account] == ["load", "first_execution", "steady_state"]
    for memory in (result.memory, *(p.memory for p in result.shapes if p.memory)):
        for phase in memory.account:
            assert sum(part.bytes for part in phase.parts) == phase.peak_bytes
    assert result.to_json() == passed_memory


@pytest.mark.parametrize("where", ["memory", "shapes"])
def test_parts_that_do_not_sum_to_the_peak_are_refused_naming_the_phase(
    passed_memory: Doc, where: str
) -> None:
    broken = copy.deepcopy(passed_memory)
    memory = broken["memory"] if where == "memory" else broken["shapes"][1]["memory"]
    memory["phases"][2]["parts"][0]["bytes"] += 4096
    with pytest.raises(UsageError, match=r"phases\[2\]: its parts sum to") as raised:
        validate_result(broken)
    expected = "memory.phases[2]" if where == "memory" else "shapes[1].memory.phases[2]"
    assert expected in raised.value.message
    document = farm_document([as_result(passed_memory)], started_at="2026-12-04T00:00:00Z",
                             finished_at="2026-12-04T00:01:00Z", matrix=[])  # fmt: skip
    document["results"][0] = broken
    with pytest.raises(UsageError, match="its parts sum to"):
        validate_farm(document)


def test_an_unknown_part_or_phase_is_refused(passed_memory: Doc) -> None:
    for change in (("part", "swap"), ("phase", "warmup")):
        broken = copy.deepcopy(passed_memory)
        phase = broken["memory"]["phases"][0]
        if change[0] == "part":
            phase["parts"][0]["part"] = change[1]
        else:
            phase["phase"] = change[1]
        with pytest.raises(UsageError, match=change[1]):
            validate_result(broken)


def test_a_run_over_its_limit_fails_on_memory_in_every_report(
    passed_memory: Doc, tmp_path: Path
) -> None:
    result = as_result(over_limit(passed_memory))
    assert failure_kind(result) == "memory"
    assert failure_message(result).startswith("memory: peak memory ")
    write_junit([result], tmp_path / "junit.xml")
    junit = (tmp_path / "junit.xml").read_text()
    assert 'type="memory"' in junit and "exceeds the limit" in junit


def test_the_html_page_shows_the_account_the_limit_the_points_and_the_bar(
    passed_memory: Doc, tmp_path: Path
) -> None:
    out = tmp_path / "report.html"
    write_html([as_result(passed_memory), as_result(over_limit(passed_memory))], out)
    html = out.read_text()
    assert html.count("<h4>Memory per phase</h4>") == 2
    table = html[
        html.index("<table class=memory>") : html.index(
            "</table>", html.index("<table class=memory>")
        )
    ]
    assert [cell for cell in re.findall(r"<th>([^<]+)</th>", table)][:4] == [
        "part", "load", "first execution", "steady state"
    ]  # fmt: skip
    assert "unexplained" in table and "<th>peak</th>" in table
    assert "is within 1.00 GB (--max-memory 1GB)" in html
    assert "class=fail>peak memory" in html
    assert "<h4>Dynamic shapes</h4>" in html and "plans memory for the upper bound" in html
    # The stacked bar per phase is one of the plots, drawn (not "no data").
    figure = html[html.index("Memory per phase, by part of the account") :]
    assert figure[: figure.index("</figure>")].count("data:image/png;base64,") == 1


def console_lines(result_doc: Doc) -> list[str]:
    """What `etdeploy run` prints for the result, piped."""
    out = io.StringIO()
    console = Console(file=out, width=200, color_system=None)
    RunConsole(console, console).render_result(as_result(result_doc))
    return out.getvalue().splitlines()


def test_on_the_console_each_gate_says_what_it_found(passed_memory: Doc) -> None:
    """Over the memory limit, the outputs that held still read PASS and the memory
    gate has its own FAIL line; a limit that held reads as one sentence."""
    over = console_lines(over_limit(passed_memory))
    numerics = next(line for line in over if "max abs error" in line and "holds" in line)
    assert numerics.startswith("PASS "), over
    assert over[-1].startswith("FAIL peak memory ") and "exceeds the limit" in over[-1]
    assert not any(line.startswith("FAIL max abs") for line in over)

    within = next(line for line in console_lines(passed_memory) if "memory limit:" in line)
    assert within.startswith("memory limit: peak ") and "is within 1.00 GB" in within
    assert within.count("within") == 1

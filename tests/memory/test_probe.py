"""The runner's --memory readings (android_harness/src/memory_probe.h) as
etdeploy.memory.probe reads them: taken by the real runner on real programs."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from etdeploy.errors import RunnerError
from etdeploy.memory.probe import PHASES, parse_runner_memory
from tests.memory.conftest import Reading


def test_the_runner_reads_each_phase_with_its_own_peak(
    run_runner: Reading, digits_programs: dict[str, Path]
) -> None:
    document = run_runner(
        digits_programs["xnnpack"], "--warmup=2", "--num_executions=3", "--memory"
    )
    reading = parse_runner_memory(document["memory"])
    assert reading is not None
    assert [p.name for p in reading.phases] == list(PHASES)
    assert reading.source == "linux-proc" and reading.heap_source == "mallinfo2"
    # This kernel takes the peak reset (clear_refs 5), so each peak is the phase's own.
    assert all(p.peak_reset for p in reading.phases)
    load = reading.phase("load")
    assert load is not None and load.peak is not None and load.at_peak.rss is not None
    # XNNPACK frees the program bytes it compiled from during the load: a checkpoint each.
    assert load.checkpoints > 0
    # The peak is never below the reading taken closest to it.
    assert all(p.peak is not None and p.at_peak.rss is not None and p.peak >= p.at_peak.rss
               for p in reading.phases)  # fmt: skip
    # The program file was mapped: its pages are found by its real path.
    assert document["memory"]["program_files"] == [str(digits_programs["xnnpack"].resolve())]
    assert load.at_peak.program_rss is not None and load.at_peak.program_rss > 0
    # The runner's whole-run peak stays the process's highest, not the last phase's.
    assert document["peak_rss_bytes"] >= max(p.peak or 0 for p in reading.phases)


def test_planned_buffers_are_the_methods_own_sizes(
    run_runner: Reading, digits_programs: dict[str, Path]
) -> None:
    import json

    pte = digits_programs["portable"]
    reading = parse_runner_memory(run_runner(pte, "--memory")["memory"])
    assert reading is not None
    manifest = json.loads(pte.with_name(pte.name + ".json").read_text())
    assert sum(reading.planned_buffers) == manifest["methods"][0]["planned_bytes"] > 0


def test_one_execution_has_no_steady_state(
    run_runner: Reading, digits_programs: dict[str, Path]
) -> None:
    reading = parse_runner_memory(run_runner(digits_programs["int8"], "--memory")["memory"])
    assert reading is not None
    assert [p.name for p in reading.phases] == ["load", "first_execution"]


def test_without_the_flag_nothing_is_measured(
    run_runner: Reading, digits_programs: dict[str, Path]
) -> None:
    document = run_runner(digits_programs["xnnpack"])
    assert "memory" not in document and document["peak_rss_bytes"] > 0


@pytest.fixture(scope="module")
def document(run_runner: Reading, digits_programs: dict[str, Path]) -> dict[str, Any]:
    return run_runner(digits_programs["xnnpack"], "--memory", "--warmup=1")["memory"]


@pytest.mark.parametrize(
    ("damage", "named"),
    [
        (lambda d: d.update(schema="etdeploy.runner_memory/9"), "etdeploy.runner_memory/9"),
        (lambda d: d.update(planned_buffers=["big"]), "planned_buffers"),
        (lambda d: d["phases"][0].update(name="warmup"), "phases[0]"),
        (lambda d: d["phases"][1]["at_peak"].update(rss=1.5), "phases[1].at_peak.rss"),
        (lambda d: d.update(baseline=[]), "baseline"),
    ],
)
def test_a_damaged_document_is_a_runner_error_naming_the_field(
    document: dict[str, Any], damage: Any, named: str
) -> None:
    broken = copy.deepcopy(document)
    damage(broken)
    with pytest.raises(RunnerError, match=named.replace("[", r"\[").replace("]", r"\]")) as raised:
        parse_runner_memory(broken)
    assert raised.value.hint and "rebuild the runner" in raised.value.hint

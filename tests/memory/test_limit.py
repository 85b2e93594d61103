"""The memory limit (etdeploy.memory.limit): how it is written, where it comes
from, and the verdict on a real run's account."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from etdeploy.config import Config, parse_config
from etdeploy.errors import EXIT_BAD_INPUT, UsageError
from etdeploy.memory.account import account
from etdeploy.memory.limit import (
    JudgedMemory,
    MaxMemory,
    judge_limit,
    judge_memory,
    parse_max_memory,
    resolve_max_memory,
)
from etdeploy.memory.probe import parse_runner_memory
from etdeploy.pipeline.verify import Judged
from etdeploy.results.result import SizeSummary, Verdict
from etdeploy.results.result_memory import Memory
from etdeploy.results.result_shapes import ShapePoint
from tests.memory.conftest import Reading


@pytest.mark.parametrize(
    ("text", "expected"),
    [("300MB", 300_000_000), ("1.5GB", 1_500_000_000), ("512MiB", 512 << 20), (4096, 4096)],
)
def test_sizes_read_as_decimal_or_binary_units(text: str | int, expected: int) -> None:
    assert parse_max_memory(text, "--max-memory") == expected


@pytest.mark.parametrize("text", ["lots", "300 parsecs", "-5MB", "0", True])
def test_an_unreadable_limit_is_bad_input_with_a_hint(text: object) -> None:
    with pytest.raises(UsageError) as raised:
        parse_max_memory(text, "--max-memory")
    assert raised.value.exit_code == EXIT_BAD_INPUT
    assert "--max-memory" in raised.value.message and "\n" not in raised.value.message
    assert raised.value.hint is not None and "300MB" in raised.value.hint


def config(tmp_path: Path, run: dict[str, object], box: dict[str, object]) -> Config:
    return parse_config(
        {"run": run, "devices": {"box": {"transport": "local", **box}}}, tmp_path / "etdeploy.toml"
    )


def test_the_flag_beats_the_device_which_beats_the_run_section(tmp_path: Path) -> None:
    both = config(tmp_path, {"max_memory": "2GB"}, {"max_memory": "1GB"})

    def limit(flag: str | None, device: str) -> MaxMemory | None:
        return resolve_max_memory(flag, both.run, both.devices, device, "etdeploy.toml")

    assert limit("300MB", "box") == MaxMemory(300_000_000, "--max-memory 300MB")
    assert limit(None, "box") == MaxMemory(1_000_000_000, "etdeploy.toml: devices.box.max_memory")
    assert limit(None, "local") == MaxMemory(2_000_000_000, "etdeploy.toml: run.max_memory")
    nothing = config(tmp_path, {}, {})
    assert resolve_max_memory(None, nothing.run, nothing.devices, "box", "x") is None


def test_a_devices_unreadable_limit_names_its_table(tmp_path: Path) -> None:
    bad = config(tmp_path, {}, {"max_memory": "a lot"})
    with pytest.raises(UsageError, match=r"etdeploy.toml: devices.box.max_memory: cannot read"):
        resolve_max_memory(None, bad.run, bad.devices, "box", "etdeploy.toml")


@pytest.fixture(scope="module")
def measured(run_runner: Reading, digits_programs: dict[str, Path]) -> Memory:
    reading = parse_runner_memory(
        run_runner(digits_programs["xnnpack"], "--memory", "--warmup=1", "--num_executions=2")[
            "memory"
        ]
    )
    assert reading is not None
    phases = account(reading)
    return Memory(peak_bytes=max(p.peak_bytes for p in phases), phases=phases)


def test_a_peak_over_the_limit_fails_naming_the_phase_and_its_largest_part(
    measured: Memory,
) -> None:
    peak = measured.peak_phase
    assert peak is not None and peak.largest is not None
    verdict = judge_limit(MaxMemory(peak.peak_bytes - 1, "--max-memory X"), [("", measured)])
    assert not verdict.passed and verdict.phase == peak.phase
    assert verdict.peak_bytes == peak.peak_bytes
    assert f"({peak.label})" in verdict.message and "--max-memory X" in verdict.message
    assert peak.largest.label in verdict.message


def test_a_peak_at_the_limit_passes(measured: Memory) -> None:
    assert measured.peak_bytes is not None
    verdict = judge_limit(MaxMemory(measured.peak_bytes, "--max-memory X"), [("", measured)])
    assert verdict.passed and "is within" in verdict.message


def test_the_highest_of_the_run_and_its_shape_points_is_judged(measured: Memory) -> None:
    assert measured.peak_bytes is not None
    smaller = Memory(
        peak_bytes=measured.peak_bytes // 2,
        phases=tuple(type(p)(p.phase, p.peak_bytes // 2, p.parts[:0]) for p in measured.account),
    )
    verdict = judge_limit(
        MaxMemory(measured.peak_bytes - 1, "x"), [("at shapes min", smaller), ("", measured)]
    )
    assert not verdict.passed and "at shapes" not in verdict.message


def test_nothing_measured_is_said_not_passed_silently() -> None:
    verdict = judge_limit(MaxMemory(1, "--max-memory 1B"), [("", Memory(planned_bytes=10))])
    assert verdict.passed and verdict.peak_bytes is None
    assert "no memory measured" in verdict.message


# -- the run's one verdict: memory is one of its inputs (memory.limit, pipeline.verify) --


def judged(memory: JudgedMemory) -> Judged:
    """A run whose outputs, task and size pass: only memory can fail it."""
    size = SizeSummary(raw_bytes=1, download_bytes=1, verdicts=(), passed=True)
    return Judged(Verdict(passed=True, reason="within budget"), None, size, (), None, memory)


def test_a_run_over_its_memory_limit_fails_its_one_verdict(measured: Memory) -> None:
    assert measured.peak_bytes is not None
    over = judge_memory(measured, (), MaxMemory(measured.peak_bytes - 1, "--max-memory X"))
    assert over.memory.limit is not None and not over.memory.limit.passed
    assert not over.passed and not judged(over).passed
    within = judge_memory(measured, (), MaxMemory(measured.peak_bytes, "--max-memory X"))
    assert within.passed and judged(within).passed
    assert judged(judge_memory(measured, (), None)).passed  # no limit set: nothing to fail


def test_a_shape_point_that_fails_fails_the_run(measured: Memory) -> None:
    point = ShapePoint(
        point="max", shapes=((1, 1, 28, 28),), passed=False, reason="outputs differ", samples=1,
        memory=measured,
    )  # fmt: skip
    assert not judged(judge_memory(measured, (point,), None)).passed
    assert judged(judge_memory(measured, (replace(point, passed=True),), None)).passed


def test_a_limit_nothing_measured_can_be_held_to_is_said_in_the_verdicts_warnings() -> None:
    found = judge_memory(Memory(planned_bytes=10), (), MaxMemory(1, "--max-memory 1B"))
    assert found.passed and found.memory.limit is not None
    assert found.warnings == (f"--max-memory 1B was not checked: {found.memory.limit.message}",)

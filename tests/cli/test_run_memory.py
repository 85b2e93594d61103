"""`etdeploy run` and memory, as a CI log holds it: the account per phase on the
console, `--max-memory` that fails a run over it (exit 1) and names the phase and
the part, a device's own limit from etdeploy.toml, `--shapes` across a dynamic
range, and bad input as one line and a hint (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.cli.conftest import assert_one_line_error, etdeploy
from tests.support.device_config import write_config

pytestmark = pytest.mark.slow

QUICK = ("-n", "3", "--warmup", "1")
DYNAMIC = f"{Path(__file__).resolve().parent.parent / 'data' / 'models' / 'two_io.py'}:dynamic_mlp"


def test_the_account_is_printed_per_phase_and_a_peak_over_the_limit_fails(tmp_path: Path) -> None:
    done = etdeploy("run", "digits", *QUICK, "--max-memory", "1MB", "--json", tmp_path / "r.json",
                    cwd=tmp_path)  # fmt: skip
    assert done.returncode == 1, done.stderr
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["status"] == "failed" and result["verdict"]["passed"]
    limit = result["memory"]["limit"]
    assert not limit["passed"] and limit["limit_bytes"] == 1_000_000
    lines = done.stdout.splitlines()
    # The account: a header of the phases, a line per part, the remainder, the peak.
    header = next(i for i, line in enumerate(lines) if line.split()[:1] == ["part"])
    assert lines[header].split()[1:] == ["load", "first", "execution", "steady", "state"]
    from etdeploy.units import format_bytes

    peak = next(line for line in lines[header:] if line.split()[:1] == ["peak"])
    assert (
        peak.split()[1:]
        == " ".join(format_bytes(p["peak_bytes"]) for p in result["memory"]["phases"]).split()
    )
    assert any(line.split()[:1] == ["unexplained"] for line in lines[header:])
    # The outputs passed; the run failed on memory, and the last word says which phase
    # and what was biggest in it.
    fail = done.stdout.rstrip().splitlines()[-1]
    assert (
        fail.startswith("FAIL peak memory ") and "exceeds the limit 1.00 MB (--max-memory)" in fail
    )
    phase = max(result["memory"]["phases"], key=lambda p: p["peak_bytes"])
    assert f"({phase['phase'].replace('_', ' ')})" in fail and "its largest part:" in fail


def test_a_devices_own_limit_applies_and_the_flag_overrides_it(tmp_path: Path) -> None:
    write_config(tmp_path / "etdeploy.toml", {"box": {"transport": "local", "max_memory": "2MB"}})
    over = etdeploy("run", "digits", "--device", "box", *QUICK, cwd=tmp_path)
    assert over.returncode == 1, over.stderr
    assert "(etdeploy.toml: devices.box.max_memory)" in over.stdout.splitlines()[-1]
    within = etdeploy("run", "digits", "--device", "box", *QUICK, "--max-memory", "2GB",
                      cwd=tmp_path)  # fmt: skip
    assert within.returncode == 0, within.stderr
    assert "memory limit: peak " in within.stdout and " is within 2.00 GB" in within.stdout


@pytest.mark.parametrize("value", ["lots", "0", "12 parsecs"])
def test_an_unreadable_max_memory_is_one_line_and_a_hint(tmp_path: Path, value: str) -> None:
    done = etdeploy("run", "digits", "--max-memory", value, cwd=tmp_path)
    assert_one_line_error(done, 2, "--max-memory")


@pytest.fixture(scope="module")
def batches(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three real-valued samples of batches 2, 3 and 5 for the dynamic model."""
    directory = tmp_path_factory.mktemp("batches")
    rng = np.random.default_rng(5)
    for batch in (2, 3, 5):
        np.save(directory / f"b{batch}.npy", rng.uniform(-2, 2, (batch, 5)).astype(np.float32))
    return directory


@pytest.mark.parametrize(
    ("points", "message"),
    [
        ("17", "x:0=17 is outside the exported range 1..16"),
        ("0", "x:0=0 is outside the exported range 1..16"),
        ("y:0=3", "y:0 is not a dynamic dim"),
        ("min,,max", "--shapes has an empty point"),
        ("smallest", "cannot read the point 'smallest'"),
    ],
)
def test_shapes_outside_the_dynamic_range_are_one_line_and_a_hint(
    tmp_path: Path, batches: Path, points: str, message: str
) -> None:
    done = etdeploy("run", DYNAMIC, "-i", batches, "--shapes", points, cwd=tmp_path)
    assert_one_line_error(done, 2, message)


def test_shapes_on_a_program_without_dynamic_dims_is_refused(tmp_path: Path) -> None:
    done = etdeploy("run", "digits", "--shapes", "min,max", cwd=tmp_path)
    assert_one_line_error(done, 2, "has no dynamic dims")


def test_three_points_of_the_range_each_report_parity_and_memory(
    tmp_path: Path, batches: Path
) -> None:
    done = etdeploy("run", DYNAMIC, "-i", batches, *QUICK, "--shapes", "min,mid,max",
                    "--json", tmp_path / "r.json", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads((tmp_path / "r.json").read_text())
    points = result["shapes"]
    assert [(p["point"], p["shapes"]) for p in points] == [
        ("min", [[1, 5]]), ("mid", [[8, 5]]), ("max", [[16, 5]])
    ]  # fmt: skip
    for point in points:
        # Every sample at the point, compared with eager at that shape.
        assert point["passed"] and point["samples"] == 3, point["reason"]
        assert point["worst_max_abs"] < 1e-4
        phases = point["memory"]["phases"]
        assert [p["phase"] for p in phases] == ["load", "first_execution", "steady_state"]
        assert all(sum(x["bytes"] for x in p["parts"]) == p["peak_bytes"] for p in phases)
        # ExecuTorch planned for the upper bound: the same buffers at every point.
        assert point["memory"]["planned_buffers"] == points[-1]["memory"]["planned_buffers"]
    lines = done.stdout.splitlines()
    table = lines[lines.index("shapes: 3 point(s) of the dynamic range") + 1 :][:4]
    assert [row.split()[:3] for row in table[1:]] == [
        ["min", "[1,", "5]"], ["mid", "[8,", "5]"], ["max", "[16,", "5]"]
    ]  # fmt: skip
    assert any("at min ([1, 5]) the peak is" in line and "plans memory for the upper bound" in line
               for line in lines)  # fmt: skip

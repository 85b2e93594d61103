"""etdeploy.farm.spec: a farm spec read into its matrix of jobs, and every bad key
or value named with exit 2 before anything runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from etdeploy.farm import load_farm_spec
from tests.support.farm_fixtures import MODELS, REPO, farm, write_spec


def test_the_matrix_expands_in_spec_order_with_stable_keys(tmp_path: Path) -> None:
    spec = load_farm_spec(write_spec(tmp_path / "n.toml", {
        "models": ["digits", f"{MODELS / 'two_io.py'}:build"],
        "backends": ["xnnpack", "portable"],
        "quantize": ["none", "int8"],
        "devices": ["local", "pixel8"],
        "iterations": 3,
    }))  # fmt: skip
    assert len(spec.jobs) == 2 * 2 * 2 * 2
    assert [j.key for j in spec.jobs[:4]] == [
        "digits|xnnpack|none|local", "digits|xnnpack|none|pixel8",
        "digits|xnnpack|int8|local", "digits|xnnpack|int8|pixel8",
    ]  # fmt: skip
    assert spec.devices == ["local", "pixel8"]
    job = spec.jobs[2].run_job()
    # [farm] over etdeploy run's defaults.
    assert job.quantize == "int8" and job.iterations == 3 and job.warmup == 3


def test_the_example_spec_parses() -> None:
    spec = load_farm_spec(REPO / "tests" / "data" / "farm" / "nightly.toml")
    # 2 models x 2 backends x 2 quantizations x 3 devices, less two_io's 6 int8 cells.
    assert len(spec.jobs) == 24 - 6
    pinned = next(j for j in spec.jobs if j.key == "digits|xnnpack|int8|pixel8")
    assert (
        pinned.run_job().iterations == 100 and pinned.job_timeout_s == 1800 and pinned.retries == 2
    )
    two_io = next(j for j in spec.jobs if j.model.endswith("two_io.py:build"))
    assert two_io.run_job().iterations == 20 and two_io.run_job().warmup == 3
    assert spec.backoff_s == 5 and spec.lock_timeout_s == 900 and spec.cooldown_s == 30
    assert spec.config.devices["mac"].transport == "ssh"


def test_explicit_jobs_override_their_cell_and_excludes_drop_cells(tmp_path: Path) -> None:
    path = write_spec(
        tmp_path / "n.toml",
        {"models": ["digits", {"model": "digits2.py:build", "inputs": ["samples/"]}],
         "backends": ["xnnpack", "coreml"], "devices": ["local", "pixel8"], "retries": 1,
         "exclude": [{"backend": "coreml", "device": ["pixel8", "local"], "model": "digits"}]},
        jobs=[{"model": "digits", "device": "pixel8", "iterations": 50, "job_timeout_s": 600, "retries": 0}],
        extra="[run]\nwarmup = 1\n",
    )  # fmt: skip
    (tmp_path / "digits2.py").write_text("def build(): ...\n")  # only its existence is checked here
    spec = load_farm_spec(path)
    keys = [j.key for j in spec.jobs]
    assert "digits|coreml|none|local" not in keys and "digits2.py:build|coreml|none|local" in keys
    pinned = next(j for j in spec.jobs if j.key == "digits|xnnpack|none|pixel8")
    assert pinned.run_job().iterations == 50 and pinned.job_timeout_s == 600 and pinned.retries == 0
    other = next(j for j in spec.jobs if j.key == "digits|xnnpack|none|local")
    assert other.retries == 1 and other.run_job().warmup == 1  # [run] of the spec applies
    samples = next(j for j in spec.jobs if j.model == "digits2.py:build").run_job()
    assert samples.inputs == ("samples/",)


@pytest.mark.parametrize(
    ("farm_table", "extra", "named"),
    [
        ({"models": ["digits"], "devices": ["local"], "iteratons": 3}, "", "farm.iteratons"),
        ({"models": ["digits"], "devices": ["local"], "retries": "2"}, "", "farm.retries"),
        ({"models": ["digits"], "devices": ["local"], "quantize": ["int4"]}, "", "farm.quantize[0]"),
        ({"models": ["digits"], "devices": ["local"], "backends": ["qnn"]}, "", "farm.backends[0]"),
        ({"models": ["missing.py:build"], "devices": ["local"]}, "", "farm.models[0]"),
        ({"models": ["digits"], "devices": ["local"], "iterations": 0}, "", "farm.iterations"),
        ({"models": [{"model": "digits", "warmup": -1}], "devices": ["local"]}, "", "farm.models[0].warmup"),
        ({"models": ["digits"], "devices": ["local"]}, "[nightly]\nx = 1\n", "[nightly]"),
        ({"models": ["digits"], "devices": ["local"], "job": [{"model": "digits", "device": "local", "warm": 1}]},
         "", "farm.job[0].warm"),
        ({"models": ["digits"]}, "", "farm.devices"),
        ({"models": ["digits"], "devices": ["p"]}, '[devices.p]\nserial = "x"\nadb_prot = 5\n', "devices.p.adb_prot"),
        ({"models": ["digits"], "devices": ["m"]}, '[devices.m]\ntransport = "ssh"\nhost = "m"\nport = "22"\n',
         "devices.m.port"),
    ],
)  # fmt: skip
def test_a_bad_spec_is_exit_2_and_names_the_key(
    tmp_path: Path, farm_table: dict[str, Any], extra: str, named: str
) -> None:
    path = write_spec(tmp_path / "bad.toml", farm_table, extra=extra)
    done = farm(path, "--out", tmp_path / "out")
    assert done.exit_code == 2, done.output
    assert named in done.output and "hint:" in done.output and "Traceback" not in done.output
    assert not (tmp_path / "out").exists()  # nothing ran

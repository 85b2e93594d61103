"""etdeploy.farm.spec: a farm spec read into its matrix of jobs, and every bad key
or value named with exit 2 before anything runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from etdeploy.errors import UsageError
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
    # Every cell but portable+int8 (2 models x 2 devices), which cannot build.
    assert len(spec.jobs) == 2 * 2 * 2 * 2 - 4
    assert [j.key for j in spec.jobs[:4]] == [
        "digits|xnnpack|none|local", "digits|xnnpack|none|pixel8",
        "digits|xnnpack|int8|local", "digits|xnnpack|int8|pixel8",
    ]  # fmt: skip
    assert spec.devices == ["local", "pixel8"]
    job = spec.jobs[2].run_job()
    # [farm] over etdeploy run's defaults.
    assert job.quantize == "int8" and job.iterations == 3 and job.warmup == 3
    assert [c.key for c in spec.skipped[:2]] == [
        "digits|portable|int8|local", "digits|portable|int8|pixel8",
    ]  # fmt: skip
    assert len(spec.skipped) == 4 and not {c.key for c in spec.skipped} & {j.key for j in spec.jobs}
    assert spec.skipped[0].reason == (
        "int8 uses the XNNPACK quantizer, which backend portable does not take"
    )


def test_the_example_spec_parses() -> None:
    spec = load_farm_spec(REPO / "tests" / "data" / "farm" / "nightly.toml")
    # 2 models x 2 backends x 2 quantizations x 3 devices, less two_io's 6 int8
    # cells (excluded) and digits' 3 portable+int8 cells (skipped: cannot run).
    assert len(spec.jobs) == 24 - 6 - 3
    assert [c.label for c in spec.skipped] == [
        f"digits[portable+int8] on {device}" for device in ("local", "pixel8", "mac")
    ]
    pinned = next(j for j in spec.jobs if j.key == "digits|xnnpack|int8|pixel8")
    assert (
        pinned.run_job().iterations == 100 and pinned.job_timeout_s == 1800 and pinned.retries == 2
    )
    two_io = next(j for j in spec.jobs if j.model.endswith("two_io.py:build"))
    assert two_io.run_job().iterations == 20 and two_io.run_job().warmup == 3
    # Its factory ships no samples: the spec gives real ones, beside it.
    assert two_io.run_job().inputs == ("samples/two_io/",)
    assert len(list((spec.path.parent / "samples" / "two_io").glob("*.npz"))) == 4
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


def test_a_cell_that_cannot_run_is_skipped_but_an_explicit_one_is_bad_input(
    tmp_path: Path,
) -> None:
    adb = '[devices.pixel8]\ntransport = "adb"\nserial = "X"\n'
    spec = load_farm_spec(write_spec(tmp_path / "n.toml", {
        "models": ["digits"], "backends": ["xnnpack", "coreml"], "devices": ["local", "pixel8"],
    }, extra=adb))  # fmt: skip
    # Core ML only on Apple OSes: not on an adb phone; "local" is left to its preflight.
    assert [c.key for c in spec.skipped] == ["digits|coreml|none|pixel8"]
    assert "Android" in spec.skipped[0].reason
    assert "digits|coreml|none|local" in {j.key for j in spec.jobs}

    asked = write_spec(tmp_path / "asked.toml", {"devices": ["local"]},
                       jobs=[{"model": "digits", "backend": "portable", "quantize": "int8"}])  # fmt: skip
    done = farm(asked, "--out", tmp_path / "out")
    assert done.exit_code == 2, done.output
    assert "farm.job[0]: cannot run on local: int8 uses the XNNPACK quantizer" in done.output
    assert "hint:" in done.output and not (tmp_path / "out").exists()

    nothing = write_spec(tmp_path / "none.toml", {"models": ["digits"], "backends": ["portable"],
                                                  "quantize": ["int8"], "devices": ["local"]})  # fmt: skip
    done = farm(nothing, "--out", tmp_path / "out")
    assert done.exit_code == 2 and "no cell of the matrix can run" in done.output


def test_the_skipped_cells_are_the_ones_the_builder_refuses() -> None:
    """The farm's rule for int8 (etdeploy.farm.checks.cannot_run) against the
    builder's own check, which raises before any work: the farm must skip
    exactly the combinations `etdeploy build` refuses."""
    from etdeploy.builder import BuildOptions, build
    from etdeploy.builder.backends import get_backend, names
    from etdeploy.builder.quantize import MODES
    from etdeploy.config import Config
    from etdeploy.errors import UsageError
    from etdeploy.farm.checks import cannot_run

    config = Config()
    for backend in names():
        try:
            get_backend(backend)
        except UsageError:
            continue  # not available here: the spec refuses it by name
        for quant in (None, *MODES):
            # A model file that does not exist: past the option checks, build fails on it.
            with pytest.raises(UsageError) as raised:
                build("no_such_model.py:build", BuildOptions(backend=backend, quantize=quant))
            refused = "quantizer" in raised.value.message
            assert refused == (cannot_run(backend, quant, "local", config) is not None), (
                backend, quant, raised.value.message,
            )  # fmt: skip


def test_memory_limits_come_from_the_job_then_its_device_then_run(tmp_path: Path) -> None:
    adb = ('[devices.pixel8]\ntransport = "adb"\nserial = "X"\nmax_memory = "300MB"\n'
           '[run]\nmax_memory = "1GB"\n')  # fmt: skip
    spec = load_farm_spec(write_spec(tmp_path / "n.toml", {
        "models": ["digits"], "devices": ["local", "pixel8"], "memory_growth": 0.25,
        "shapes": ["min,max"],
    }, jobs=[{"model": "digits", "device": "local", "backend": "portable", "max_memory": "64MiB"}],
        extra=adb))  # fmt: skip
    limits = {
        j.key: (j.run_job().max_memory_bytes, j.run_job().max_memory_source) for j in spec.jobs
    }
    assert limits == {
        "digits|xnnpack|none|local": (1_000_000_000, "n.toml: run.max_memory"),
        "digits|xnnpack|none|pixel8": (300_000_000, "n.toml: devices.pixel8.max_memory"),
        "digits|portable|none|local": (64 << 20, "n.toml: farm.job[0].max_memory"),
    }
    assert spec.memory_growth == 0.25
    assert spec.jobs[0].run_job().shapes == ("min,max",)


@pytest.mark.parametrize(
    ("farm_table", "extra", "named"),
    [
        ({"max_memory": "heaps"}, "", "farm.max_memory: cannot read 'heaps'"),
        ({}, '[devices.box]\ntransport = "local"\nmax_memory = "heaps"\n',
         "devices.box.max_memory: cannot read 'heaps'"),
        ({"memory_growth": -0.1}, "", "farm.memory_growth"),
        ({"shapes": ["tiny"]}, "", "cannot read the point 'tiny'"),
    ],
)  # fmt: skip
def test_a_bad_memory_setting_is_exit_2_and_names_the_key(
    tmp_path: Path, farm_table: dict[str, Any], extra: str, named: str
) -> None:
    table = {"models": ["digits"], "devices": ["box" if extra else "local"], **farm_table}
    path = write_spec(tmp_path / "bad.toml", table, extra=extra)
    done = farm(path, "--out", tmp_path / "out")
    assert done.exit_code == 2, done.output
    assert named in done.output and "hint:" in done.output and "Traceback" not in done.output


@pytest.mark.slow
def test_a_bundle_runs_as_one_job_per_device_with_its_own_build(
    digits_bundle: Path, tmp_path: Path
) -> None:
    """A models entry or [[farm.job]] names a bundle: its model names the job, the
    bundle's backend and quantization key it (not crossed with farm.backends), its
    settings are the bundle's under the spec's, and it is read, never built."""
    import shutil

    shutil.copytree(digits_bundle, tmp_path / "jobs" / "digits")
    spec = load_farm_spec(write_spec(tmp_path / "n.toml", {
        "models": [{"model": "digits", "bundle": "jobs/digits", "iterations": 3}],
        "backends": ["xnnpack", "portable"], "devices": ["local", "pixel8"], "inputs": ["x/"],
    }, jobs=[{"model": "nightly-digits", "bundle": "jobs/digits", "device": "local"}]))  # fmt: skip
    assert [j.key for j in spec.jobs] == [
        "digits|xnnpack|none|local", "digits|xnnpack|none|pixel8",
        "nightly-digits|xnnpack|none|local",
    ]  # fmt: skip
    job = spec.jobs[1].run_job()
    assert job.bundle == (tmp_path / "jobs" / "digits").resolve() and job.device == "pixel8"
    # The entry's iterations win; [farm]'s inputs were spent on other jobs' bundles.
    assert job.iterations == 3 and job.inputs == ()


@pytest.mark.slow
def test_a_bundle_entry_that_is_missing_or_contradicts_its_bundle_fails_the_spec(
    digits_bundle: Path, tmp_path: Path
) -> None:
    missing = write_spec(tmp_path / "m.toml", {"devices": ["local"]},
                         jobs=[{"model": "digits", "bundle": "nowhere"}])  # fmt: skip
    with pytest.raises(UsageError, match=r"m.toml: farm.job\[0\].bundle: no job bundle at"):
        load_farm_spec(missing)
    other = write_spec(tmp_path / "o.toml", {"devices": ["local"]},
                       jobs=[{"model": "digits", "bundle": str(digits_bundle), "backend": "portable"}])  # fmt: skip
    with pytest.raises(
        UsageError, match=r"farm.job\[0\].backend: the bundle was built with backend xnnpack"
    ):
        load_farm_spec(other)


def test_a_language_model_job_takes_8da4w_from_the_one_declaration(tmp_path: Path) -> None:
    # QUANTIZATIONS (etdeploy.build_options) names 8da4w once; the farm's axis reads it.
    spec = load_farm_spec(write_spec(tmp_path / "n.toml", {
        "models": ["digits"], "quantize": ["none", "8da4w"], "devices": ["local"],
    }))  # fmt: skip
    assert [j.key for j in spec.jobs] == ["digits|xnnpack|none|local", "digits|xnnpack|8da4w|local"]
    assert spec.jobs[1].run_job().quantize == "8da4w"

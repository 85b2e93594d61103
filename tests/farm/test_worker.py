"""etdeploy.farm.worker: the protocol between the farm and a worker process, run
the way the farm runs it (its command, its environment, in the spec's folder)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import etdeploy.farm.worker
from etdeploy.farm import RESULTS_NAME, FarmJob, load_farm_spec
from etdeploy.farm.worker import (
    read_result,
    worker_command,
    worker_env,
    write_request,
)
from etdeploy.pipeline import RunJob
from tests.support.farm_fixtures import QUICK, farm, lines_of, write_spec


def test_a_job_comes_through_the_request_file_unchanged(tmp_path: Path) -> None:
    settings = {"inputs": ("a/", "b/"), "runner": Path("/opt/runner"), "atol": 0.1, "warmup": 0}
    job = FarmJob("digits", "xnnpack", "int8", "local", settings).run_job()
    write_request(
        tmp_path, spec_path=tmp_path / "n.toml", device="local", job=job, job_id="j",
        lock_timeout_s=5.0,
    )  # fmt: skip
    request = json.loads((tmp_path / "request.json").read_text())
    assert RunJob.from_json(request["job"]) == job


def test_a_worker_imports_the_etdeploy_of_its_farm_wherever_it_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Without the farm's PYTHONPATH, a worker in the spec's folder would import
    # whichever etdeploy is installed (an editable install of another checkout).
    monkeypatch.delenv("PYTHONPATH", raising=False)
    done = subprocess.run(
        [sys.executable, "-c", "import etdeploy.farm.worker as w; print(w.__file__)"],
        cwd=tmp_path, env=worker_env(), capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert Path(done.stdout.strip()).resolve() == Path(etdeploy.farm.worker.__file__).resolve()


def test_a_worker_whose_job_cannot_start_writes_an_error_result_and_exits_0(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PYTHONPATH", raising=False)
    spec_path = write_spec(tmp_path / "n.toml", {"models": ["digits"], "devices": ["local"]})
    spec = load_farm_spec(spec_path)
    (job,) = spec.jobs
    folder = tmp_path / "out" / "work" / "job-1"
    write_request(
        folder, spec_path=spec.path, device=job.device, job=job.run_job(), job_id="job-1",
        lock_timeout_s=spec.lock_timeout_s,
    )  # fmt: skip
    spec_path.unlink()  # gone by the time the worker reads it
    done = subprocess.run(
        worker_command(folder), cwd=tmp_path, env=worker_env(), capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "error: farm spec not found" in done.stderr  # its log says why
    read = read_result(folder)
    result = read.to_json() if read is not None else None
    assert result is not None and result["status"] == "error"
    assert result["error"]["kind"] == "UsageError" and not result["error"]["infrastructure"]
    assert result["job"]["id"] == "job-1" and result["device"]["name"] == "local"
    assert not (folder / "request.json").exists() and not (folder / "result.json").exists()


@pytest.mark.slow
def test_a_farm_run_from_another_folder_with_a_relative_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Workers start in the spec's folder: the paths they are given must not be
    # relative to the farm's.
    (tmp_path / "specs").mkdir()
    write_spec(tmp_path / "specs" / "n.toml", {"models": ["digits"], "devices": ["local"], **QUICK})
    monkeypatch.chdir(tmp_path)
    done = farm("specs/n.toml", "--out", "out")
    assert done.exit_code == 0, done.output
    (result,) = lines_of(tmp_path / "out" / RESULTS_NAME)
    assert result["status"] == "passed"

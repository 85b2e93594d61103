"""One real localized and profiled run, shared by the explore tests: the pressure
chain on the portable backend, whose layer_norm departs from eager on this
machine's runner (tests/data/models/pressure_chain.py), run with --localize and
--profile. Its result names the ETDump; its build keeps the ETRecord."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

MODELS = Path(__file__).resolve().parent.parent / "data" / "models"
CHAIN = f"{MODELS}/pressure_chain.py:build"


@pytest.fixture(scope="session")
def localized_result(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from etdeploy.devices.local import LocalDevice
    from etdeploy.pipeline import RunJob, run_job

    out = tmp_path_factory.mktemp("explore")
    job = RunJob(
        model=CHAIN, backend="portable", localize=True, profile=True, iterations=3, warmup=1
    )
    result = run_job(job, LocalDevice(workdir=out / "device")).to_json()
    assert result["localization"]["status"] == "localized", result["localization"]
    path = out / "result.json"
    path.write_text(json.dumps(result))
    return path

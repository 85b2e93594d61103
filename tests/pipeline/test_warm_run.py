"""A warm `etdeploy run` (every cache filled) imports only what it uses: no torch, no
executorch, no matplotlib, none of the report writers; whether the program was built
here, with its weights outside (--external-weights), or given as a pair (--pte/--data).
Measured as a user runs it: `python -X importtime -m etdeploy run ...` in a fresh process.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.device_config import write_config

pytestmark = pytest.mark.slow

# Never on a warm run: the model stack (seconds to import), the plots, the report writers.
NOT_ON_A_WARM_RUN = (
    "torch",
    "executorch",
    "matplotlib",
    "sklearn",
    "etdeploy.report.html",
    "etdeploy.report.junit",
    "etdeploy.results.schema",
    "etdeploy.results.baseline",
    "etdeploy.model.examples.digits",
)


def imported_by(*args: str | Path, cwd: Path) -> set[str]:
    """The modules `etdeploy ARGS` imports, from -X importtime's lines."""
    env = dict(os.environ)
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "etdeploy", *map(str, args)],
        capture_output=True, text=True, cwd=cwd, env=env, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return {
        line.rsplit("|", 1)[1].strip()
        for line in done.stderr.splitlines()
        if line.startswith("import time:") and "self [us]" not in line
    }


@pytest.mark.parametrize("flags", [(), ("--external-weights",)], ids=["inside", "external"])
def test_a_warm_run_imports_only_what_it_uses(tmp_path: Path, flags: tuple[str, ...]) -> None:
    config = write_config(
        tmp_path / "etdeploy.toml", {"here": {"transport": "local", "workdir": str(tmp_path / "w")}}
    )
    command = ("run", "digits", *flags, "--device", "here", "--config", config, "-n", "1")
    cold = imported_by(*command, cwd=tmp_path)  # builds or reads the build, the reference
    warm = imported_by(*command, cwd=tmp_path)

    assert "torch" in cold or "etdeploy.pipeline" in cold  # the probe sees imports at all
    heavy = sorted(
        m for m in warm if m.split(".")[0] in NOT_ON_A_WARM_RUN or m in NOT_ON_A_WARM_RUN
    )
    assert heavy == []
    # (etdeploy.pipeline.run is reached through the package's lazy names, which
    # -X importtime does not list; its stages are.)
    assert {"etdeploy.pipeline.execute", "numpy"} <= warm
    # The program's signatures, what it calls and its size verdict are read back by its
    # sha256: neither the .pte reader nor sizecheck is imported again.
    assert sorted(m for m in warm if m.startswith(("etdeploy.pte", "etdeploy.sizecheck"))) == []


def test_a_pair_built_elsewhere_runs_warm_without_torch(tmp_path: Path) -> None:
    config = write_config(
        tmp_path / "etdeploy.toml", {"here": {"transport": "local", "workdir": str(tmp_path / "w")}}
    )
    built = subprocess.run(
        [sys.executable, "-m", "etdeploy", "build", "digits", "--external-weights",
         "-o", str(tmp_path / "pair" / "m.pte")],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    (tmp_path / "pair" / "m.pte.json").unlink()  # as if built elsewhere: the pair alone
    command = ("run", "digits", "--pte", tmp_path / "pair" / "m.pte",
               "--data", tmp_path / "pair" / "m.ptd", "--device", "here", "--config", config)  # fmt: skip
    imported_by(*command, cwd=tmp_path)
    warm = imported_by(*command, cwd=tmp_path)
    assert not {"torch", "executorch"} & {m.split(".")[0] for m in warm}

"""One digits job bundle per session, made by the real build (the session's etdeploy
cache builds digits and the host runner once), for every test of bundles."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from etdeploy.bundle.job_bundle import BUNDLE_FILE


@pytest.fixture(scope="session")
def digits_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from etdeploy.pipeline.job import RunJob
    from etdeploy.pipeline.make_bundle import make_bundle

    out = tmp_path_factory.mktemp("bundles") / "digits-job"
    return make_bundle(RunJob(model="digits"), out).path


def copy_bundle(bundle: Path, to: Path) -> Path:
    """A copy a test may damage; the session's bundle stays whole."""
    shutil.copytree(bundle, to, symlinks=True)
    return to


def rewrite_table(bundle: Path, relative: str, change: Any) -> None:
    """Replace an .npz table of the bundle by `change(arrays)` and list its new digest,
    as a bundle made from other data would: only the verdict can tell."""
    from etdeploy.digests import sha256_file

    path = bundle / relative
    with np.load(path) as archive:
        arrays = {name: archive[name].copy() for name in archive.files}
    change(arrays)
    with open(path, "wb") as handle:
        np.savez(handle, **arrays)
    manifest = json.loads((bundle / BUNDLE_FILE).read_text())
    manifest["files"][relative] = {"size": path.stat().st_size, "sha256": sha256_file(path)}
    (bundle / BUNDLE_FILE).write_text(json.dumps(manifest))

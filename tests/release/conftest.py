"""One build of the example release per session: every slow release test reads it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from etdeploy.release.package import Release

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "release" / "release.toml"


@dataclass(frozen=True)
class BuiltRelease:
    release: Release
    out: Path


@pytest.fixture(scope="session")
def built_release(tmp_path_factory: pytest.TempPathFactory) -> BuiltRelease:
    """examples/release/release.toml built into a folder (digits, fp32 and int8)."""
    from etdeploy.release import load_spec
    from etdeploy.release.package import build_release

    out = tmp_path_factory.mktemp("release") / "digits-release"
    return BuiltRelease(build_release(load_spec(EXAMPLE), out), out)

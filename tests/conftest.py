"""Every test run gets its own etdeploy cache, shared across the session so the
digits example trains once and the runner builds once."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

# Real .pte programs built once per session, for the .pte reader and the size checks;
# the base install (no torch) in a venv, and a digits job bundle, for what must run
# without it. A tiny Llama trained on license texts, as a Hugging Face folder, and its
# programs for the runner's generation.
pytest_plugins = [
    "tests.support.programs",
    "tests.support.base_install",
    "tests.support.bundles",
    "tests.support.tiny_lm",
    "tests.support.lm_programs",
]


def pytest_configure(config: pytest.Config) -> None:
    # Never the user's own cache: tests must see what a new user sees.
    root = Path(config.rootpath) / ".pytest_cache" / "etdeploy-cache"
    root.mkdir(parents=True, exist_ok=True)
    os.environ["ETDEPLOY_CACHE_DIR"] = str(root)


@pytest.fixture
def fresh_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty cache for tests that must see a cold build."""
    root = tmp_path / "cache"
    monkeypatch.setenv("ETDEPLOY_CACHE_DIR", str(root))
    return root

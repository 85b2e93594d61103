"""Where etdeploy keeps its caches. ETDEPLOY_CACHE_DIR overrides the XDG default
(tests point it at a temporary directory)."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs


def cache_root() -> Path:
    override = os.environ.get("ETDEPLOY_CACHE_DIR")
    root = Path(override) if override else Path(platformdirs.user_cache_dir("etdeploy"))
    root.mkdir(parents=True, exist_ok=True)
    return root


def cache_dir(kind: str) -> Path:
    """A named cache below the root: builds, runners, references, locks, models."""
    path = cache_root() / kind
    path.mkdir(parents=True, exist_ok=True)
    return path

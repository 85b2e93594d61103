"""Where etdeploy keeps its caches. ETDEPLOY_CACHE_DIR overrides the XDG default
(tests point it at a temporary directory)."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def cache_root() -> Path:
    override = os.environ.get("ETDEPLOY_CACHE_DIR")
    root = Path(override) if override else _user_cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    return root


def _user_cache_dir() -> Path:
    if sys.platform.startswith("linux"):
        # What platformdirs answers on Linux (platformdirs 4, unix.py user_cache_dir,
        # read 2026-12-04: $XDG_CACHE_HOME if set and not blank, else ~/.cache), without
        # importing it: every command asks for this, and the import is ~5 ms of a warm run.
        xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
        return Path(xdg or os.path.expanduser("~/.cache")) / "etdeploy"
    import platformdirs

    return Path(platformdirs.user_cache_dir("etdeploy"))


def cache_dir(kind: str) -> Path:
    """A named cache below the root: builds, runners, references, locks, models."""
    path = cache_root() / kind
    path.mkdir(parents=True, exist_ok=True)
    return path

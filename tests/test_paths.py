"""Where the caches live: ETDEPLOY_CACHE_DIR, else the platform's user cache dir."""

from __future__ import annotations

from pathlib import Path

import platformdirs
import pytest

from etdeploy import paths


@pytest.mark.parametrize("xdg", [None, "/srv/cache", "  "])
def test_the_default_cache_is_where_platformdirs_puts_it(
    xdg: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ETDEPLOY_CACHE_DIR", raising=False)
    if xdg is None:
        monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    else:
        monkeypatch.setenv("XDG_CACHE_HOME", xdg)
    assert paths._user_cache_dir() == Path(platformdirs.user_cache_dir("etdeploy"))


def test_etdeploy_cache_dir_wins_and_is_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ETDEPLOY_CACHE_DIR", str(tmp_path / "c"))
    assert paths.cache_dir("builds") == tmp_path / "c" / "builds"
    assert (tmp_path / "c" / "builds").is_dir()

"""The cache is verified, never trusted (etdeploy/quarantine.py).

A cached build, reference table, staged input or runner bundle whose bytes are
not the ones recorded for it, or that is a link where a file should be, is moved
to the quarantine and made again, and the run says so in a warning; the run then
passes as it would have. A warm run verifies by the digests' stat records and
reads no cached file.

Each test works on a copy of the session's warm cache (the digits build, its
references and staged inputs, the host runner), so the damage stays its own.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from etdeploy import digests
from etdeploy.cli import app
from etdeploy.digests import RACY_MARGIN_NS

pytestmark = pytest.mark.slow

# What a digits run on this machine reads from the cache; the rest is not copied.
_KINDS = ("builds", "models", "references", "staged-inputs", "runners", "runner-describe")


def cli(*args: str | Path) -> Any:
    return CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture(scope="module")
def session_cache() -> Path:
    """The session's cache, warm for `run digits` on this machine."""
    done = cli("run", "digits", "-n", "1", "-q")
    assert done.exit_code == 0, done.output
    return Path(os.environ["ETDEPLOY_CACHE_DIR"])


@pytest.fixture
def cache(session_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    root = tmp_path / "cache"
    for kind in _KINDS:
        if (session_cache / kind).is_dir():
            shutil.copytree(
                session_cache / kind, root / kind, ignore=shutil.ignore_patterns("*.lock")
            )
    monkeypatch.setenv("ETDEPLOY_CACHE_DIR", str(root))
    yield root


def digits_entry(cache: Path) -> Path:
    """The cache entry of the float xnnpack digits build."""
    for manifest in cache.glob("builds/*/digits.pte.json"):
        doc = json.loads(manifest.read_text())
        if doc["backend"] == "xnnpack" and not doc.get("quantization") and not doc.get("data"):
            return manifest.parent
    raise AssertionError("no digits build in the cache")


def flip(path: Path, count: int = 64) -> None:
    """Flip `count` bytes in the middle of the file, in place (same size)."""
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    for i in range(middle, min(middle + count, len(data))):
        data[i] ^= 0xFF
    with open(path, "r+b") as fh:
        fh.write(data)


def quarantined(cache: Path) -> list[str]:
    folder = cache / "quarantine"
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def warnings_of(done: Any) -> list[str]:
    return [line for line in done.output.splitlines() if line.startswith("warning:")]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("damage", ["flipped bytes", "a link to another file"])
def test_a_damaged_cached_program_is_quarantined_and_rebuilt_and_the_run_passes(
    cache: Path, damage: str
) -> None:
    entry = digits_entry(cache)
    pte = entry / "digits.pte"
    if damage == "flipped bytes":
        flip(pte)  # before: a false numeric failure (exit 1) on every run
    else:
        pte.unlink()
        pte.symlink_to(Path(__file__))  # before: exit 2 on every run
    done = cli("run", "digits", "-n", "1")
    assert done.exit_code == 0, done.output
    assert "PASS" in done.output
    (warning,) = [w for w in warnings_of(done) if "cached build of digits" in w]
    assert "failed its check" in warning and "made again" in warning
    manifest = json.loads((entry / "digits.pte.json").read_text())
    assert not pte.is_symlink() and sha256(pte) == manifest["sha256"]
    assert len(quarantined(cache)) == 1
    again = cli("run", "digits", "-n", "1")
    assert again.exit_code == 0 and not warnings_of(again), again.output


def test_a_damaged_reference_table_is_computed_again(cache: Path) -> None:
    shutil.rmtree(cache / "references")  # the tables this run uses, each with its record
    assert cli("run", "digits", "-n", "1").exit_code == 0
    tables = sorted(cache.glob("references/float-*.npz"))
    assert tables and all(t.with_suffix(".sha256").is_file() for t in tables)
    for table in tables:
        flip(table, count=16)
    done = cli("run", "digits", "-n", "1")
    assert done.exit_code == 0, done.output
    assert any("cached reference outputs" in w for w in warnings_of(done)), done.output
    for table in tables:
        assert sha256(table) == Path(table.with_suffix(".sha256")).read_text().strip()


def test_a_damaged_staged_input_is_written_again_before_it_is_pushed(cache: Path) -> None:
    shutil.rmtree(cache / "staged-inputs")  # only what this run stages
    assert cli("run", "digits", "-n", "1").exit_code == 0
    # Our runner takes every sample's inputs packed into one file (pipeline/deploy.py).
    staged = sorted(cache.glob("staged-inputs/*.bin"))
    assert len(staged) == 1
    for path in staged:
        flip(path, count=8)  # before: pushed as is, a false numeric failure
    done = cli("run", "digits", "-n", "1")
    assert done.exit_code == 0, done.output
    assert any("cached staged input" in w for w in warnings_of(done)), done.output
    for path in staged:
        assert sha256(path)[:32] == path.stem


def test_a_damaged_runner_bundle_is_quarantined_and_a_sound_one_is_recorded_once(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from etdeploy.quarantine import noticed_damage
    from etdeploy.runner_build import cached_runner

    bundle = cached_runner("host")
    assert bundle is not None and isinstance(bundle.info.get("sha256"), dict)
    # A bundle from before digests were recorded gets them, from its files as they are.
    manifest_path = bundle.directory / "bundle.json"
    manifest = json.loads(manifest_path.read_text())
    manifest_path.write_text(json.dumps({k: v for k, v in manifest.items() if k != "sha256"}))
    assert cached_runner("host") is not None
    assert json.loads(manifest_path.read_text())["sha256"] == manifest["sha256"]
    # A sound bundle is checked by its files' stat records: no byte of it is read
    # (once its files are older than a timestamp tick: the copy just made them).
    time.sleep(RACY_MARGIN_NS / 1e9 + 0.1)
    reads: list[str] = []
    real = digests._hash
    monkeypatch.setattr(digests, "_hash", lambda p: reads.append(str(p)) or real(p))
    digests_now = {p.name: digests.file_sha256(p) for p in bundle.files}  # records, once
    reads.clear()
    assert digests_now == manifest["sha256"]
    assert cached_runner("host") is not None and reads == []
    # A library with other bytes: the bundle is moved aside, and nothing is served.
    library = next(p for p in bundle.files if p.name != bundle.executable)
    flip(library, count=4)
    with noticed_damage() as damage:
        assert cached_runner("host") is None
    assert not bundle.directory.exists() and len(quarantined(cache)) == 1
    (warning,) = damage
    assert library.name in warning and "runner bundle" in warning


def test_a_warm_build_is_checked_without_reading_the_program(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from etdeploy.builder import BuildOptions, build

    time.sleep(RACY_MARGIN_NS / 1e9 + 0.1)  # the copy's files, older than a tick
    first = build("digits", BuildOptions())
    assert first.cached and not first.warnings
    reads: list[str] = []
    real = digests._hash
    monkeypatch.setattr(digests, "_hash", lambda p: reads.append(str(p)) or real(p))
    second = build("digits", BuildOptions())
    assert second.cached and reads == []


def test_only_regular_files_inside_the_cache_with_their_bytes_pass(
    cache: Path, tmp_path: Path
) -> None:
    from etdeploy.quarantine import file_damage

    good = cache / "builds" / "x.bin"
    good.write_bytes(b"payload")
    digest = sha256(good)
    assert file_damage(good, digest) is None
    assert "does not hold the bytes" in (file_damage(good, "0" * 64) or "")
    outside = tmp_path / "elsewhere.bin"
    outside.write_bytes(b"payload")
    link = cache / "builds" / "link.bin"
    link.symlink_to(outside)
    assert "symbolic link" in (file_damage(link, digest) or "")
    # A folder on the way that is a link puts the file outside the cache.
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "x.bin").write_bytes(b"payload")
    (cache / "builds" / "linked-entry").symlink_to(tmp_path / "real")
    assert "outside the cache" in (
        file_damage(cache / "builds" / "linked-entry" / "x.bin", digest) or ""
    )
    assert "missing" in (file_damage(cache / "builds" / "gone.bin", digest) or "")

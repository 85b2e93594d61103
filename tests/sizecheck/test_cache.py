"""The measurement cache: a program measured once is never deflated again (its sha256 given,
or its unchanged stat recognised); a changed file is measured again; a damaged entry is
ignored and measured again; levels and settings are part of the key.

Deflating is counted by wrapping compress._deflate_size (every exact and sampled byte goes
through it) with a counter that calls the real function; hashing likewise via digests._hash.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from etdeploy import digests as file_digests
from etdeploy.config import Config
from etdeploy.digests import RACY_MARGIN_NS, file_sha256, known_sha256
from etdeploy.paths import cache_dir
from etdeploy.pte.reader import read_pte
from etdeploy.sizecheck import compress
from etdeploy.sizecheck.cache import measure_file
from etdeploy.sizecheck.check import check_size
from etdeploy.sizecheck.summary import summary_for_result
from tests.support.programs import BuiltPrograms


@dataclass
class Counters:
    deflate_levels: list[int] = field(default_factory=list)  # one entry per deflate call
    hashes: int = 0

    @property
    def deflates(self) -> int:
        return len(self.deflate_levels)

    def reset(self) -> None:
        self.deflate_levels.clear()
        self.hashes = 0


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch, fresh_cache: Path) -> Counters:
    """An empty etdeploy cache, and counts of the deflate and hash calls made."""
    counters = Counters()
    real_deflate: Callable[..., int] = compress._deflate_size
    real_hash: Callable[[Path], str] = file_digests._hash

    def deflate(prefix: bytes, data: Any, level: int, mem_level: int = 8) -> int:
        counters.deflate_levels.append(level)
        return real_deflate(prefix, data, level, mem_level)

    def hash_file(path: Path) -> str:
        counters.hashes += 1
        return real_hash(path)

    monkeypatch.setattr(compress, "_deflate_size", deflate)
    monkeypatch.setattr(file_digests, "_hash", hash_file)
    return counters


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _figures(summary: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in summary.items() if k != "cached"}


def _entries() -> list[Path]:
    return sorted((cache_dir("sizecheck") / "measurements").glob("*.json"))


def _wait_out_the_racy_margin(path: Path) -> None:
    # A record is trusted only for a file last changed more than a timestamp tick before it
    # was hashed (cache.py); a file written this instant must age past that first.
    st = os.stat(path)
    wait = (max(st.st_mtime_ns, st.st_ctime_ns) + RACY_MARGIN_NS - time.time_ns()) / 1e9
    time.sleep(max(0.0, wait) + 0.05)


def test_a_warm_summary_with_the_known_sha256_neither_deflates_nor_hashes(
    programs: BuiltPrograms, counted: Counters, tmp_path: Path
) -> None:
    pte = tmp_path / "model.pte"
    shutil.copyfile(programs.xnnpack, pte)
    digest = _sha256(pte)
    cold = summary_for_result(pte, Config(), sha256=digest)
    assert counted.deflates > 0 and counted.hashes == 0 and cold["cached"] is False
    counted.reset()
    warm = summary_for_result(pte, Config(), sha256=digest)
    assert counted.deflates == 0 and counted.hashes == 0
    assert warm["cached"] is True and _figures(warm) == _figures(cold)
    assert warm["method"] == "exact" and warm["estimate"].startswith("exact: gzip level 6")


def test_an_unchanged_file_is_known_by_its_stat_and_a_rewrite_is_not(
    programs: BuiltPrograms, counted: Counters, tmp_path: Path
) -> None:
    pte = tmp_path / "model.pte"
    shutil.copyfile(programs.portable, pte)
    _wait_out_the_racy_margin(pte)
    cold = summary_for_result(pte, Config())
    assert counted.hashes == 1 and counted.deflates > 0
    counted.reset()
    warm = summary_for_result(pte, Config())
    assert counted.hashes == 0 and counted.deflates == 0 and warm["cached"] is True
    assert _figures(warm) == _figures(cold)

    # Rewritten in place, same size, its mtime set back as `cp --preserve` would: the ctime
    # still moved, so it is hashed again, and its new content measured.
    st = os.stat(pte)
    layout = read_pte(pte)
    segment = layout.segments[layout.constant_segment_index or 0]
    with pte.open("r+b") as fh:
        fh.seek(segment.offset)
        fh.write(bytes(segment.size))  # the weights zeroed
    os.utime(pte, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(pte).st_mtime_ns == st.st_mtime_ns and os.stat(pte).st_size == st.st_size
    counted.reset()
    changed = summary_for_result(pte, Config())
    assert counted.hashes == 1 and counted.deflates > 0 and changed["cached"] is False
    assert changed["download_bytes"] < cold["download_bytes"] / 10  # zeros deflate to nothing


def test_a_file_hashed_in_the_tick_it_was_written_is_hashed_again(
    tmp_path: Path, counted: Counters
) -> None:
    path = tmp_path / "fresh.bin"
    path.write_bytes(b"weights" * 1000)
    digest = file_sha256(path)
    assert digest == _sha256(path) and counted.hashes == 1
    # Written a moment ago: a rewrite within the same timestamp tick would keep this stat.
    assert known_sha256(path) is None
    assert file_sha256(path) == digest and counted.hashes == 2


def test_a_changed_file_is_measured_again(
    programs: BuiltPrograms, counted: Counters, tmp_path: Path
) -> None:
    pte = tmp_path / "model.pte"
    shutil.copyfile(programs.xnnpack, pte)
    first = summary_for_result(pte, Config(), sha256=_sha256(pte))
    shutil.copyfile(programs.portable, pte)  # another program at the same path
    counted.reset()
    second = summary_for_result(pte, Config(), sha256=_sha256(pte))
    assert counted.deflates > 0 and second["cached"] is False
    assert second["raw_bytes"] == programs.portable.stat().st_size != first["raw_bytes"]
    # And without the sha256: the stat differs, so it is hashed and measured.
    shutil.copyfile(programs.xnnpack, pte)
    counted.reset()
    third = summary_for_result(pte, Config())
    assert counted.hashes == 1 and third["download_bytes"] == first["download_bytes"]


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda text: text[: len(text) // 2], id="cut-short"),
        pytest.param(lambda text: "", id="empty"),
        pytest.param(lambda text: "[1, 2, 3]", id="not-an-object"),
        pytest.param(
            lambda text: text.replace('"part_deflate_bytes": [', '"part_deflate_bytes": [-5, '),
            id="wrong-part-count",
        ),
        pytest.param(
            lambda text: json.dumps({**json.loads(text), "raw_bytes": 7}), id="another-size"
        ),
        pytest.param(
            lambda text: json.dumps({**json.loads(text), "error_bound": "small"}),
            id="bad-bound",
        ),
    ],
)
def test_a_damaged_entry_is_ignored_and_measured_again(
    programs: BuiltPrograms, counted: Counters, tmp_path: Path, damage: Callable[[str], str]
) -> None:
    pte = tmp_path / "model.pte"
    shutil.copyfile(programs.xnnpack, pte)
    digest = _sha256(pte)
    good = summary_for_result(pte, Config(), sha256=digest)
    (entry,) = _entries()
    sound = entry.read_text()
    entry.write_text(damage(sound))
    counted.reset()
    again = summary_for_result(pte, Config(), sha256=digest)
    assert counted.deflates > 0 and again["cached"] is False
    assert _figures(again) == _figures(good)
    assert entry.read_text() == sound  # rewritten whole


def test_a_damaged_stat_record_means_hashing_again(
    programs: BuiltPrograms, counted: Counters, tmp_path: Path
) -> None:
    pte = tmp_path / "model.pte"
    shutil.copyfile(programs.xnnpack, pte)
    _wait_out_the_racy_margin(pte)
    file_sha256(pte)
    (record,) = cache_dir("file-digests").glob("*.json")
    record.write_text('{"format": 1, "sha256": "00", "identity": [')
    counted.reset()
    assert file_sha256(pte) == _sha256(pte) and counted.hashes == 1
    assert known_sha256(pte) == _sha256(pte)  # and the record is whole again


def test_each_level_is_cached_on_its_own(
    programs: BuiltPrograms, counted: Counters, tmp_path: Path
) -> None:
    digests = {programs.portable: _sha256(programs.portable)}
    level6 = check_size([programs.portable], levels=(6,), digests=digests)
    counted.reset()
    both = check_size([programs.portable], levels=(6, 9), digests=digests)
    assert counted.deflates > 0 and set(counted.deflate_levels) == {9}  # only the new level
    assert both.files[0].download_bytes == level6.files[0].download_bytes
    counted.reset()
    again = check_size([programs.portable], levels=(6, 9), digests=digests)
    assert counted.deflates == 0 and again.files[0].cached
    assert again.files[0].level9_bytes == both.files[0].level9_bytes


def test_the_settings_that_change_a_figure_are_in_the_key(
    programs: BuiltPrograms, counted: Counters
) -> None:
    digest = _sha256(programs.weights)
    measure_file(programs.weights, sha256=digest)
    for other in ({"mem_level": 9}, {"chunk_bytes": 64 * 1024}):
        counted.reset()
        m = measure_file(programs.weights, sha256=digest, **other)  # type: ignore[arg-type]
        assert counted.deflates > 0 and not m.cached, other
    counted.reset()
    assert measure_file(programs.weights, sha256=digest).cached and counted.deflates == 0


def test_an_exact_entry_answers_a_sample_but_a_sample_never_answers_exact(
    programs: BuiltPrograms, counted: Counters
) -> None:
    from etdeploy.sizecheck.sample import SamplePlan

    plan = SamplePlan(chunk_bytes=16 * 1024, fraction=1 / 16, min_samples=8)
    path = programs.weights  # a few MB of weights: sampled with this small plan
    digest = _sha256(path)
    sampled = measure_file(path, estimate="sample", sha256=digest, plan=plan)
    assert sampled.estimate == "sampled" and not sampled.cached
    counted.reset()
    exact = measure_file(path, sha256=digest)
    assert counted.deflates > 0 and exact.estimate == "exact"  # measured, not the sample
    counted.reset()
    answered = measure_file(path, estimate="sample", sha256=digest, plan=plan)
    assert counted.deflates == 0 and answered.cached and answered.estimate == "exact"
    assert answered.gzip_bytes() == exact.gzip_bytes()


def test_without_the_cache_it_measures_and_keeps_nothing(
    programs: BuiltPrograms, counted: Counters
) -> None:
    for _ in range(2):
        counted.reset()
        report = check_size([programs.xnnpack], levels=(6,), use_cache=False)
        assert counted.deflates > 0 and counted.hashes == 0 and not report.files[0].cached
    assert not (cache_dir("sizecheck") / "measurements").exists() or not _entries()

"""Measure a file once: deflated sizes cached by content, and contents recognised by stat.

A warm `etdeploy run` of a multi-GB program used to deflate the whole file again for its
size verdict (about 19 s per GB here). Now a measurement is stored per level under
cache_dir("sizecheck")/measurements, keyed by what decides its figures: the file's sha256,
the deflate level, zlib's memLevel, the chunk size, the part boundaries, the estimate (exact,
or sampled with its plan), the zlib library and this file's format. A later request with the
same key reads it back; a damaged or mismatched entry is ignored and measured again.

The caller that knows the sha256 (the pipeline has it from the build) passes it, and nothing
reads the file. Otherwise an unchanged local file is recognised without reading it, by the
stat record etdeploy.digests keeps for every local file it hashes (shared with the devices).

Entries are written with etdeploy.atomic (temporary name, fsync, rename), so a killed run
leaves an old entry or a whole new one, never half of one.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import zlib
from collections.abc import Sequence
from pathlib import Path

from etdeploy.atomic import keep_json, read_json_object
from etdeploy.digests import RACY_MARGIN_NS, file_sha256, known_sha256, stat_identity
from etdeploy.errors import UsageError
from etdeploy.files import check_readable_file
from etdeploy.jsonvalue import JsonObject
from etdeploy.paths import cache_dir
from etdeploy.sizecheck import compress
from etdeploy.sizecheck.compress import (
    BUNDLETOOL_MEM_LEVEL,
    DEFAULT_CHUNK_BYTES,
    EXACT,
    PLAY_LEVEL,
    SAMPLED,
    Measurement,
    check_levels,
)
from etdeploy.sizecheck.sample import DEFAULT_PLAN, SamplePlan, sample_measure

CACHE_KIND = "sizecheck"
# Bump when an entry's meaning or layout changes: old entries are then never read.
FORMAT = 1

ESTIMATES = ("exact", "sample")  # what a user asks for: --estimate, [sizecheck] estimate

__all__ = ["ESTIMATES", "RACY_MARGIN_NS", "known_sha256", "measure_file"]


# --- measurements by content ------------------------------------------------------------


def _key(
    sha256: str,
    level: int,
    *,
    estimate: str,
    bounds: Sequence[tuple[int, int]],
    chunk_bytes: int,
    mem_level: int,
    plan: SamplePlan | None,
) -> JsonObject:
    cuts = hashlib.sha256(json.dumps([list(b) for b in bounds]).encode()).hexdigest()
    return {
        "format": FORMAT,
        "sha256": sha256,
        "level": level,
        "estimate": estimate,
        "mem_level": mem_level,
        # Chunks and parts move a figure by a few bytes; the same file cut the same way
        # measures the same. A sample's chunks are its plan's.
        "chunk_bytes": chunk_bytes if estimate == EXACT else None,
        "plan": plan.as_key() if estimate == SAMPLED and plan is not None else None,
        "bounds": cuts,
        "zlib": zlib.ZLIB_RUNTIME_VERSION,
    }


def _entry_path(key: JsonObject) -> Path:
    name = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:40]
    return cache_dir(CACHE_KIND) / "measurements" / f"{str(key['sha256'])[:16]}-{name}.json"


def _load_entry(key: JsonObject, raw_bytes: int, parts: int) -> tuple[list[int], float, int] | None:
    """(deflated bytes per part, error bound, bytes deflated) of a sound entry, else None."""
    doc = read_json_object(_entry_path(key))
    if doc is None or doc.get("key") != key or doc.get("raw_bytes") != raw_bytes:
        return None
    sizes, bound, deflated = (
        doc.get("part_deflate_bytes"),
        doc.get("error_bound"),
        doc.get("deflated_bytes"),
    )
    if not isinstance(sizes, list) or len(sizes) != parts:
        return None
    if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in sizes):
        return None
    if not isinstance(bound, int | float) or isinstance(bound, bool) or not 0 <= bound < 1:
        return None
    if not isinstance(deflated, int) or not 0 <= deflated <= raw_bytes:
        return None
    return [int(n) for n in sizes], float(bound), deflated


def _bounds(size: int, boundaries: Sequence[int]) -> tuple[tuple[int, int], ...]:
    """The parts compress.measure cuts a file of `size` into at `boundaries`."""
    cuts = sorted({b for b in boundaries if 0 < b < size} | {0, size})
    return tuple(itertools.pairwise(cuts)) if size else ((0, 0),)


def measure_file(
    path: str | os.PathLike[str],
    *,
    parts: Sequence[tuple[int, int, str]] = (),
    levels: Sequence[int] = (PLAY_LEVEL,),
    estimate: str = "exact",
    sha256: str | None = None,
    use_cache: bool = True,
    plan: SamplePlan = DEFAULT_PLAN,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    mem_level: int = BUNDLETOOL_MEM_LEVEL,
    workers: int | None = None,
) -> Measurement:
    """Deflated sizes of `path` per level, from the cache when its content was measured
    before, else measured (exactly, or from a sample with `estimate="sample"`) and stored.

    `parts` are (offset, size, kind) spans that tile the file (breakdown.layout_parts of a
    .pte); none for a file measured whole. `sha256` is the file's digest when the caller has
    it: trusted, so the file is not read at all on a hit. Without it, an exact measurement
    hashes the file (or recognises it unchanged by its stat); a sampled one looks the cache
    up only by stat, since hashing a file costs more than sampling it. An exact entry also
    answers a request for a sample: it is the better figure.
    """
    if estimate not in ESTIMATES:
        raise UsageError(f"estimate {estimate!r}", "use exact (the default) or sample")
    p = Path(path)
    before = check_readable_file(p)
    size = before.st_size
    lv = check_levels(levels)
    span_list = sorted((off, n, kind) for off, n, kind in parts if n > 0) or [(0, size, "file")]
    boundaries = [off for off, _, _ in span_list]
    bounds = _bounds(size, boundaries)
    method = SAMPLED if estimate == "sample" else EXACT

    def fresh(wanted: tuple[int, ...]) -> Measurement:
        if method == SAMPLED:
            return sample_measure(
                p, span_list if size else [], levels=wanted, mem_level=mem_level, plan=plan,
                workers=workers,
            )  # fmt: skip
        return compress.measure(
            p, levels=wanted, boundaries=boundaries, chunk_bytes=chunk_bytes,
            mem_level=mem_level, workers=workers,
        )  # fmt: skip

    if not use_cache:
        return fresh(lv)
    digest = sha256
    if digest is None:
        digest = file_sha256(p) if method == EXACT else known_sha256(p, before)
    if digest is None:  # a sample of a file never hashed: not worth a hash to cache it
        return fresh(lv)

    def key(level: int, how: str) -> JsonObject:
        return _key(
            digest, level, estimate=how, bounds=bounds, chunk_bytes=chunk_bytes,
            mem_level=mem_level, plan=plan,
        )  # fmt: skip

    found: dict[int, tuple[str, list[int], float, int]] = {}
    for level in lv:
        for how in (EXACT, SAMPLED) if method == SAMPLED else (EXACT,):
            entry = _load_entry(key(level, how), size, len(bounds))
            if entry is not None:
                found[level] = (how, *entry)
                break
    missing = tuple(level for level in lv if level not in found)
    measured = fresh(missing) if missing else None
    if measured is not None:
        if measured.part_bounds != bounds:  # the file changed under us
            raise UsageError(f"{p}: changed while being measured", "measure it again")
        if stat_identity(os.stat(p)) == stat_identity(before):
            for level in missing:
                entry_key = key(level, measured.estimate)
                doc = {
                    "key": entry_key,
                    "raw_bytes": size,
                    "part_deflate_bytes": [d[level] for d in measured.part_deflate_bytes],
                    "error_bound": measured.bound(level),
                    "deflated_bytes": measured.deflated_bytes or 0,
                }
                keep_json(_entry_path(entry_key), doc)
    return _assemble(lv, bounds, size, found, measured, chunk_bytes, mem_level)


def _assemble(
    levels: tuple[int, ...],
    bounds: tuple[tuple[int, int], ...],
    size: int,
    found: dict[int, tuple[str, list[int], float, int]],
    measured: Measurement | None,
    chunk_bytes: int,
    mem_level: int,
) -> Measurement:
    """One Measurement of the cached levels and the freshly measured ones."""
    per_part: list[dict[int, int]] = [{} for _ in bounds]
    bound: dict[int, float] = {}
    methods: set[str] = set()
    deflated = 0
    for level in levels:
        if level in found:
            how, sizes, b, n = found[level]
            for i, value in enumerate(sizes):
                per_part[i][level] = value
        else:
            assert measured is not None
            how, b, n = measured.estimate, measured.bound(level), measured.deflated_bytes or 0
            for i, sizes_at in enumerate(measured.part_deflate_bytes):
                per_part[i][level] = sizes_at[level]
        bound[level] = b
        methods.add(how)
        deflated = max(deflated, n)
    return Measurement(
        raw_bytes=size,
        levels=levels,
        deflate_bytes={level: sum(d[level] for d in per_part) for level in levels},
        part_bounds=bounds,
        part_deflate_bytes=tuple(per_part),
        chunk_bytes=measured.chunk_bytes if measured else chunk_bytes,
        chunks=measured.chunks if measured else 0,
        workers=measured.workers if measured else 0,
        mem_level=mem_level,
        estimate=SAMPLED if SAMPLED in methods else EXACT,
        error_bound=bound,
        deflated_bytes=deflated,
        cached=measured is None,
    )

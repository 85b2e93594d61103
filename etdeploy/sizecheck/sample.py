"""A sampled download-size estimate for multi-GB programs, with the error bound it measured.

The exact figure (compress.measure) deflates every byte: about as long as `gzip -6` split
over the cores. This deflates a spread of chunks instead and extrapolates, per kind of part
of the .pte (header and program, constant segment, delegate blobs, named data...), since
the kinds compress very differently (a flatbuffer to a third, float weights to nine tenths)
while the chunks of one kind compress alike.

Per kind, the bytes of all its spans are one population. A kind too small to be worth
sampling (under `min_samples` chunks in a quarter of it) is deflated whole, exactly as
compress.measure does. A larger one is cut into `n` equal strata with one chunk drawn at a
seeded random place in each (stratified sampling: the chunks spread over the whole kind, and
the same file always gets the same chunks). Each chunk is deflated with the 32 KiB before it
as its dictionary, so it costs what its bytes cost inside the whole stream; the chunking
error of that is under 0.01% on float weights (see compress.py).

The kind's compressed size is the ratio estimator R * X (less the chunk ends the sample
has and the exact figure has not, see _estimate_kind), with R = sum(deflated) / sum(raw)
over its chunks and X its bytes. Its standard error is the usual large-sample one of a ratio
estimator (Cochran, Sampling Techniques, ch. 6, "Ratio estimators"): with residuals
e_i = y_i - R x_i, SE(R X) = X * sqrt((1 - f) / n * s_e^2) / mean(x), f the sampled
fraction. With one chunk per stratum, s_e^2 is taken from the differences of neighbouring
strata's residuals, sum (e_i+1 - e_i)^2 / 2(n - 1), the successive-difference estimator
for systematic and one-per-stratum samples (Wolter, Introduction to Variance Estimation,
ch. 8): a payload that changes along the file (layers of other scales, int8 after float)
then counts as the few steps it is, not as noise everywhere, and a slow drift still
widens the bound, the safe side. The kinds' variances add; the stated bound is `z` (3) standard errors of the total plus the
chunk-end model's systematic term, relative to the total, never below the chunking error. When that bound is over `target_bound`, the sample is
doubled (up to `max_fraction` of each kind) and drawn again.
"""

from __future__ import annotations

import itertools
import math
import os
import random
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from etdeploy.errors import UsageError
from etdeploy.files import check_readable_file
from etdeploy.jsonvalue import JsonObject
from etdeploy.sizecheck import compress
from etdeploy.sizecheck.compress import (
    BUNDLETOOL_MEM_LEVEL,
    DEFAULT_CHUNK_BYTES,
    DEFLATE_WINDOW_BYTES,
    SAMPLED,
    Measurement,
    check_levels,
    default_workers,
)

# Chunks per sampled kind also deflated as two halves, to measure what a chunk end costs.
SPLIT_SAMPLES = 8
# What chunking alone costs against one stream (compress.py, measured on float and int8
# weights: under 0.01%); a bound never claims better than that.
CHUNKING_ERROR = 0.0001


@dataclass(frozen=True)
class SamplePlan:
    """How much of each kind of part is deflated, and how sure the estimate must be."""

    chunk_bytes: int = 256 * 1024
    fraction: float = 1 / 32  # of each sampled kind's bytes, in the first draw
    min_samples: int = 32  # per sampled kind: fewer gives no usable spread
    max_fraction: float = 1 / 4  # past this, a kind is deflated whole
    target_bound: float = 0.005  # draw more while the bound is wider than this
    z: float = 3.0  # standard errors in the stated bound (~99.7% if the errors are normal)
    seed: int = 20261203

    def check(self) -> None:
        if self.chunk_bytes < 4096:
            raise UsageError(f"sample chunk of {self.chunk_bytes} bytes", "use at least 4 KiB")
        if not 0 < self.fraction <= self.max_fraction <= 0.5:
            raise UsageError(
                f"sample fractions {self.fraction} / {self.max_fraction}",
                "need 0 < fraction <= max_fraction <= 0.5",
            )
        if self.min_samples < 2 or self.target_bound <= 0 or self.z <= 0:
            raise UsageError("sample plan needs min_samples >= 2, target_bound > 0 and z > 0")

    def as_key(self) -> JsonObject:
        return asdict(self)


DEFAULT_PLAN = SamplePlan()


@dataclass(frozen=True)
class _Kind:
    """The spans of one kind of part, as one population."""

    name: str
    parts: tuple[int, ...]  # indexes into the part list
    spans: tuple[tuple[int, int], ...]  # (start, end) of each, in file order

    @property
    def total(self) -> int:
        return sum(e - s for s, e in self.spans)


@dataclass(frozen=True)
class _KindEstimate:
    compressed: dict[int, float]  # the kind's estimated deflated bytes, per level
    variance: dict[int, float]  # of that estimate, per level
    systematic: dict[int, float]  # how far the chunk-end model may be off, in bytes
    sampled_bytes: int
    chunks: int


@dataclass(frozen=True)
class _Sample:
    length: int
    whole: dict[int, int]  # deflated bytes per level, as one chunk
    split: dict[int, int] | None  # the same bytes as two chunks, when measured


def _read(fd: int, path: Path, offset: int, length: int) -> bytes:
    data = os.pread(fd, length, offset)
    if len(data) != length:
        raise UsageError(
            f"{path}: shrank while being read (wanted {length} bytes at {offset})",
            "measure a file nothing is writing to",
        )
    return data


def _chunk_sizes(
    fd: int,
    path: Path,
    offset: int,
    length: int,
    levels: tuple[int, ...],
    mem_level: int,
    split: bool = False,
) -> _Sample:
    """Deflated bytes of [offset, offset+length) at each level, primed with the 32 KiB before
    it, as compress.measure primes its chunks; with `split`, also as two halves (the second
    primed with the 32 KiB before it): the difference is what one more chunk end costs."""
    start = max(0, offset - DEFLATE_WINDOW_BYTES)
    prefix = _read(fd, path, start, offset - start) if offset > start else b""
    data = _read(fd, path, offset, length)
    whole = {lv: compress._deflate_size(prefix, data, lv, mem_level) for lv in levels}
    if not split or length < 2:
        return _Sample(length, whole, None)
    half = length // 2
    window = (prefix + data[:half])[-DEFLATE_WINDOW_BYTES:]
    two = {
        lv: compress._deflate_size(prefix, data[:half], lv, mem_level)
        + compress._deflate_size(window, data[half:], lv, mem_level)
        for lv in levels
    }
    return _Sample(length, whole, two)


def _positions(kind: _Kind, n: int, chunk: int, rng: random.Random) -> list[tuple[int, int]]:
    """`n` chunks (file offset, length), one at a random place in each of n equal strata of
    the kind's bytes; a chunk stays inside its span (moved back from the span's end)."""
    total = kind.total
    width = total / n
    starts = [0]
    for s, e in kind.spans:
        starts.append(starts[-1] + e - s)
    out: list[tuple[int, int]] = []
    j = 0
    for i in range(n):
        at = min(total - 1, int(i * width + rng.random() * width))
        while starts[j + 1] <= at:
            j += 1
        span_start, span_end = kind.spans[j]
        length = min(chunk, span_end - span_start)
        offset = min(span_start + at - starts[j], span_end - length)
        out.append((offset, length))
    return list(dict.fromkeys(out))


def _estimate_kind(
    kind: _Kind, samples: Sequence[_Sample], levels: tuple[int, ...]
) -> _KindEstimate:
    """Ratio estimator of the kind's deflated bytes and its variance (Cochran ch. 6), per
    level, corrected for chunk ends.

    Each chunk ends its own deflate stream, which costs a few bytes (a last, short block)
    that the same bytes inside a long stream do not: nothing for weights (0.01%), but 5% of
    a run of zeros, which deflates to almost nothing. Extrapolated, the sample has
    n * X / sum(x) chunk ends where compress.measure has one per 8 MiB; the cost of one end,
    h, is measured on some chunks as (two halves) - (whole), and the excess ends are taken
    off. h's own spread joins the variance. The model is rough where deflate's own blocks are
    long (a run of zeros fills a 16 Ki-symbol block with 4 MB, so the exact figure has two
    block ends per 8 MiB, not one): up to two costs of h per 8 MiB piece is added to the
    bound as a systematic term.
    """
    n = len(samples)
    xs = [s.length for s in samples]
    total = kind.total
    sum_x = sum(xs)
    f = min(1.0, sum_x / total)
    mean_x = sum_x / n
    exact_ends = sum(math.ceil((e - s) / DEFAULT_CHUNK_BYTES) for s, e in kind.spans)
    excess_ends = n * total / sum_x - exact_ends
    compressed: dict[int, float] = {}
    variance: dict[int, float] = {}
    systematic: dict[int, float] = {}
    for lv in levels:
        ys = [s.whole[lv] for s in samples]
        r = sum(ys) / sum_x
        # Residuals in stratum order, their variance from successive differences.
        e = [y - r * x for x, y in zip(xs, ys, strict=True)]
        s2 = sum((b - a) ** 2 for a, b in itertools.pairwise(e)) / (2 * (n - 1))
        ends = [s.split[lv] - s.whole[lv] for s in samples if s.split is not None]
        h = sum(ends) / len(ends) if ends else 0.0
        h_var = (
            sum((e - h) ** 2 for e in ends) / (len(ends) - 1) / len(ends) if len(ends) > 1 else h**2
        )
        compressed[lv] = max(0.0, r * total - h * excess_ends)
        variance[lv] = total**2 * (1 - f) / n * s2 / mean_x**2 + excess_ends**2 * h_var
        systematic[lv] = 2 * abs(h) * exact_ends
    return _KindEstimate(compressed, variance, systematic, sum_x, n)


def sample_measure(
    path: str | os.PathLike[str],
    parts: Sequence[tuple[int, int, str]],
    *,
    levels: Sequence[int] = (compress.PLAY_LEVEL,),
    mem_level: int = BUNDLETOOL_MEM_LEVEL,
    plan: SamplePlan = DEFAULT_PLAN,
    workers: int | None = None,
) -> Measurement:
    """Estimate the deflated size of `path` from a sample of each kind of part.

    `parts` are (offset, size, kind) spans that tile the file (breakdown.layout_parts of a
    .pte; one span for any other file). The result is a Measurement with the same parts as
    compress.measure would give with those boundaries, `estimate` "sampled", and per level the
    relative error bound it measured.
    """
    p = Path(path)
    size = check_readable_file(p).st_size
    lv = check_levels(levels)
    plan.check()
    spans = _tiling_spans(p, size, parts)
    if not spans:  # an empty file: nothing to sample
        return compress.measure(p, levels=lv, mem_level=mem_level, workers=workers)
    kinds = _kinds(spans)
    n_workers = workers or default_workers()
    try:
        fd = os.open(p, os.O_RDONLY)
    except OSError as exc:
        raise UsageError(f"{p}: cannot be read: {exc.strerror}", "check the path") from None
    with ThreadPoolExecutor(max_workers=n_workers, thread_name_prefix="sample") as pool:
        try:
            sampling = _Sampling(p, fd, pool, lv, mem_level, plan, [None] * len(spans))
            sampling.deflate_small_kinds(kinds)
            sampling.draw(kinds)
        finally:
            os.close(fd)
    return sampling.measurement(kinds, spans, size, n_workers)


def _tiling_spans(
    path: Path, size: int, parts: Sequence[tuple[int, int, str]]
) -> list[tuple[int, int, str]]:
    """The non-empty parts as (start, end, kind) in file order; they must tile the file."""
    spans = [(off, off + n, kind) for off, n, kind in sorted(parts) if n > 0]
    cursor = 0
    for start, end, _ in spans:
        if start != cursor:
            raise UsageError(f"{path}: parts do not tile the file at byte {cursor}")
        cursor = end
    if cursor != size:
        raise UsageError(f"{path}: parts cover {cursor} of {size} bytes")
    return spans


def _kinds(spans: Sequence[tuple[int, int, str]]) -> list[_Kind]:
    """The spans grouped by kind, in the order each kind first appears."""
    by_kind: dict[str, list[int]] = {}
    for i, (_, _, name) in enumerate(spans):
        by_kind.setdefault(name, []).append(i)
    return [
        _Kind(name, tuple(ix), tuple((spans[i][0], spans[i][1]) for i in ix))
        for name, ix in by_kind.items()
    ]


@dataclass
class _Sampling:
    """One sampled measurement under way: the open file, the pool deflating its chunks,
    each part's deflated bytes once known, each sampled kind's estimate, and the work done."""

    path: Path
    fd: int
    pool: ThreadPoolExecutor
    levels: tuple[int, ...]
    mem_level: int
    plan: SamplePlan
    part_sizes: list[dict[int, int] | None]
    estimates: dict[str, _KindEstimate] = field(default_factory=dict)
    deflated: int = 0
    chunks: int = 0

    def wanted(self, kind: _Kind, scale: int) -> int | None:
        """Chunks to draw from `kind`, or None to deflate it whole."""
        plan = self.plan
        n = max(plan.min_samples, math.ceil(kind.total * plan.fraction / plan.chunk_bytes))
        n *= scale
        return None if n * plan.chunk_bytes > kind.total * plan.max_fraction else n

    def deflate_small_kinds(self, kinds: Sequence[_Kind]) -> None:
        """Kinds too small to sample: every byte, in the chunks compress.measure uses."""
        lv = self.levels
        exact_jobs: list[tuple[int, Future[_Sample]]] = []
        for kind in kinds:
            if self.wanted(kind, 1) is not None:
                continue
            for i, (start, end) in zip(kind.parts, kind.spans, strict=True):
                for off in range(start, end, DEFAULT_CHUNK_BYTES):
                    n = min(DEFAULT_CHUNK_BYTES, end - off)
                    exact_jobs.append(
                        (
                            i,
                            self.pool.submit(
                                _chunk_sizes, self.fd, self.path, off, n, lv, self.mem_level
                            ),
                        )
                    )
        for i, fut in exact_jobs:
            got = fut.result().whole
            acc = self.part_sizes[i] or dict.fromkeys(lv, 0)
            self.part_sizes[i] = {level: acc[level] + got[level] for level in lv}
        self.deflated += sum(e - s for k in kinds if self.wanted(k, 1) is None for s, e in k.spans)
        self.chunks += len(exact_jobs)

    def draw(self, kinds: Sequence[_Kind]) -> None:
        """Draw from every kind big enough; while the bound is wider than the target, draw
        twice as many chunks again from the kinds that make most of its spread."""
        scale = 1
        redraw = [k for k in kinds if self.wanted(k, 1) is not None]
        while redraw:
            for kind in redraw:
                self._estimate(kind, scale)
            bound = _bound(self.estimates, self.part_sizes, kinds, self.levels, self.plan)
            if max(bound.values()) <= self.plan.target_bound:
                break
            scale *= 2
            spread = {k.name: max(self.estimates[k.name].variance.values()) for k in redraw}
            widest = max(spread.values())
            # No spread: the bound is the chunk-end term, which more chunks do not narrow.
            redraw = [
                k
                for k in redraw
                if widest > 0 and spread[k.name] >= widest / 4 and self.wanted(k, scale) is not None
            ]

    def _estimate(self, kind: _Kind, scale: int) -> None:
        n = self.wanted(kind, scale)
        assert n is not None
        rng = random.Random(f"{self.plan.seed}/{kind.name}/{scale}")
        where = _positions(kind, n, self.plan.chunk_bytes, rng)
        # Chunk ends are measured on SPLIT_SAMPLES chunks spread over the kind.
        every = max(1, len(where) // SPLIT_SAMPLES)
        futs = [
            self.pool.submit(
                _chunk_sizes, self.fd, self.path, off, length, self.levels, self.mem_level,
                i % every == 0,
            )
            for i, (off, length) in enumerate(where)
        ]  # fmt: skip
        est = _estimate_kind(kind, [f.result() for f in futs], self.levels)
        self.estimates[kind.name] = est
        self.deflated += est.sampled_bytes  # every draw's work, not only the last
        self.chunks += est.chunks

    def measurement(
        self, kinds: Sequence[_Kind], spans: Sequence[tuple[int, int, str]], size: int, workers: int
    ) -> Measurement:
        """The sampled kinds' estimates spread over their parts, with the bound."""
        lv = self.levels
        for kind in kinds:
            est = self.estimates.get(kind.name)
            if est is None:
                continue
            for i, (start, end) in zip(kind.parts, kind.spans, strict=True):
                self.part_sizes[i] = {
                    level: round((end - start) * est.compressed[level] / kind.total) for level in lv
                }
        final = [ps if ps is not None else dict.fromkeys(lv, 0) for ps in self.part_sizes]
        totals = {level: sum(ps[level] for ps in final) for level in lv}
        bound = (
            _bound(self.estimates, final, kinds, lv, self.plan)
            if self.estimates
            else dict.fromkeys(lv, 0.0)
        )
        return Measurement(
            raw_bytes=size,
            levels=lv,
            deflate_bytes=totals,
            part_bounds=tuple((s, e) for s, e, _ in spans),
            part_deflate_bytes=tuple(final),
            chunk_bytes=self.plan.chunk_bytes,
            chunks=self.chunks,
            workers=workers,
            mem_level=self.mem_level,
            estimate=SAMPLED if self.estimates else compress.EXACT,
            error_bound=bound,
            deflated_bytes=self.deflated,
        )


def _bound(
    estimates: dict[str, _KindEstimate],
    part_sizes: Sequence[dict[int, int] | None],
    kinds: Sequence[_Kind],
    levels: tuple[int, ...],
    plan: SamplePlan,
) -> dict[int, float]:
    """z standard errors of the whole file's compressed size, relative to it, per level."""
    out: dict[int, float] = {}
    for level in levels:
        total = variance = systematic = 0.0
        for kind in kinds:
            est = estimates.get(kind.name)
            if est is None:
                total += sum((part_sizes[i] or {}).get(level, 0) for i in kind.parts)
            else:
                total += est.compressed[level]
                variance += est.variance[level]
                systematic += est.systematic[level]
        rel = (plan.z * math.sqrt(variance) + systematic) / total if total else 0.0
        out[level] = max(CHUNKING_ERROR, rel) if estimates else 0.0
    return out

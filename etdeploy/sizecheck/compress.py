"""How many bytes a file takes once deflated: the download-size estimate the stores use.

Sources (read 2026-12-02 in stored copies, via the search tool):
- bundletool (google/bundletool, model/utils/GZipUtils.java, commit a380c5bb) measures an
  APK's download size as the byte count of java.util.zip.GZIPOutputStream over it, which uses
  Deflater.DEFAULT_COMPRESSION, i.e. zlib level 6. Play Console's figure is "a similar (but not
  identical) calculation" (support.google.com/googleplay/android-developer/answer/9859372).
- Android Studio's APK Analyzer (AOSP tools/base, apkanalyzer's GzipSizeCalculator) sets
  Deflater.BEST_COMPRESSION, level 9, with the comment that Play serves APKs gzip -9'd.

How it is measured: the file is cut into independent chunks (8 MiB by default) that a thread
pool deflates at the requested levels (zlib releases the GIL while it compresses), and the
compressed sizes are summed. At most `max_in_flight` chunks are in memory at once, so memory
stays constant whatever the file's size. Each chunk's compressor is primed (zdict) with the
32 KiB that precede it, deflate's whole window, so matches across a chunk boundary are still
found; what remains of the error against one single stream is a final block per chunk and
block-splitting decisions: under 0.01% on float weights.

zlib's memLevel sets how many symbols a deflate block holds before its Huffman codes are
redone. Java's Deflater (so bundletool and the APK Analyzer) uses zlib's default, 8; GNU
gzip's buffers behave like memLevel 9. On float weights the two differ by about 0.2%
(memLevel 8 is larger). We default to 8, what bundletool computes; with mem_level=9 the
estimate matches `gzip -6` to within the chunking error (tests/sizecheck/test_compress.py
holds both within 0.5% of `gzip -6` on the same bytes).
"""

from __future__ import annotations

import itertools
import os
import zlib
from collections import deque
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import BinaryIO

from etdeploy.errors import UsageError
from etdeploy.files import check_readable_file

DEFAULT_CHUNK_BYTES = 8 * 1024 * 1024
# RFC 1951: a deflate back-reference reaches at most 32 KiB back.
DEFLATE_WINDOW_BYTES = 32 * 1024
# RFC 1952: a 10-byte member header and an 8-byte trailer (CRC32, ISIZE), no file name,
# which is what GZIPOutputStream and `gzip < file` write.
GZIP_FRAMING_BYTES = 18
PLAY_LEVEL = 6  # bundletool / Play Console
ANALYZER_LEVEL = 9  # Android Studio's APK Analyzer
# zlib's default memLevel, which java.util.zip.Deflater uses (so bundletool does too).
BUNDLETOOL_MEM_LEVEL = 8
# How a Measurement was made: every byte deflated, or a sample extrapolated (sample.py).
EXACT = "exact"
SAMPLED = "sampled"
# zlib.compress() input slice, so the compressed output of a chunk is never held whole.
_FEED_BYTES = 256 * 1024


@dataclass(frozen=True)
class Measurement:
    """Raw and deflated sizes of a file, whole and per part."""

    raw_bytes: int
    levels: tuple[int, ...]
    deflate_bytes: dict[int, int]  # raw deflate bytes per level, summed over chunks
    part_bounds: tuple[tuple[int, int], ...]  # (start, end) of each part
    part_deflate_bytes: tuple[dict[int, int], ...]  # per part, per level
    chunk_bytes: int
    chunks: int
    workers: int
    mem_level: int
    estimate: str = EXACT  # exact | sampled
    # Per level, the relative half-width of the sampled estimate's error bound; 0 when exact.
    error_bound: dict[int, float] = field(default_factory=dict)
    deflated_bytes: int | None = None  # bytes actually deflated (all of them when exact)
    cached: bool = False  # read from the measurement cache, not measured now

    def gzip_bytes(self, level: int = PLAY_LEVEL) -> int:
        """The gzip size estimate: deflate bytes plus gzip's header and trailer."""
        return self.deflate_bytes[level] + GZIP_FRAMING_BYTES

    def ratio(self, level: int = PLAY_LEVEL) -> float:
        return self.gzip_bytes(level) / self.raw_bytes if self.raw_bytes else 1.0

    def bound(self, level: int = PLAY_LEVEL) -> float:
        return self.error_bound.get(level, 0.0)

    def label(self, level: int = PLAY_LEVEL) -> str:
        """ "exact", or "sampled ±0.12%": what a report says about how a figure was made."""
        return estimate_label(self.estimate, self.bound(level))

    def as_cached(self) -> Measurement:
        return replace(self, cached=True)


def estimate_label(estimate: str, bound: float) -> str:
    return EXACT if estimate == EXACT else f"{SAMPLED} ±{bound * 100:.2f}%"


def default_workers() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def _deflate_size(
    prefix: bytes, data: bytes | memoryview, level: int, mem_level: int = BUNDLETOOL_MEM_LEVEL
) -> int:
    # wbits=-15: a raw deflate stream, so the count excludes zlib's own 6-byte framing.
    if prefix:
        comp = zlib.compressobj(level, zlib.DEFLATED, -15, mem_level, zdict=prefix)
    else:
        comp = zlib.compressobj(level, zlib.DEFLATED, -15, mem_level)
    view = memoryview(data)
    total = 0
    for start in range(0, len(view), _FEED_BYTES):
        total += len(comp.compress(view[start : start + _FEED_BYTES]))
    total += len(comp.flush(zlib.Z_FINISH))
    return total


def _chunk_task(
    part: int, prefix: bytes, data: bytes, levels: tuple[int, ...], mem_level: int
) -> tuple[int, dict[int, int]]:
    return part, {level: _deflate_size(prefix, data, level, mem_level) for level in levels}


def deflate_size(
    data: bytes, level: int = PLAY_LEVEL, mem_level: int = BUNDLETOOL_MEM_LEVEL
) -> int:
    """Raw deflate size of `data` as one stream (for small buffers; no threads)."""
    return _deflate_size(b"", data, level, mem_level)


def check_levels(levels: Iterable[int]) -> tuple[int, ...]:
    out = tuple(dict.fromkeys(levels))
    if not out or any(not 0 <= lv <= 9 for lv in out):
        raise UsageError(f"deflate levels must be 0..9, got {out}", "use 6 (Play) and/or 9")
    return out


def measure(
    path: str | os.PathLike[str],
    *,
    levels: Sequence[int] = (PLAY_LEVEL,),
    boundaries: Iterable[int] = (),
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    workers: int | None = None,
    max_in_flight: int | None = None,
    mem_level: int = BUNDLETOOL_MEM_LEVEL,
) -> Measurement:
    """Deflate `path` in parallel chunks at each level and count the bytes.

    `boundaries` are offsets that cut the file into parts (a .pte's header, program,
    segments...); chunks never straddle a part, so each part gets its own compressed size and
    the parts sum to the whole. Memory: at most `max_in_flight` chunks (default workers + 2).
    """
    p = Path(path)
    size = check_readable_file(p).st_size
    lv = check_levels(levels)
    if not 1 <= mem_level <= 9:
        raise UsageError(f"zlib memLevel must be 1..9, got {mem_level}")
    if chunk_bytes < DEFLATE_WINDOW_BYTES:
        raise UsageError(f"chunk size {chunk_bytes} is below deflate's 32 KiB window")
    n_workers = workers or default_workers()
    in_flight_cap = max_in_flight or n_workers + 2
    cuts = sorted({b for b in boundaries if 0 < b < size} | {0, size})
    bounds = tuple(itertools.pairwise(cuts)) if size else ((0, 0),)
    try:
        fh = open(p, "rb", buffering=0)  # noqa: SIM115  closed below; read in big blocks
    except OSError as exc:
        raise UsageError(f"{p}: cannot be read: {exc.strerror}", "check the path") from None
    with fh:
        part_sizes, chunks = _deflate_parts(
            fh, p, size, bounds, lv, chunk_bytes, n_workers, in_flight_cap, mem_level
        )
    if size == 0:
        # An empty deflate stream is one empty final block (2 bytes), as gzip writes it.
        # (A compressobj: zlib.compress takes wbits only from Python 3.11.)
        stream = zlib.compressobj(6, zlib.DEFLATED, -15)
        empty = len(stream.compress(b"") + stream.flush())
        part_sizes = [dict.fromkeys(lv, empty) for _ in bounds]
    totals = {level: sum(ps[level] for ps in part_sizes) for level in lv}
    return Measurement(
        raw_bytes=size,
        levels=lv,
        deflate_bytes=totals,
        part_bounds=bounds,
        part_deflate_bytes=tuple(part_sizes),
        chunk_bytes=chunk_bytes,
        chunks=chunks,
        workers=n_workers,
        mem_level=mem_level,
        estimate=EXACT,
        error_bound=dict.fromkeys(lv, 0.0),
        deflated_bytes=size,
    )


def _deflate_parts(
    fh: BinaryIO,
    p: Path,
    size: int,
    bounds: tuple[tuple[int, int], ...],
    lv: tuple[int, ...],
    chunk_bytes: int,
    n_workers: int,
    in_flight_cap: int,
    mem_level: int,
) -> tuple[list[dict[int, int]], int]:
    """Each part's deflated bytes per level, and the chunks it took: the file read in
    order, its chunks deflated on `n_workers` threads, at most `in_flight_cap` held."""
    part_sizes: list[dict[int, int]] = [dict.fromkeys(lv, 0) for _ in bounds]
    chunks = 0
    pending: deque[Future[tuple[int, dict[int, int]]]] = deque()

    def collect(fut: Future[tuple[int, dict[int, int]]]) -> None:
        part, sizes = fut.result()
        for level, n in sizes.items():
            part_sizes[part][level] += n

    with ThreadPoolExecutor(max_workers=n_workers, thread_name_prefix="deflate") as pool:
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(fh.fileno(), 0, 0, os.POSIX_FADV_SEQUENTIAL)
        tail = b""
        try:
            for part, (start, end) in enumerate(bounds):
                pos = start
                while pos < end:
                    n = min(chunk_bytes, end - pos)
                    data = fh.read(n)
                    if len(data) != n:
                        raise UsageError(
                            f"{p}: shrank while being read (got {pos + len(data)} of {size} bytes)",
                            "measure a file nothing is writing to",
                        )
                    while len(pending) >= in_flight_cap:
                        collect(pending.popleft())
                    pending.append(pool.submit(_chunk_task, part, tail, data, lv, mem_level))
                    chunks += 1
                    tail = (tail + data[-DEFLATE_WINDOW_BYTES:])[-DEFLATE_WINDOW_BYTES:]
                    pos += n
            while pending:
                collect(pending.popleft())
        except OSError as exc:
            raise UsageError(f"{p}: read failed: {exc.strerror}", "check the disk") from None
        finally:
            for fut in pending:
                fut.cancel()
    return part_sizes, chunks


def gzip_size(
    path: str | os.PathLike[str],
    level: int = PLAY_LEVEL,
    *,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    workers: int | None = None,
    mem_level: int = BUNDLETOOL_MEM_LEVEL,
) -> int:
    """Estimated gzip size of `path` at `level` (bundletool's figure), in parallel chunks."""
    m = measure(
        path, levels=(level,), chunk_bytes=chunk_bytes, workers=workers, mem_level=mem_level
    )
    return m.gzip_bytes(level)

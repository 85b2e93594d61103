"""Size one or more files (a .pte, its libraries, any asset) against the stores' limits.

The verdict is for everything passed together, plus `extra_bytes` for the rest of the app,
so it answers "does this module fit", not only "does this file fit".
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from etdeploy.errors import UsageError
from etdeploy.sizecheck.breakdown import Breakdown, build_breakdown, layout_parts
from etdeploy.sizecheck.compress import (
    ANALYZER_LEVEL,
    BUNDLETOOL_MEM_LEVEL,
    GZIP_FRAMING_BYTES,
    PLAY_LEVEL,
    Measurement,
    measure,
)
from etdeploy.sizecheck.limits import (
    DOWNLOAD,
    LIMIT,
    RAW,
    Limit,
    default_limits,
    format_bytes,
    parse_size,
    select_limits,
)
from etdeploy.sizecheck.pte import PteLayout, check_readable_file, read_pte

SCHEMA = "etdeploy.sizecheck/1"
FITS = "fits"
OVER = "over"
WARN = "warning"


@dataclass(frozen=True)
class SizedFile:
    path: Path
    raw_bytes: int
    download_bytes: int  # gzip at level 6: bundletool's estimate of Play's download size
    level9_bytes: int | None  # gzip at level 9: Android Studio's APK Analyzer
    kind: str  # pte | file
    layout: PteLayout | None = None
    breakdown: Breakdown | None = None


@dataclass(frozen=True)
class Verdict:
    limit: Limit
    measured_bytes: int
    status: str  # fits | over | warning

    @property
    def headroom_bytes(self) -> int:
        """Bytes that could still be added and fit; negative when over."""
        return self.limit.largest_fitting_bytes - self.measured_bytes

    @property
    def excess_bytes(self) -> int:
        """Bytes to cut to fit; 0 when it fits."""
        return max(0, -self.headroom_bytes)

    def describe(self) -> str:
        if self.status == FITS:
            return f"fits, {format_bytes(self.headroom_bytes)} headroom"
        by = format_bytes(self.excess_bytes)
        return f"over by {by}" if self.status == OVER else f"warning: over by {by}"


@dataclass(frozen=True)
class SizeReport:
    files: tuple[SizedFile, ...]
    extra_bytes: int
    raw_bytes: int  # files + extra
    download_bytes: int  # files' level-6 estimate + extra
    level9_bytes: int | None
    verdicts: tuple[Verdict, ...]
    limits: Mapping[str, Limit] = field(repr=False)
    notes: tuple[str, ...] = ()

    @property
    def failed(self) -> bool:
        """True when over a hard limit or the budget (exit 1)."""
        return any(v.status == OVER for v in self.verdicts)

    def to_json(self) -> dict[str, Any]:
        return report_to_json(self)


def judge(limit: Limit, raw_bytes: int, download_bytes: int) -> Verdict:
    """Fits when at or under the limit (decimal bytes), or strictly under an exclusive one
    (Apple's "less than 4GB"); one byte more is over."""
    measured = download_bytes if limit.measure == DOWNLOAD else raw_bytes
    if measured <= limit.largest_fitting_bytes:
        return Verdict(limit, measured, FITS)
    return Verdict(limit, measured, OVER if limit.severity == LIMIT else WARN)


def _expand(
    paths: Sequence[str | os.PathLike[str]], any_file: bool, notes: list[str]
) -> list[tuple[Path, bool]]:
    """(file, parse as .pte) for each path. Directories are walked recursively in sorted
    order without following symlinked directories (no loops); inside them, broken links and
    things that are not regular files (FIFOs, sockets) are skipped with a note."""
    out: list[tuple[Path, bool]] = []
    for raw in paths:
        p = Path(raw)
        if not p.is_dir():
            out.append((p, not any_file))
            continue
        if p.suffix == ".pte" and not any_file:
            # A directory named like a program is a file expected and a folder found (an
            # output directory, a failed copy): summing its contents would hide that.
            raise UsageError(f"{p}: is a directory, not a .pte file", "pass the .pte file itself")
        for root, dirs, files in os.walk(p, followlinks=False):
            dirs.sort()
            for name in sorted(files):
                f = Path(root) / name
                try:
                    regular = stat.S_ISREG(os.stat(f).st_mode)
                except OSError:
                    notes.append(f"skipped {f}: broken link or unreadable")
                    continue
                if not regular:
                    notes.append(f"skipped {f}: not a regular file")
                    continue
                out.append((f, not any_file and f.suffix == ".pte"))
    return out


def _size_one(path: Path, parse: bool, levels: tuple[int, ...]) -> SizedFile:
    layout: PteLayout | None = None
    boundaries: list[int] = []
    if parse:
        layout = read_pte(path)
        parts = layout_parts(layout)
        boundaries = [p.offset for p in parts]
    else:
        check_readable_file(path)
    m: Measurement = measure(path, levels=levels, boundaries=boundaries)
    bd = build_breakdown(layout, m) if layout is not None else None
    return SizedFile(
        path=path,
        raw_bytes=m.raw_bytes,
        download_bytes=m.gzip_bytes(PLAY_LEVEL),
        level9_bytes=m.gzip_bytes(ANALYZER_LEVEL) if ANALYZER_LEVEL in m.levels else None,
        kind="pte" if layout is not None else "file",
        layout=layout,
        breakdown=bd,
    )


def check_size(
    paths: Sequence[str | os.PathLike[str]],
    *,
    store: str = "all",
    deliveries: Iterable[str] | None = None,
    budget: int | str | None = None,
    extra_bytes: int | str = 0,
    limits: Mapping[str, Limit] | None = None,
    any_file: bool = False,
    levels: Sequence[int] = (PLAY_LEVEL, ANALYZER_LEVEL),
    budget_measure: str = DOWNLOAD,
    budget_source: str = "--budget",
) -> SizeReport:
    """Measure `paths` together and judge them against the chosen limits and budget.

    Files given directly must be .pte programs unless `any_file`; directories are summed
    recursively, parsing the .pte files found in them. `extra_bytes` (the rest of the app,
    e.g. "12MB") is added as-is to both the raw and the download totals. `budget_source` says
    where the budget came from (the flag, or etdeploy.toml) in its verdict.
    """
    if not paths:
        raise UsageError("no files to size", "pass a .pte, a directory, or --any-file FILE")
    table = dict(limits) if limits is not None else default_limits()
    chosen = select_limits(table, store, deliveries)
    extra = parse_size(extra_bytes, what="--extra")
    lv = tuple(dict.fromkeys((PLAY_LEVEL, *levels)))
    if budget_measure not in (DOWNLOAD, RAW):
        raise UsageError(f"budget measure {budget_measure!r}", "use download or raw")

    files: list[SizedFile] = []
    notes: list[str] = []
    seen: set[Path] = set()
    for path, parse in _expand(paths, any_file, notes):
        try:
            real = path.resolve()
        except OSError:
            real = path
        if real in seen:
            notes.append(f"{path} was given twice; counted once")
            continue
        seen.add(real)
        files.append(_size_one(path, parse, lv))
    if not files:
        raise UsageError("the directories given hold no files", "pass a .pte or a file")

    raw = sum(f.raw_bytes for f in files) + extra
    download = sum(f.download_bytes for f in files) + extra
    level9 = sum(f.level9_bytes or 0 for f in files) + extra if ANALYZER_LEVEL in lv else None
    verdicts = [judge(limit, raw, download) for limit in chosen]
    if budget is not None:
        budget_limit = Limit(
            key="budget",
            store="budget",
            label="team budget",
            bytes=parse_size(budget, what=budget_source),
            measure=budget_measure,
            severity=LIMIT,
            source=budget_source,
            read_on="",
        )
        verdicts.append(judge(budget_limit, raw, download))
    if len(files) > 1:
        notes.append(
            f"download size sums each file's own gzip ({len(files)} files), as Play gzips each "
            "APK; files inside one APK compress a little differently"
        )
    if extra:
        notes.append(f"--extra {format_bytes(extra)} is added as-is to raw and download totals")
    for limit in chosen:
        if limit.note:
            notes.append(f"{limit.label}: {limit.note}")
    return SizeReport(
        files=tuple(files),
        extra_bytes=extra,
        raw_bytes=raw,
        download_bytes=download,
        level9_bytes=level9,
        verdicts=tuple(verdicts),
        limits=table,
        notes=tuple(dict.fromkeys(notes)),
    )


def verdict_to_json(v: Verdict) -> dict[str, Any]:
    """One verdict for JSON: the limit (key, label, bytes, what it measures, source, date read),
    the measured bytes, status, signed headroom (negative when over), excess (0 when it fits)
    and the sentence the table shows."""
    return {
        "key": v.limit.key,
        "store": v.limit.store,
        "label": v.limit.label,
        "limit_bytes": v.limit.bytes,
        "inclusive": v.limit.inclusive,
        "measure": v.limit.measure,
        "severity": v.limit.severity,
        "measured_bytes": v.measured_bytes,
        "headroom_bytes": v.headroom_bytes,
        "excess_bytes": v.excess_bytes,
        "status": v.status,
        "text": v.describe(),
        "source": v.limit.source,
        "read_on": v.limit.read_on,
        "note": v.limit.note,
    }


def _breakdown_json(b: Breakdown, top: int | None) -> dict[str, Any]:
    q = b.quantization
    tensors = b.tensors if top is None else b.tensors[:top]
    return {
        "total_bytes": b.total_bytes,
        "parts": [
            {
                "label": g.label,
                "kind": g.kind,
                "bytes": g.size,
                "spans": g.count,
                "download_bytes": g.download_bytes,
            }
            for g in b.groups()
        ],
        "largest_tensors": [
            {
                "name": t.name,
                "key": t.key,
                "shape": list(t.shape) if t.shape is not None else None,
                "dtype": t.dtype,
                "bytes": t.nbytes,
                "location": t.location,
                "backend": t.backend,
            }
            for t in tensors
        ],
        "int8_estimate": {
            "tensors": q.tensors,
            "float_bytes": q.float_bytes,
            "quantized_bytes": q.quantized_bytes,
            "saved_bytes": q.saved_bytes,
            "note": q.note,
        },
        "external_bytes": b.external_bytes,
        "notes": list(b.notes),
    }


def _layout_json(layout: PteLayout) -> dict[str, Any]:
    def value(v: Any) -> dict[str, Any]:
        if v.tensor is None:
            return {"kind": v.kind}
        t = v.tensor
        return {
            "kind": "tensor",
            "dtype": t.dtype,
            "sizes": list(t.sizes),
            "dim_order": list(t.dim_order),
        }

    return {
        "file_identifier": layout.file_identifier,
        "schema_version": layout.schema_version,
        "program_size": layout.program_size,
        "segment_base_offset": layout.segment_base_offset,
        "segments": len(layout.segments),
        "methods": [
            {
                "name": m.name,
                "inputs": [value(v) for v in m.inputs],
                "outputs": [value(v) for v in m.outputs],
                "planned_arena_bytes": m.planned_arena_bytes,
                "non_const_buffer_sizes": list(m.non_const_buffer_sizes),
                "delegates": list(m.delegate_ids),
            }
            for m in layout.methods
        ],
        "delegates": [
            {
                "method": d.method,
                "backend_id": d.backend_id,
                "location": d.location,
                "bytes": d.size,
            }
            for d in layout.delegates
        ],
        "constant_segment_bytes": layout.constant_segment_size,
        "constant_buffer_bytes": layout.constant_buffer_bytes,
        "named_data": len(layout.named_data),
        "external_tensors": len(layout.external_tensors),
    }


def report_to_json(
    report: SizeReport, *, top: int | None = 10, config_path: Path | None = None
) -> dict[str, Any]:
    """The machine-readable report, schema "etdeploy.sizecheck/1"; `config_path` is the
    etdeploy.toml whose [sizecheck] and [limits] applied, if any."""
    return {
        "schema": SCHEMA,
        "estimate": {
            "download": f"gzip level {PLAY_LEVEL} (zlib memLevel {BUNDLETOOL_MEM_LEVEL}), "
            f"as bundletool computes it, {GZIP_FRAMING_BYTES} bytes of gzip framing per file",
            "level9": "gzip level 9, as Android Studio's APK Analyzer computes it",
            "units": "bytes; limits in decimal MB/GB",
        },
        "files": [
            {
                "path": str(f.path),
                "kind": f.kind,
                "raw_bytes": f.raw_bytes,
                "download_bytes": f.download_bytes,
                "level9_bytes": f.level9_bytes,
                "pte": _layout_json(f.layout) if f.layout is not None else None,
                "breakdown": _breakdown_json(f.breakdown, top) if f.breakdown else None,
            }
            for f in report.files
        ],
        "extra_bytes": report.extra_bytes,
        "total": {
            "raw_bytes": report.raw_bytes,
            "download_bytes": report.download_bytes,
            "level9_bytes": report.level9_bytes,
        },
        "verdicts": [verdict_to_json(v) for v in report.verdicts],
        "failed": report.failed,
        "config": str(config_path) if config_path else None,
        "notes": list(report.notes),
    }

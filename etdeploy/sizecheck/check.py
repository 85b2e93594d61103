"""Size one or more files (a .pte, its libraries, any asset) against the stores' limits.

The verdict is for everything passed together, plus `extra_bytes` for the rest of the app,
so it answers "does this module fit", not only "does this file fit".

Download sizes are measured exactly by default (every byte deflated, or read back from the
cache of earlier measurements of the same content, cache.py). With `estimate="sample"` they
are estimated from a sample (sample.py) with a stated error bound, and a download verdict
is judged at the top of that bound: a sampled estimate never passes a file that might be
over.
"""

from __future__ import annotations

import math
import os
import stat
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

from etdeploy.errors import UsageError
from etdeploy.files import check_readable_file
from etdeploy.jsonvalue import JsonObject
from etdeploy.pte.layout import MethodValue, PteLayout
from etdeploy.pte.reader import read_pte
from etdeploy.sizecheck.breakdown import Breakdown, build_breakdown, layout_parts
from etdeploy.sizecheck.cache import measure_file
from etdeploy.sizecheck.compress import (
    ANALYZER_LEVEL,
    BUNDLETOOL_MEM_LEVEL,
    EXACT,
    GZIP_FRAMING_BYTES,
    PLAY_LEVEL,
    Measurement,
    estimate_label,
)
from etdeploy.sizecheck.limits import DOWNLOAD, LIMIT, RAW, Limit, default_limits, select_limits
from etdeploy.sizecheck.sample import DEFAULT_PLAN, SamplePlan
from etdeploy.units import format_bytes, parse_size

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
    estimate: str = EXACT  # exact | sampled: how download_bytes was made
    error_bound: float = 0.0  # relative half-width of download_bytes' bound; 0 when exact
    level9_error_bound: float = 0.0
    cached: bool = False  # the figures came from the measurement cache
    deflated_bytes: int | None = None  # bytes deflated to get them (this time or when cached)

    @property
    def download_uncertainty_bytes(self) -> int:
        return math.ceil(self.download_bytes * self.error_bound)

    @property
    def estimate_label(self) -> str:
        """ "exact" or "sampled ±0.12%"."""
        return estimate_label(self.estimate, self.error_bound)


@dataclass(frozen=True)
class Verdict:
    limit: Limit
    measured_bytes: int
    status: str  # fits | over | warning
    # How far a sampled download estimate may be under the truth; the verdict is judged at
    # measured + uncertainty. 0 when measured exactly.
    uncertainty_bytes: int = 0

    @property
    def headroom_bytes(self) -> int:
        """Bytes that could still be added and fit (at the top of a sampled estimate's bound);
        negative when over."""
        return self.limit.largest_fitting_bytes - self.measured_bytes - self.uncertainty_bytes

    @property
    def excess_bytes(self) -> int:
        """Bytes to cut to fit; 0 when it fits."""
        return max(0, -self.headroom_bytes)

    def describe(self) -> str:
        sampled = (
            f" (sampled ±{format_bytes(self.uncertainty_bytes)})" if self.uncertainty_bytes else ""
        )
        if self.status == FITS:
            return f"fits, {format_bytes(self.headroom_bytes)} headroom{sampled}"
        by = format_bytes(self.excess_bytes)
        return (f"over by {by}" if self.status == OVER else f"warning: over by {by}") + sampled


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
    download_uncertainty_bytes: int = 0  # summed over sampled files; 0 when all exact

    @property
    def estimate_label(self) -> str:
        """ "exact" when every file was measured exactly, else "sampled ±X%" of the files'
        download total."""
        if all(f.estimate == EXACT for f in self.files):
            return EXACT
        files = sum(f.download_bytes for f in self.files)
        bound = self.download_uncertainty_bytes / files if files else 0.0
        return estimate_label("sampled", bound)

    @property
    def failed(self) -> bool:
        """True when over a hard limit or the budget (exit 1)."""
        return any(v.status == OVER for v in self.verdicts)

    def to_json(self) -> JsonObject:
        return report_to_json(self)


def judge(
    limit: Limit, raw_bytes: int, download_bytes: int, download_uncertainty_bytes: int = 0
) -> Verdict:
    """Fits when at or under the limit (decimal bytes), or strictly under an exclusive one
    (Apple's "less than 4GB"); one byte more is over. A sampled download estimate is judged
    at the top of its bound (download + uncertainty): it fits only if it surely fits."""
    if limit.measure == DOWNLOAD:
        measured, margin = download_bytes, download_uncertainty_bytes
    else:
        measured, margin = raw_bytes, 0
    if measured + margin <= limit.largest_fitting_bytes:
        return Verdict(limit, measured, FITS, margin)
    return Verdict(limit, measured, OVER if limit.severity == LIMIT else WARN, margin)


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
            # A .ptd (a program's external weights) is data, sized whole beside its .pte.
            out.append((p, not any_file and p.suffix != ".ptd"))
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


def _size_one(
    path: Path,
    parse: bool,
    levels: tuple[int, ...],
    *,
    estimate: str,
    sha256: str | None,
    use_cache: bool,
    plan: SamplePlan,
) -> SizedFile:
    layout: PteLayout | None = None
    parts: list[tuple[int, int, str]] = []
    if parse:
        layout = read_pte(path)
        parts = [(p.offset, p.size, p.kind) for p in layout_parts(layout)]
    else:
        check_readable_file(path)
    m: Measurement = measure_file(
        path, parts=parts, levels=levels, estimate=estimate, sha256=sha256,
        use_cache=use_cache, plan=plan,
    )  # fmt: skip
    bd = build_breakdown(layout, m) if layout is not None else None
    return SizedFile(
        path=path,
        raw_bytes=m.raw_bytes,
        download_bytes=m.gzip_bytes(PLAY_LEVEL),
        level9_bytes=m.gzip_bytes(ANALYZER_LEVEL) if ANALYZER_LEVEL in m.levels else None,
        kind="pte" if layout is not None else "file",
        layout=layout,
        breakdown=bd,
        estimate=m.estimate,
        error_bound=m.bound(PLAY_LEVEL),
        level9_error_bound=m.bound(ANALYZER_LEVEL),
        cached=m.cached,
        deflated_bytes=m.deflated_bytes,
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
    estimate: str = "exact",
    digests: Mapping[Path, str] | None = None,
    use_cache: bool = True,
    plan: SamplePlan = DEFAULT_PLAN,
) -> SizeReport:
    """Measure `paths` together and judge them against the chosen limits and budget.

    Files given directly must be .pte programs unless `any_file`; directories are summed
    recursively, parsing the .pte files found in them. `extra_bytes` (the rest of the app,
    e.g. "12MB") is added as-is to both the raw and the download totals. `budget_source` says
    where the budget came from (the flag, or etdeploy.toml) in its verdict.

    `estimate` is "exact" (every byte deflated) or "sample" (sample.py, with a bound; download
    verdicts judged at its top). `digests` maps a path as given to its sha256 when the caller
    knows it, so a file measured before is neither deflated nor read (cache.py);
    `use_cache=False` measures afresh and stores nothing.
    """
    if not paths:
        raise UsageError("no files to size", "pass a .pte, a directory, or --any-file FILE")
    table = dict(limits) if limits is not None else default_limits()
    chosen = select_limits(table, store, deliveries)
    extra = parse_size(extra_bytes, what="--extra")
    lv = tuple(dict.fromkeys((PLAY_LEVEL, *levels)))
    if budget_measure not in (DOWNLOAD, RAW):
        raise UsageError(f"budget measure {budget_measure!r}", "use download or raw")

    notes: list[str] = []
    files = _size_files(
        paths, any_file, lv, notes, estimate=estimate, digests=digests, use_cache=use_cache,
        plan=plan,
    )  # fmt: skip
    raw = sum(f.raw_bytes for f in files) + extra
    download = sum(f.download_bytes for f in files) + extra
    level9 = sum(f.level9_bytes or 0 for f in files) + extra if ANALYZER_LEVEL in lv else None
    # Each file's bound holds on its own; summed, the total's bound holds whatever their
    # errors' signs (a wider bound than adding them in quadrature, on the safe side).
    uncertainty = sum(f.download_uncertainty_bytes for f in files)
    verdicts = [judge(limit, raw, download, uncertainty) for limit in chosen]
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
        verdicts.append(judge(budget_limit, raw, download, uncertainty))
    notes.extend(_total_notes(files, extra, uncertainty, chosen))
    return SizeReport(
        files=tuple(files),
        extra_bytes=extra,
        raw_bytes=raw,
        download_bytes=download,
        level9_bytes=level9,
        verdicts=tuple(verdicts),
        limits=table,
        notes=tuple(dict.fromkeys(notes)),
        download_uncertainty_bytes=uncertainty,
    )


def _size_files(
    paths: Sequence[str | os.PathLike[str]],
    any_file: bool,
    levels: tuple[int, ...],
    notes: list[str],
    *,
    estimate: str,
    digests: Mapping[Path, str] | None,
    use_cache: bool,
    plan: SamplePlan,
) -> list[SizedFile]:
    """Each file given or found in a directory given, once (a file given twice is noted)."""
    files: list[SizedFile] = []
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
        digest = digests.get(path) if digests else None
        files.append(
            _size_one(
                path, parse, levels, estimate=estimate, sha256=digest, use_cache=use_cache,
                plan=plan,
            )
        )  # fmt: skip
    if not files:
        raise UsageError("the directories given hold no files", "pass a .pte or a file")
    return files


def _total_notes(
    files: Sequence[SizedFile], extra: int, uncertainty: int, chosen: Iterable[Limit]
) -> list[str]:
    """What a reader of the totals should know: how files and --extra add up, how far a
    sampled figure may be off, and the chosen limits' caveats."""
    notes: list[str] = []
    if len(files) > 1:
        notes.append(
            f"download size sums each file's own gzip ({len(files)} files), as Play gzips each "
            "APK; files inside one APK compress a little differently"
        )
    if extra:
        notes.append(f"--extra {format_bytes(extra)} is added as-is to raw and download totals")
    sampled = [f for f in files if f.estimate != EXACT]
    if sampled:
        share = sum(f.deflated_bytes or 0 for f in sampled) / max(
            1, sum(f.raw_bytes for f in sampled)
        )
        notes.append(
            f"download sizes sampled ({share:.1%} of the bytes deflated), within "
            f"±{format_bytes(uncertainty)}; download verdicts are judged at the top of that "
            "bound; measure exactly (the default) before a release"
        )
    for limit in chosen:
        if limit.note:
            notes.append(limit_note(limit))
    return notes


def limit_note(limit: Limit) -> str:
    """A limit's caveat as the report's notes carry it: "Play base module: ..."."""
    return f"{limit.label}: {limit.note}"


class VerdictDocument(TypedDict):
    """One limit's verdict as the JSON reports (sizecheck --json, a run's size block)
    carry it; sizes in bytes, limits decimal."""

    key: str  # "play.base", "appstore.app", ..., "budget"
    store: str  # "play" | "appstore" | "budget"
    label: str  # "Play base module"
    limit_bytes: int
    inclusive: bool  # whether exactly limit_bytes fits (App Store app: no)
    measure: str  # "download" | "raw": which total is judged
    severity: str  # "limit" | "conditional" | "warning"
    measured_bytes: int
    uncertainty_bytes: int  # a sampled download's bound; judged at its top
    headroom_bytes: int  # bytes that could be added and still fit; < 0 over
    excess_bytes: int  # bytes to cut to fit; 0 when it fits
    status: str  # "fits" | "over" | "warning"
    text: str  # "fits, 487.2 MB headroom" / "over by 1.20 MB"
    source: str  # where the figure was read (URL) or set
    read_on: str  # the date it was read; "" for a budget
    note: str | None


def verdict_to_json(v: Verdict) -> VerdictDocument:
    """One verdict for JSON: the limit (key, label, bytes, what it measures, source, date read),
    the measured bytes, the bound of a sampled estimate (0 when exact), status, signed
    headroom (negative when over), excess (0 when it fits) and the sentence the table shows.
    Headroom and excess are at the top of a sampled estimate's bound."""
    return {
        "key": v.limit.key,
        "store": v.limit.store,
        "label": v.limit.label,
        "limit_bytes": v.limit.bytes,
        "inclusive": v.limit.inclusive,
        "measure": v.limit.measure,
        "severity": v.limit.severity,
        "measured_bytes": v.measured_bytes,
        "uncertainty_bytes": v.uncertainty_bytes,
        "headroom_bytes": v.headroom_bytes,
        "excess_bytes": v.excess_bytes,
        "status": v.status,
        "text": v.describe(),
        "source": v.limit.source,
        "read_on": v.limit.read_on,
        "note": v.limit.note,
    }


def _verdict_object(v: Verdict) -> JsonObject:
    """verdict_to_json as the JSON object it is (each of its values a str, int, bool or None)."""
    return {
        key: value
        for key, value in verdict_to_json(v).items()
        if value is None or isinstance(value, str | int)
    }


def _breakdown_json(b: Breakdown, top: int | None) -> JsonObject:
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


def _layout_json(layout: PteLayout) -> JsonObject:
    def value(v: MethodValue) -> JsonObject:
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
) -> JsonObject:
    """The machine-readable report, schema "etdeploy.sizecheck/1"; `config_path` is the
    etdeploy.toml whose [sizecheck] and [limits] applied, if any."""
    return {
        "schema": SCHEMA,
        "estimate": {
            "download": f"gzip level {PLAY_LEVEL} (zlib memLevel {BUNDLETOOL_MEM_LEVEL}), "
            f"as bundletool computes it, {GZIP_FRAMING_BYTES} bytes of gzip framing per file",
            "level9": "gzip level 9, as Android Studio's APK Analyzer computes it",
            "units": "bytes; limits in decimal MB/GB",
            "method": report.estimate_label,
        },
        "files": [
            {
                "path": str(f.path),
                "kind": f.kind,
                "raw_bytes": f.raw_bytes,
                "download_bytes": f.download_bytes,
                "level9_bytes": f.level9_bytes,
                "estimate": f.estimate_label,
                "error_bound": f.error_bound,
                "level9_error_bound": f.level9_error_bound if f.level9_bytes is not None else None,
                "download_uncertainty_bytes": f.download_uncertainty_bytes,
                "deflated_bytes": f.deflated_bytes,
                "cached": f.cached,
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
            "download_uncertainty_bytes": report.download_uncertainty_bytes,
        },
        "verdicts": [_verdict_object(v) for v in report.verdicts],
        "failed": report.failed,
        "config": str(config_path) if config_path else None,
        "notes": list(report.notes),
    }

"""`etdeploy farm merge`: one farm's results from the folders of its shards or hosts.

Each CI worker (or host) runs a shard of the matrix into its own OUT; merge reads
them all and writes what one unsharded run would have written: OUT/farm.json,
OUT/results.jsonl and a JSON copy where asked (the command line writes the JUnit
and HTML reports from the MergedReport returned).

- A source is a shard's OUT folder (its results.jsonl, the log every finished job
  is appended to, and its farm.json, which names the jobs the shard planned), or
  one of those files on its own (a CI artefact may keep only farm.json).
- A job found in several sources (a shard run twice, a job rerun on another host)
  is one job: the result that started last is kept, and the merge says which
  were dropped. Within one results.jsonl the last line of a job is its result
  (`--resume --retry-errors` appends the rerun after the error it replaces).
- A planned job without a result is "not run": listed in farm.json, on the
  console, in the HTML report and as a skipped JUnit testcase, with the shard
  that should have run it. The plan is the union of the sources' farm.json
  matrices; with the spec (`--spec`) it is the spec's whole matrix, so a shard
  that never reported still shows up as jobs not run.
- Cells that cannot run (skipped by every shard) are listed once as skipped:
  the spec's with `--spec`, else those the sources' farm.json name.

Nothing here prints: problems worth a line go into MergeOutcome.warnings.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from etdeploy.atomic import atomic_write, write_json
from etdeploy.errors import EXIT_INFRA, EXIT_OK, UsageError
from etdeploy.farm.reports import FARM_DOC_NAME, exit_code, skipped_entries
from etdeploy.farm.results import result_key, timestamp
from etdeploy.farm.spec import job_key
from etdeploy.farm.store import RESULTS_NAME, select_shard, shard_of
from etdeploy.jsonvalue import JsonObject, as_object, read_array, read_int, read_object, read_str
from etdeploy.results import (
    FARM_SCHEMA_ID,
    compare_to_baseline,
    farm_document,
    load_results,
    validate_farm,
)
from etdeploy.results import job_key as report_key
from etdeploy.results.jobs import JobKey, NotRun
from etdeploy.results.result import RunResult

if TYPE_CHECKING:
    from etdeploy.farm.spec import FarmSpec
    from etdeploy.results.baseline import Regression

# A planned job as farm.json's matrix spells it (etdeploy.results.JobKey.to_json).
PlannedJob = dict[str, str | None]


@dataclass(frozen=True)
class ShardSource:
    """What one source holds: its results in log order, and its farm document
    (None when the shard left none: it was killed before writing reports)."""

    path: Path
    results: tuple[RunResult, ...]
    document: JsonObject | None

    @property
    def shard(self) -> tuple[int, int] | None:
        shard = read_object(self.document or {}, "shard", FARM_DOC_NAME)
        index, count = read_int(shard, "index", None), read_int(shard, "count", None)
        return (index, count) if index is not None and count is not None else None

    @property
    def matrix(self) -> list[PlannedJob]:
        return _planned_jobs(self.document, "matrix")

    @property
    def skipped(self) -> list[NotRun]:
        return [NotRun.from_json(e, skipped=True) for e in _planned_jobs(self.document, "skipped")]


def _planned_jobs(document: JsonObject | None, key: str) -> list[PlannedJob]:
    """A farm document's list of job keys (its schema was validated: strings or null)."""
    entries = read_array(document or {}, key, FARM_DOC_NAME)
    return [
        {k: v if isinstance(v, str) else None for k, v in as_object(e, key).items()}
        for e in entries
    ]


@dataclass(frozen=True)
class Duplicate:
    """A job with results in several sources (or twice in one): which one was kept."""

    key: str
    kept: str  # the source of the kept result
    kept_started_at: str
    dropped: tuple[str, ...]

    def to_json(self) -> JsonObject:
        return {"key": self.key, "kept": self.kept, "kept_started_at": self.kept_started_at,
                "dropped": list(self.dropped)}  # fmt: skip


@dataclass
class MergeOutcome:
    """The merged farm: one result per job, in plan order, and what did not fit."""

    sources: list[ShardSource]
    matrix: list[PlannedJob]
    results: list[RunResult]
    not_run: list[PlannedJob]
    duplicates: list[Duplicate]
    started_at: str
    finished_at: str | None
    spec: str | None
    warnings: list[str] = field(default_factory=list)
    # Cells of the matrix that cannot run: not planned, never counted.
    skipped: list[NotRun] = field(default_factory=list)
    # How many shards the plan was split into, when the sources agree.
    shard_count: int | None = None

    @property
    def unrun(self) -> list[NotRun]:
        """The skipped cells, then the planned jobs without a result, each with
        why: what the reports list beside the results."""
        missing = []
        for planned in self.not_run:
            key = JobKey(str(planned["model"]), planned["backend"], planned["quantization"],
                         str(planned["device"]))  # fmt: skip
            if self.shard_count is not None and self.shard_count > 1:
                shard = shard_of(planned_key(planned), self.shard_count)
                reason = f"no result: shard {shard} of {self.shard_count} did not report it"
            else:
                reason = "no result: no source holds one for this job"
            missing.append(NotRun(key, reason))
        return [*self.skipped, *missing]

    @property
    def exit_code(self) -> int:
        """As a farm's (etdeploy.farm.exit_code), and 3 when jobs were not run and
        nothing worse happened: a lost shard must not pass a nightly run."""
        code = exit_code(self.results)
        return EXIT_INFRA if code == EXIT_OK and self.not_run else code


def planned_key(planned: PlannedJob) -> str:
    return job_key(
        str(planned["model"]), str(planned["backend"]), planned["quantization"],
        str(planned["device"]),
    )  # fmt: skip


def key_of(result: RunResult) -> str:
    """The farm key a result was recorded under, or the one its job block names
    (a result of `etdeploy run --json` has no farm block)."""
    recorded = result_key(result)
    if recorded is not None:
        return recorded
    k = report_key(result)
    return job_key(k.model, k.backend or "?", k.quantization, k.device)


def read_source(path: Path, warnings: list[str] | None = None) -> ShardSource:
    """A shard's OUT folder, its results.jsonl, or a farm.json; UsageError when it
    is none of them."""
    path = Path(path)
    notes = warnings if warnings is not None else []
    log: Path | None
    doc_path: Path | None
    if path.is_dir():
        log, doc_path = path / RESULTS_NAME, path / FARM_DOC_NAME
        if not log.is_file() and not doc_path.is_file():
            raise UsageError(
                f"{path} holds no farm results (no {RESULTS_NAME}, no {FARM_DOC_NAME})",
                "give the --out folder of each `etdeploy farm run`",
            )
    elif path.is_file():
        is_log = path.suffix.lower() in (".jsonl", ".ndjson")
        log, doc_path = (path, None) if is_log else (None, path)
    else:
        raise UsageError(f"no such results folder or file: {path}", "check the path")

    document = _farm_document(doc_path) if doc_path is not None and doc_path.is_file() else None
    if log is not None and log.is_file():
        # The log's last line of a job supersedes its earlier ones (a rerun).
        latest = {key_of(r): r for r in load_results(log, on_warning=notes.append)}
        results = list(latest.values())
    elif doc_path is not None:
        results = load_results(doc_path)
    else:  # pragma: no cover - ruled out above
        results = []
    return ShardSource(path, tuple(results), document)


def _farm_document(path: Path) -> JsonObject | None:
    """A farm document (its matrix and shard); None for a file of bare results."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(
            f"cannot read {path}: {exc}", "give a farm.json written by etdeploy"
        ) from None
    if isinstance(doc, dict) and doc.get("schema") == FARM_SCHEMA_ID:
        try:
            validate_farm(doc)
        except UsageError as exc:
            raise UsageError(f"{path}: {exc.message}", exc.hint) from None
        return doc
    return None


def merge_sources(paths: Sequence[Path], *, spec: FarmSpec | None = None) -> MergeOutcome:
    """Read every source and merge them (see the module docstring)."""
    if not paths:
        raise UsageError("nothing to merge", "give the --out folders of the shards")
    warnings: list[str] = []
    sources = [read_source(Path(p), warnings) for p in paths]
    return merge(sources, spec=spec, warnings=warnings)


def merge(
    sources: Sequence[ShardSource],
    *,
    spec: FarmSpec | None = None,
    warnings: list[str] | None = None,
) -> MergeOutcome:
    notes = list(warnings or [])
    for source in sources:
        if source.document is None and source.path.is_dir():
            notes.append(
                f"{source.path} has no {FARM_DOC_NAME}: the shard did not finish"
                + ("" if spec is not None else
                   "; the jobs it planned are unknown, pass --spec to list those it did not run")
            )  # fmt: skip
    matrix = _plan(sources, spec, notes)
    planned_keys = [planned_key(p) for p in matrix]

    # Every result by key; the last to start wins, a tie goes to the later source.
    candidates: dict[str, list[tuple[str, int, int, RunResult, str]]] = {}
    for s, source in enumerate(sources):
        for line, result in enumerate(source.results):
            candidates.setdefault(key_of(result), []).append(
                (result.started_at, s, line, result, str(source.path))
            )
    chosen: dict[str, RunResult] = {}
    duplicates: list[Duplicate] = []
    for key, found in candidates.items():
        found.sort(key=lambda c: c[:3])
        *older, latest = found
        chosen[key] = latest[3]
        if older:
            duplicates.append(Duplicate(key, latest[4], latest[0], tuple(c[4] for c in older)))

    results = [chosen[k] for k in planned_keys if k in chosen]
    extra = [k for k in candidates if k not in set(planned_keys)]
    if extra and (spec is not None or any(s.document for s in sources)):
        notes.append(
            f"{len(extra)} result(s) belong to no planned job (e.g. {extra[0]}); they are kept"
        )
    results += [chosen[k] for k in extra]
    not_run = [p for p, k in zip(matrix, planned_keys, strict=True) if k not in chosen]

    documents = [s.document for s in sources if s.document]
    starts = [str(d["started_at"]) for d in documents]
    starts += [r.started_at for r in results]
    ends = [read_str(s.document, "finished_at", None) if s.document else None for s in sources]
    specs = sorted({str(d["spec"]) for d in documents if d.get("spec")})
    if len(specs) > 1:
        notes.append(f"the shards ran different spec files: {', '.join(specs)}")

    if spec is not None:
        skipped = skipped_entries(spec.skipped)
    else:
        seen: dict[JobKey, NotRun] = {}
        for source in sources:
            for cell in source.skipped:
                seen.setdefault(cell.key, cell)
        skipped = list(seen.values())
    counts = {s.shard[1] for s in sources if s.shard is not None}

    return MergeOutcome(
        sources=list(sources),
        matrix=matrix,
        results=results,
        not_run=not_run,
        duplicates=duplicates,
        started_at=min(starts) if starts else timestamp(),
        # A shard still running (or killed) has no finish time; nor has the whole.
        finished_at=None if not ends or None in ends else max(str(e) for e in ends),
        spec=str(spec.path) if spec is not None else (specs[0] if len(specs) == 1 else None),
        warnings=notes,
        skipped=skipped,
        shard_count=counts.pop() if len(counts) == 1 else None,
    )


def _plan(
    sources: Sequence[ShardSource], spec: FarmSpec | None, notes: list[str]
) -> list[PlannedJob]:
    """The jobs the farm planned: the spec's matrix, else the union of the
    sources' matrices in the order first seen."""
    shards = [s.shard for s in sources if s.shard is not None]
    counts = sorted({count for _index, count in shards})
    if len(counts) > 1:
        notes.append(f"the sources were split into different shard counts: {counts}")
    indices = [index for index, _count in shards]
    seen_twice = sorted({i for i in indices if indices.count(i) > 1})
    if seen_twice:
        notes.append(
            f"shard(s) {seen_twice} given more than once; the latest result of each job is kept"
        )
    if spec is not None:
        if len(counts) == 1:
            # The spec may have changed since: say so when a shard's plan disagrees.
            for source in sources:
                if source.shard is None or not source.matrix:
                    continue
                expected = {j.key for j in select_shard(spec.jobs, *source.shard)}
                if {planned_key(p) for p in source.matrix} != expected:
                    notes.append(
                        f"{source.path} planned other jobs than {spec.path.name} gives its shard"
                    )
        return [job.key_json() for job in spec.jobs]
    if len(counts) == 1:
        missing = sorted(set(range(counts[0])) - set(indices))
        if missing:
            notes.append(
                f"shard(s) {missing} of {counts[0]} are missing; pass --spec to list their jobs as not run"
            )
    plan: dict[str, PlannedJob] = {}
    for source in sources:
        for planned in source.matrix:
            plan.setdefault(planned_key(planned), dict(planned))
    return list(plan.values())


def merged_document(outcome: MergeOutcome) -> JsonObject:
    """The etdeploy.farm/1 document of the merge, with a "merge" block saying
    where the results came from."""
    doc = farm_document(
        outcome.results,
        started_at=outcome.started_at,
        finished_at=outcome.finished_at,
        matrix=outcome.matrix,
        not_run=outcome.unrun,
    )
    if outcome.spec is not None:
        doc["spec"] = outcome.spec
    doc["merge"] = {
        "sources": [
            {"path": str(s.path), "shard": {"index": s.shard[0], "count": s.shard[1]} if s.shard else None,
             "results": len(s.results)}
            for s in outcome.sources
        ],
        "not_run": [{**planned} for planned in outcome.not_run],
        "duplicates": [d.to_json() for d in outcome.duplicates],
        "warnings": [*outcome.warnings],
    }  # fmt: skip
    return doc


@dataclass(frozen=True)
class MergedReport:
    """What the merge's reports say beside its results: the regressions against the
    baseline, and the baseline run read (None without one)."""

    regressions: list[Regression]
    baseline: list[RunResult] | None


def write_merged(
    outcome: MergeOutcome,
    out_dir: Path,
    *,
    json_path: Path | None = None,
    baseline_path: Path | None = None,
    memory_growth: float | None = None,
) -> MergedReport:
    """OUT/farm.json and OUT/results.jsonl (so a merge can be merged again, or be a
    baseline), and a copy of farm.json at `json_path`; returns the regressions against
    the baseline (memory growing more than `memory_growth`, the spec's share,
    regresses). The JUnit and HTML reports are the command line's to write."""
    out_dir = Path(out_dir)
    for source in outcome.sources:
        if source.path.resolve() == out_dir.resolve():
            raise UsageError(f"--out {out_dir} is one of the sources", "merge into a new folder")
    baseline = load_results(baseline_path) if baseline_path is not None else None
    growth = {} if memory_growth is None else {"memory_growth": memory_growth}
    regressions = (
        compare_to_baseline(outcome.results, baseline, **growth) if baseline is not None else []
    )
    doc = merged_document(outcome)
    lines = "".join(json.dumps(r.to_json()) + "\n" for r in outcome.results)
    atomic_write(out_dir / RESULTS_NAME, lines.encode("utf-8"))
    write_json(doc, out_dir / FARM_DOC_NAME)
    if json_path is not None:
        write_json(doc, json_path)
    return MergedReport(regressions, baseline)

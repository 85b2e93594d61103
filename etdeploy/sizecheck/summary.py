"""Which limits to check, from flags over etdeploy.toml over defaults, and the size verdict
that `etdeploy run` and `etdeploy farm` put in their results.

etdeploy.toml:

    [sizecheck]
    store = "all"                   # play | appstore | all
    deliveries = ["base", "app"]    # default: Play base module and App Store app
    budget = "150MB"                # the team's own limit on the download size
    extra = "12MB"                  # the rest of the app, added to the .pte
    estimate = "exact"              # exact | sample (needs the key in config.py's schema)

    [limits]
    "play.base" = "200MB"           # replaces a figure of limits.py

A bad value in the file is one UsageError (exit 2) naming the file and the key, e.g.
`etdeploy.toml: sizecheck.deliveries: 'sideload' is not a delivery`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

from etdeploy.config import CONFIG_NAME, Config
from etdeploy.errors import UsageError
from etdeploy.files import check_readable_file
from etdeploy.jsonvalue import JsonValue
from etdeploy.sizecheck.cache import ESTIMATES
from etdeploy.sizecheck.check import SizeReport, VerdictDocument, check_size, verdict_to_json
from etdeploy.sizecheck.compress import (
    ANALYZER_LEVEL,
    BUNDLETOOL_MEM_LEVEL,
    GZIP_FRAMING_BYTES,
    PLAY_LEVEL,
)
from etdeploy.sizecheck.limits import (
    DEFAULT_DELIVERY,
    DELIVERIES,
    DOWNLOAD,
    STORES,
    Limit,
    apply_overrides,
    default_limits,
    select_limits,
    stores_for,
)
from etdeploy.units import parse_size

SUMMARY_SCHEMA = "etdeploy.size-summary/1"


@dataclass(frozen=True)
class Settings:
    """What one size check judges against, every default filled in."""

    store: str  # play | appstore | all
    deliveries: tuple[str, ...]  # never empty
    budget_bytes: int | None
    budget_source: str  # "--budget", or the file and key it came from
    extra_bytes: int
    limits: dict[str, Limit]  # the built-in table with [limits] applied
    config_path: Path | None
    estimate: str = "exact"  # exact | sample: how download sizes are measured

    def check(
        self,
        paths: Sequence[Path],
        *,
        levels: Sequence[int] = (PLAY_LEVEL, ANALYZER_LEVEL),
        any_file: bool = False,
        budget_measure: str = DOWNLOAD,
        digests: Mapping[Path, str] | None = None,
        use_cache: bool = True,
    ) -> SizeReport:
        """check_size of `paths` against these settings; the keywords are check_size's."""
        return check_size(
            paths,
            store=self.store,
            deliveries=self.deliveries,
            budget=self.budget_bytes,
            budget_source=self.budget_source,
            extra_bytes=self.extra_bytes,
            limits=self.limits,
            estimate=self.estimate,
            levels=levels,
            any_file=any_file,
            budget_measure=budget_measure,
            digests=digests,
            use_cache=use_cache,
        )


@dataclass(frozen=True)
class _FileSettings:
    """etdeploy.toml's [sizecheck], checked: what each key says, None where absent."""

    label: str  # the file's name, in every error about it
    store: str | None
    deliveries: list[str] | None
    budget_bytes: int | None
    extra_bytes: int
    estimate: str


def _bad(label: str, key: str, message: str, hint: str) -> UsageError:
    return UsageError(f"{label}: sizecheck.{key}: {message}", hint)


def _file_settings(config: Config) -> _FileSettings:
    """The [sizecheck] section checked whole, even where a flag overrides a value: a typo
    in it should not wait for the day the flag is left off."""
    label = config.path.name if config.path else CONFIG_NAME
    section = config.sizecheck

    def bad(key: str, message: str, hint: str) -> UsageError:
        return _bad(label, key, message, hint)

    file_store = section.get("store")
    if file_store is not None and file_store not in (*STORES, "all"):
        raise bad("store", f"{file_store!r} is not a store", "use play, appstore or all")
    listed = section.get("deliveries")
    if listed is not None:
        if not isinstance(listed, list) or not all(isinstance(d, str) for d in listed):
            raise bad("deliveries", f"expected a list of names, got {listed!r}", 'e.g. ["base"]')
        for name in listed:
            if name not in DELIVERIES:
                raise bad(
                    "deliveries",
                    f"{name!r} is not a delivery",
                    f"use one of: {', '.join(DELIVERIES)}",
                )

    def size(key: str, value: JsonValue) -> int:
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise bad(key, f"expected a size, got {value!r}", 'e.g. "150MB" or bytes')
        return parse_size(value, what=f"{label}: sizecheck.{key}")

    budget = section.get("budget")
    file_budget = size("budget", budget) if budget is not None else None
    file_extra = size("extra", section.get("extra", 0))
    file_estimate = section.get("estimate", "exact")
    if not isinstance(file_estimate, str) or file_estimate not in ESTIMATES:
        raise bad("estimate", f"{file_estimate!r} is not an estimate", 'use "exact" or "sample"')
    deliveries = [str(d) for d in listed] if isinstance(listed, list) else None
    store = str(file_store) if file_store is not None else None
    return _FileSettings(label, store, deliveries, file_budget, file_extra, file_estimate)


def resolve_settings(
    config: Config | None = None,
    *,
    store: str | None = None,
    deliveries: Sequence[str] | None = None,
    budget: str | int | None = None,
    extra: str | int | None = None,
    estimate: str | None = None,
) -> Settings:
    """Flags (the keyword arguments; None or empty when not given) over the config's
    [sizecheck] and [limits] over the built-in defaults.

    When --store is given and the deliveries come from the file, only the file's deliveries
    of that store are kept; when --delivery is given without --store, every store is allowed.
    """
    config = config or Config()
    in_file = _file_settings(config)
    if estimate is not None and estimate not in ESTIMATES:
        raise UsageError(
            f"--estimate {estimate!r}: not an estimate",
            "use --estimate exact (every byte, the default) or --estimate sample (multi-GB files)",
        )
    if store is not None:
        chosen_store = store
    elif in_file.store is not None and not deliveries:
        chosen_store = in_file.store
    else:
        chosen_store = "all"
    chosen = _chosen_deliveries(in_file, deliveries, store, chosen_store)

    budget_bytes, budget_source = in_file.budget_bytes, f"{in_file.label} [sizecheck] budget"
    if budget is not None:
        budget_bytes, budget_source = parse_size(budget, what="--budget"), "--budget"
    extra_bytes = parse_size(extra, what="--extra") if extra is not None else in_file.extra_bytes

    table = default_limits()
    if config.limits:
        try:
            table = apply_overrides(table, config.limits)
        except UsageError as exc:  # already names limits.<key>; add the file
            raise UsageError(f"{in_file.label}: {exc.message}", exc.hint) from None
    select_limits(table, chosen_store, chosen)  # --delivery names and their stores

    return Settings(
        store=chosen_store,
        deliveries=tuple(chosen),
        budget_bytes=budget_bytes,
        budget_source=budget_source,
        extra_bytes=extra_bytes,
        limits=table,
        config_path=config.path,
        estimate=estimate or in_file.estimate,
    )


def _chosen_deliveries(
    in_file: _FileSettings, deliveries: Sequence[str] | None, store: str | None, chosen_store: str
) -> list[str]:
    """--delivery, else the file's deliveries of the chosen stores, else each store's
    default; a file's delivery of a store the file itself excludes is an error."""
    stores = stores_for(chosen_store)
    if deliveries:
        return list(dict.fromkeys(deliveries))  # checked by select_limits
    chosen: list[str] = []
    if in_file.deliveries is not None:
        for name in in_file.deliveries:
            owner = DELIVERIES[name][0]
            if owner not in stores and store is None:
                raise _bad(
                    in_file.label,
                    "deliveries",
                    f"{name} is a {owner} delivery, but sizecheck.store is {chosen_store}",
                    f'set sizecheck.store = "{owner}" or "all"',
                )
        chosen = list(dict.fromkeys(d for d in in_file.deliveries if DELIVERIES[d][0] in stores))
    return chosen or [DEFAULT_DELIVERY[s] for s in stores]


class _SummaryRequired(TypedDict):
    schema: str  # "etdeploy.size-summary/1"
    path: str  # the .pte as given
    raw_bytes: int  # the program's size on disk (.pte + .ptd)
    download_bytes: int  # gzip -6 estimate of it (bundletool's figure)
    extra_bytes: int  # [sizecheck] extra: the rest of the app
    total_raw_bytes: int  # raw_bytes + extra_bytes: what raw limits judge
    total_download_bytes: int  # download_bytes + extra_bytes: what Play judges
    estimate: str  # how download_bytes is computed, after its method
    method: str  # "exact", or "sampled ±0.12%" (sample.py)
    error_bound: float  # relative half-width of a sampled figure; 0 exact
    download_uncertainty_bytes: int  # download_bytes * error_bound, rounded up
    cached: bool  # read from the cache of earlier measurements
    store: str  # "play" | "appstore" | "all"
    deliveries: list[str]  # e.g. ["base", "app"]
    budget_bytes: int | None  # [sizecheck] budget, when set
    verdicts: list[VerdictDocument]  # per limit, in table order; the budget last
    passed: bool  # no verdict is "over" (a warning passes)
    config: str | None  # the etdeploy.toml applied, if any
    notes: list[str]  # caveats for a reader (e.g. older 200 MB figure)


class SizeSummaryDocument(_SummaryRequired, total=False):
    """The size verdict of a program as a run or farm result carries it (JSON-ready;
    all sizes in bytes, limits decimal)."""

    data_path: str  # its .ptd as given; absent without one


def summary_for_result(
    pte: str | os.PathLike[str],
    config: Config | None = None,
    *,
    sha256: str | None = None,
    estimate: str | None = None,
    data: str | os.PathLike[str] | None = None,
    data_sha256: str | None = None,
) -> SizeSummaryDocument:
    """The size verdict of one .pte (and its .ptd) for a run or farm result: the delivery
    set, budget, extra and limit overrides of `config` (the loaded etdeploy.toml,
    `etdeploy.config.load_config()`; None or an empty Config: Play base module and App
    Store app, no budget, no extra), the same verdicts `etdeploy sizecheck PTE` gives with
    that file and no flags.

    Torch-free. Only the level-6 deflate is measured (level 9 decides no verdict), in
    parallel chunks: milliseconds for a small program, about as long as `gzip -6` split
    over the cores for a multi-GB one, once per content: a program whose sha256 was measured
    before is read back from the cache (cache.py). Pass `sha256` when it is known (the
    pipeline has it from the build): then a warm call reads no byte of the file. Without it,
    an unchanged file is recognised by its stat, and a changed one is hashed.

    `estimate` ("exact" or "sample") overrides [sizecheck] estimate; exact is the default.

    `data` is the program's external data (.ptd, `build --external-weights`), shipped with
    it: both files are measured (each once per content; `data_sha256` as `sha256`), and the
    program's figures are their sums, as `etdeploy sizecheck model.pte model.ptd` judges
    them.

    Raises UsageError (exit 2) when `pte` is not a readable .pte file or etdeploy.toml has
    a bad [sizecheck] or [limits] value.
    """
    settings = resolve_settings(config, estimate=estimate)
    path = Path(pte)
    check_readable_file(path)  # a directory is a mistake here, never a folder to sum
    paths = [path]
    digests = {path: sha256} if sha256 else {}
    if data is not None:
        data_file = Path(data)
        check_readable_file(data_file)
        paths.append(data_file)
        if data_sha256:
            digests[data_file] = data_sha256
    report = settings.check(paths, levels=(PLAY_LEVEL,), digests=digests or None)
    files = report.files
    download = sum(f.download_bytes for f in files)
    summary: SizeSummaryDocument = {
        "schema": SUMMARY_SCHEMA,
        "path": str(path),
        "raw_bytes": sum(f.raw_bytes for f in files),
        "download_bytes": download,
        "extra_bytes": report.extra_bytes,
        "total_raw_bytes": report.raw_bytes,
        "total_download_bytes": report.download_bytes,
        "estimate": f"{report.estimate_label}: gzip level {PLAY_LEVEL} (zlib memLevel "
        f"{BUNDLETOOL_MEM_LEVEL}) as bundletool computes it, {GZIP_FRAMING_BYTES} bytes of gzip "
        "framing",
        "method": report.estimate_label,
        # One file: its own bound; a .pte and its .ptd: their summed bound over their sum.
        "error_bound": (
            files[0].error_bound
            if len(files) == 1
            else report.download_uncertainty_bytes / download
            if download
            else 0.0
        ),
        "download_uncertainty_bytes": report.download_uncertainty_bytes,
        "cached": all(f.cached for f in files),
        "store": settings.store,
        "deliveries": list(settings.deliveries),
        "budget_bytes": settings.budget_bytes,
        "verdicts": [verdict_to_json(v) for v in report.verdicts],
        "passed": not report.failed,
        "config": str(settings.config_path) if settings.config_path else None,
        "notes": list(report.notes),
    }
    if data is not None:
        summary["data_path"] = str(data)
    return summary

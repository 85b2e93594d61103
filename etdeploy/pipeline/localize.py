"""localize: when the device departs from eager, the operator where it starts.

On request (--localize, [run] localize = true, a farm job's `localize`), after
the verdict: a tapped sibling of the program (etdeploy.builder.tapped: the same
export, backend, quantization and partitioner, chosen intermediate values made
ordinary outputs) runs on the same device with the same runner, on the sample
that diverged most and --localize-samples more. Every tapped value comes back
like any output and is judged against the same node's eager value in the tapped
ExportedProgram (for a quantized build its quantized eager program, so expected
quantization error is not blamed), scale-aware (etdeploy.pipeline.taps).

It confirms before it blames: the tapped program's own outputs must reproduce
the divergence of the untapped one. Taps can change what a delegate computes
(a value it fused away must now be handed out); when the divergence disappears,
it says so and tries coarser taps (each module's output, then only values that
already leave a partition) before it reports the divergence as not localisable.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Sequence

import numpy as np

from etdeploy import numerics as metrics
from etdeploy.builder import BuildOptions
from etdeploy.builder.tap_plan import (
    DEFAULT_BUDGET_BYTES,
    FULL,
    GRANULARITIES,
    TapPlan,
    path_matches,
)
from etdeploy.builder.tapped import TappedBuild, build_tapped
from etdeploy.builder.tapped_manifest import TapInfo
from etdeploy.devices.base import ProgressCallback
from etdeploy.errors import EtdeployError, InputError, UsageError
from etdeploy.model.loader import load_model, parse_model_ref
from etdeploy.pipeline.deploy import Target
from etdeploy.pipeline.job import StatusCallback
from etdeploy.pipeline.localize_runs import LocalizeContext, Values, eager_values
from etdeploy.pipeline.operator_error import operator_errors
from etdeploy.pipeline.origin import blame, hint_for
from etdeploy.pipeline.origin import verdict as origin_verdict
from etdeploy.pipeline.plan import LocalizeRequest
from etdeploy.pipeline.taps import judge_sample, tap_metrics, tap_results, tap_tolerance
from etdeploy.pipeline.verify import Judged, is_quantized
from etdeploy.program import Program
from etdeploy.results.result_localization import (
    Amplifier,
    FirstDivergence,
    Localization,
    LocalizeAttempt,
    OperatorError,
    Origin,
    TappedProgram,
    TapResult,
    TapTolerance,
    describe_error,
    where,
)
from etdeploy.staged import Staged

_WHAT = {
    "ops": "every operator",
    "modules": "each module's output",
    "partitions": "values leaving each partition",
}


def check_localizable(request: LocalizeRequest, program: Program) -> None:
    """Before anything runs: a graph to tap, and the model the program came from."""
    if request.model is None:
        raise UsageError(
            "--localize needs MODEL: a --pte alone has no graph to tap",
            "name the model the .pte was built from: etdeploy run MODEL --pte FILE --localize",
        )
    if request.pte is not None and program.build_manifest is None:
        raise InputError(
            f"--localize cannot tell what {request.pte.name} was built from: it has no build "
            "manifest (.pte.json), so a tapped twin might be a different program",
            "run MODEL without --pte (etdeploy builds it), or keep the .pte.json that "
            "`etdeploy build` writes beside it",
        )
        # A MODEL that is not the one the .pte was built from is refused for every
        # run by build_program (its manifest's fingerprint), before this check.
    if request.module:
        _check_module(request.model, request.module)


def _check_module(model: str, pattern: str) -> None:
    """A module path the model has (its named submodules), before the run."""
    module = load_model(parse_model_ref(model)).module
    named = getattr(module, "named_modules", None)
    if named is None:  # a saved ExportedProgram: checked against its graph when tapped
        return
    paths = [name for name, _ in named() if name]
    if not any(path_matches(p, pattern) for p in paths):
        raise UsageError(
            f"--localize-module {pattern!r} matches no module of {model}",
            "module paths are: "
            + (", ".join(paths[:12]) or "none (the model has no submodules)")
            + (" ..." if len(paths) > 12 else ""),
        )


def build_options_for(request: LocalizeRequest, program: Program) -> BuildOptions:
    """The options the program was built with: the job's, or for --pte its manifest's."""
    if request.pte is None:
        # The run's options; its twin is built without external weights (as always).
        return dataclasses.replace(request.options, external_weights=False)
    manifest = program.build_manifest
    quant = manifest.quantization if manifest is not None else None
    calibration = quant.calibration if quant is not None else None
    dynamic = tuple(
        f"{name}:{dim}={low}..{high}"
        for name, dims in (manifest.dynamic if manifest is not None else {}).items()
        for dim, (low, high) in dims.items()
    )
    return BuildOptions(
        backend=manifest.backend if manifest is not None else request.options.backend,
        quantize=quant.mode if quant is not None else None,
        calibration=(calibration.sources or ()) if calibration is not None else (),
        random_calibration=calibration is not None and calibration.kind == "random",
        dynamic=dynamic,
        use_cache=request.options.use_cache,
    )


def localize_or_warning(
    request: LocalizeRequest,
    target: Target,
    program: Program,
    staged: Staged,
    judged: Judged,
    outputs: Sequence[Sequence[np.ndarray]],
    *,
    job_id: str,
    say: StatusCallback,
    progress: ProgressCallback | None = None,
) -> tuple[Localization | None, tuple[str, ...]]:
    """The stage as run_job calls it, after the verdict: a failure here (a tapped
    program that will not lower, a device gone) is a warning, never the loss of
    the verdict the run already reached."""
    try:
        found = localize(
            request, target, program, staged, judged, outputs,
            job_id=job_id, say=say, progress=progress,
        )  # fmt: skip
    except EtdeployError as exc:
        hint = f" ({exc.hint})" if exc.hint else ""
        return None, (f"--localize failed: {exc.message}{hint}",)
    return found, ()


def localize(
    request: LocalizeRequest,
    target: Target,
    program: Program,
    staged: Staged,
    judged: Judged,
    outputs: Sequence[Sequence[np.ndarray]],
    *,
    job_id: str,
    say: StatusCallback,
    progress: ProgressCallback | None = None,
) -> Localization:
    """The first operator where the device departs from eager, or why none is named."""
    started = time.perf_counter()
    quantized = is_quantized(request.options.quantize, program)
    assert judged.verdict.thresholds is not None
    tolerance = tap_tolerance(judged.verdict.thresholds, quantized)
    # Quantization's own cost (the accuracy budget) is not the device's: only the
    # lowering and device stages are a divergence taps can localise.
    diverged = any(not s.passed for s in judged.verdict.budget if s.stage != "quantization")
    wanted = staged.quantized if staged.quantized is not None else staged.references
    chosen = rank_samples(outputs, wanted)[: 1 + request.samples]
    context = LocalizeContext(
        request,
        target,
        program,
        staged,
        judged,
        chosen,
        job_id,
        say,
        progress,
        tolerance,
        diverged,
    )
    attempts, found = _attempts(context)
    conclusion = found.conclusion if found is not None else _not_localizable(attempts, request)
    return Localization(
        status=conclusion.status,
        reason=conclusion.reason,
        reference="quantized eager" if quantized else "float eager",
        samples=context.names,
        granularity=found.granularity if found is not None else None,
        attempts=tuple(attempts),
        tolerance=tolerance,
        taps=found.rows if found is not None else (),
        first_divergence=found.first if found is not None else None,
        program=found.program if found is not None else None,
        module=request.module,
        seconds=round(time.perf_counter() - started, 3),
        origin=conclusion.origin,
        amplifiers=conclusion.amplifiers,
        hint=conclusion.hint,
    )


@dataclasses.dataclass(frozen=True)
class _Conclusion:
    """What the taps say: a status, its one-line reason, and the origin when named."""

    status: str
    reason: str
    origin: Origin | None = None
    amplifiers: tuple[Amplifier, ...] = ()
    hint: str | None = None


@dataclasses.dataclass(frozen=True)
class _Found:
    """A tapped program that reproduced the divergence (or had none to reproduce),
    judged: every tap's row, the first divergence, and the conclusion."""

    granularity: str
    rows: tuple[TapResult, ...]
    first: FirstDivergence | None
    program: TappedProgram
    conclusion: _Conclusion


def _attempts(context: LocalizeContext) -> tuple[list[LocalizeAttempt], _Found | None]:
    """Tapped programs from the finest granularity to the coarsest until one is built,
    runs and reproduces the divergence; each attempt says what became of it."""
    request = context.request
    options = build_options_for(request, context.program)
    budget = request.budget_bytes if request.budget_bytes is not None else DEFAULT_BUDGET_BYTES
    attempts: list[LocalizeAttempt] = []
    finest: list[TapInfo] | None = None
    tried: dict[str, set[str]] = {}  # granularity -> the nodes its program tapped
    for granularity in GRANULARITIES:
        nodes: tuple[str, ...] = ()
        if granularity == "partitions":
            nodes = boundary_nodes(finest or [])
            if not nodes:
                attempts.append(
                    LocalizeAttempt(granularity, 0, None, "no partition map from a finer build")
                )
                continue
        plan = TapPlan(granularity, request.module, nodes, budget)
        context.say(f"building the tapped program ({_WHAT[granularity]})")
        try:
            tapped = _build(request, options, plan)
        except EtdeployError as exc:
            earlier = next((a for a in attempts if a.note == f"not built: {exc.message}"), None)
            note = (
                f"not built: the same error as {earlier.granularity}"
                if earlier is not None
                else f"not built: {exc.message}"
            )
            attempts.append(LocalizeAttempt(granularity, 0, None, note))
            continue
        taps = tapped.taps
        finest = finest or taps
        same = next((g for g, seen in tried.items() if seen == {t.node for t in taps}), None)
        if same is not None:
            attempts.append(
                LocalizeAttempt(
                    granularity, len(taps), None, f"the same taps as {same}: not run again"
                )
            )
            continue
        tried[granularity] = {t.node for t in taps}
        attempt, found = _run_tapped(context, tapped, granularity, budget)
        attempts.append(attempt)
        if found is not None:
            return attempts, found
    return attempts, None


def _run_tapped(
    context: LocalizeContext, tapped: TappedBuild, granularity: str, budget: int
) -> tuple[LocalizeAttempt, _Found | None]:
    """Run a tapped program on the device and, when it reproduces the divergence,
    judge each tap against eager (and each operator's own error)."""
    taps, tolerance, diverged = tapped.taps, context.tolerance, context.diverged
    chosen, names = context.chosen, context.names
    context.say(f"running the tapped program ({len(taps)} taps) on {context.target.device.name}")
    samples = [context.staged.samples[i] for i in chosen]
    eager = eager_values(tapped, samples, context.request.options.use_cache)
    got = context.run(tapped, eager)
    reproduced = context.reproduces(tapped, got, eager) if diverged else None
    if reproduced is False:
        return LocalizeAttempt(
            granularity, len(taps), False,
            "the tapped program's outputs pass the check the program failed, so these "
            "taps cannot show where it diverges (taps can change what a backend fuses; "
            "a .pte that is not what its export builds does not reproduce either)",
        ), None  # fmt: skip
    per_sample = {
        names[k]: judge_sample(
            taps,
            {t.node: tap_metrics(t, got[k][t.output_index], eager[k][t.output_index])
             for t in taps},
            tolerance,
        )
        for k in range(len(chosen))
    }  # fmt: skip
    own = _own_errors(tapped, samples, got, names, tolerance, context.request)
    rows, first = tap_results(taps, per_sample, own)
    attempt = LocalizeAttempt(
        granularity, len(taps), reproduced,
        "reproduced the divergence"
        if reproduced
        else "nothing to reproduce: the device matched its reference",
    )  # fmt: skip
    conclusion = _conclusion(rows, first, diverged, context.judged, tolerance, context.request)
    program = _program_info(tapped, context.program, taps, budget)
    return attempt, _Found(granularity, tuple(rows), first, program, conclusion)


def _not_localizable(attempts: Sequence[LocalizeAttempt], request: LocalizeRequest) -> _Conclusion:
    """Why no operator is named when no tapped program was built, or none reproduced."""
    if not any(a.taps for a in attempts):
        # Each error once: a later granularity failing the same way, or left
        # without the finer build's partition map, adds nothing to it.
        failures = [a.note for a in attempts if a.note.startswith("not built: ")]
        notes = "; ".join(
            dict.fromkeys(
                n.removeprefix("not built: ")
                for n in failures or [a.note for a in attempts]
                if "the same error as" not in n
            )
        )
        granularities = ", ".join(a.granularity for a in attempts)
        return _Conclusion(
            "not_localizable",
            f"no tapped program could be built (tried {granularities}): {notes}",
        )
    suspect = (
        f"; {request.pte.name} may not be what its export builds: a tapped twin built from "
        f"{request.model} does not reproduce its divergence"
        if request.pte is not None
        else ""
    )
    return _Conclusion(
        "not_localizable",
        "not localisable by taps: no tapped program tried "
        f"({', '.join(a.granularity for a in attempts)}) reproduced the divergence; the "
        "device's outputs still depart from eager" + suspect,
    )


def _own_errors(
    tapped: TappedBuild,
    samples: Sequence[tuple[np.ndarray, ...]],
    got: Values,
    names: Sequence[str],
    tolerance: TapTolerance,
    request: LocalizeRequest,
) -> dict[str, dict[str, OperatorError]]:
    """Each whole tapped operator's own error on the device, per sample name."""
    per_sample = operator_errors(
        tapped.reference_program, tapped.manifest.sha256, tapped.taps, samples, got,
        quant_steps=tolerance.quant_steps, use_cache=request.options.use_cache,
    )  # fmt: skip
    return dict(zip(names, per_sample, strict=True))


def _build(request: LocalizeRequest, options: BuildOptions, plan: TapPlan) -> TappedBuild:
    assert request.model is not None
    return build_tapped(request.model, options, plan)


def rank_samples(
    outputs: Sequence[Sequence[np.ndarray]], target: Sequence[Sequence[np.ndarray]]
) -> list[int]:
    """Sample positions, the most divergent first: by the lowest SQNR over its
    outputs (scale-aware), then by the largest absolute error."""

    def score(s: int) -> tuple[float, float]:
        found = [
            metrics.compare(a, e, metrics.Tolerance())
            for a, e in zip(outputs[s], target[s], strict=True)
        ]
        sqnr = min((f["sqnr_db"] for f in found), default=math.inf)
        worst = max((f["max_abs"] for f in found), default=0.0)
        return (sqnr, -worst)

    return sorted(range(len(outputs)), key=score)


def boundary_nodes(taps: Sequence[TapInfo]) -> tuple[str, ...]:
    """Values that leave their partition in the finest build: a CPU kernel's
    output, or a delegate's output that a tap in another partition (or the
    model's output) reads. Tapping these hands out nothing a delegate keeps."""
    consumers: dict[str, list[TapInfo]] = {}
    for tap in taps:
        for name in tap.inputs:
            consumers.setdefault(name, []).append(tap)
    chosen = []
    for tap in taps:
        readers = consumers.get(tap.node, [])
        home = (tap.partition, tap.delegate)
        if (
            tap.partition == "CPU"
            or not readers
            or any((r.partition, r.delegate) != home for r in readers)
        ):
            chosen.append(tap.node)
    return tuple(chosen)


def _conclusion(
    rows: Sequence[TapResult],
    first: FirstDivergence | None,
    diverged: bool,
    judged: Judged,
    tolerance: TapTolerance,
    request: LocalizeRequest,
) -> _Conclusion:
    """The status, the reason, and the origin of the Localization: from each
    operator's own error when it was measured, else from growth alone."""
    # Values carried into --localize-module's module that already depart: the
    # error starts before it, which only the carried-in check can say.
    before = any(r.context and r.status != "ok" for r in rows)
    found = None if before else blame(rows, diverged)
    if found is not None:
        status, reason = origin_verdict(found, diverged)
        return _Conclusion(status, reason, found.origin, found.amplifiers, hint_for(found))
    over = [r for r in rows if r.status != "ok"]
    if over and not diverged and _within_bounds(rows):
        return _Conclusion("clean", _allowed_rounding(over))
    return _Conclusion(*_verdict(rows, first, diverged, judged, tolerance, request.module))


def _within_bounds(rows: Sequence[TapResult]) -> bool:
    measured = [r.local for r in rows if r.local is not None and not r.context]
    return bool(measured) and not any(e.over_bound for e in measured)


def _allowed_rounding(over: Sequence[TapResult]) -> str:
    return (
        f"no operator departs from eager: each is within what float32 (or its quantization "
        f"grid) allows it given the device's own inputs; {len(over)} value(s) over the tap "
        f"tolerance, first {over[0].op} ({over[0].node}), only carry that allowed rounding, "
        "and the model's outputs pass"
    )


def _verdict(
    rows: Sequence[TapResult],
    first: FirstDivergence | None,
    diverged: bool,
    judged: Judged,
    tolerance: TapTolerance,
    module: str | None,
) -> tuple[str, str]:
    """The localisation's status and its one-line reason."""
    over = [r for r in rows if r.status != "ok"]
    if first is not None:
        came = (
            "from exact inputs"
            if first.carried_in == 0
            else f"{first.growth:.3g}x what its inputs carried in"
        )
        reason = f"the device departs from eager at {where(first)}: {describe_error(first.metrics)}, {came}"
        return "localized", reason + ("" if diverged else "; the model's outputs still pass")
    carried_into = [r for r in over if r.context]
    if carried_into and module:
        return "unexplained", (
            f"the values carried into {module} already depart from eager ({where(carried_into[0])}): "
            "the divergence starts before the module; localize without --localize-module"
        )
    if over:
        return "unexplained", (
            f"{len(over)} tapped value(s) are over tolerance, first {where(over[0])}, but none grew "
            f"more than {tolerance.growth:g}x past its inputs: the error starts where nothing is tapped"
            + ("" if diverged else "; the model's outputs pass")
        )
    if diverged:
        return "unexplained", (
            "every tapped value is within tolerance, yet the outputs diverge: the error starts "
            "after the last tap or in a value that is not tapped"
        )
    quantization_only = judged.verdict.failed_stage is not None
    return "clean", (
        f"every tap ({len(rows)}) is within tolerance; no operator departs from eager"
        + (
            "; the device matches the quantized program, what fails is quantization's own "
            "cost against the float model, which taps of the quantized program do not judge"
            if quantization_only
            else ""
        )
    )


def _program_info(
    tapped: TappedBuild, program: Program, taps: Sequence[TapInfo], budget: int
) -> TappedProgram:
    full = sum(1 for t in taps if t.reducer == FULL)
    return TappedProgram(
        sha256=tapped.manifest.sha256,
        size_bytes=tapped.manifest.size_bytes,
        untapped_size_bytes=program.size_bytes,
        full_taps=full,
        summary_taps=len(taps) - full,
        budget_bytes=budget,
        cached=tapped.cached,
        pte=str(tapped.pte),
        untapped=tapped.manifest.untapped,
        why_untapped=dict(tapped.manifest.why_untapped),
    )

"""A tapped sibling of a build: the same export, backend, quantization and
partitioner, with chosen intermediate values surfaced as extra outputs of the
program, so any runner returns them through any delegate.

ExecuTorch 1.5's intermediate_output_tap does the surgery
(executorch/devtools/intermediate_output_tap, read 2026-12-03 in the installed
1.5.1 wheel): `tap_intermediate_outputs_` wraps each chosen node's value in a
`tap.Tensor` placeholder appended to the outputs, which no partitioner claims;
after lowering, `strip_taps_` replaces each placeholder by its reducer (the
identity for FULL_TENSOR, a 13-value summary for STATS), so a delegate hands the
value out as one of its own outputs. A quantized build is tapped before PT2E
(as upstream's quantized XNNPACK test does), so the quantizer sees the same
graph and calibration and the tapped values are the quantized program's.

Next to the .pte the build keeps the tapped ExportedProgram that was lowered
(model.tapped.pt2): running it eagerly gives the expected value of every tap,
for a quantized build the quantized eager value. Cached by content like any
build: the key is the untapped build's key plus the tap plan.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import tempfile
import time
import warnings as warnings_module
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from etdeploy.builder.backends import Backend, get_backend
from etdeploy.builder.cached_build import cache_key, parse_dynamic, versions
from etdeploy.builder.calibration import calibration_batches, calibration_unchanged
from etdeploy.builder.export import export_model
from etdeploy.builder.manifest import manifest_path, write_json_atomic
from etdeploy.builder.manifest_records import (
    Calibration,
    JsonObject,
    ModelSource,
    Quantization,
)
from etdeploy.builder.options import BuildOptions
from etdeploy.builder.quantize import quantize
from etdeploy.builder.tap_plan import (
    FULL,
    STATS,
    TapPlan,
    ValueRange,
    assign_reducers,
    int_dims,
    named,
    select_nodes,
    short_op,
    tapped_inputs,
    value_bytes,
)
from etdeploy.builder.tapped_lower import (
    VIEW_LEFT_OUT,
    CannotHandOut,
    LoweredTaps,
    is_view,
    lower_tapped,
)
from etdeploy.builder.tapped_manifest import TapInfo, TappedManifest
from etdeploy.devices.lock import held_lock
from etdeploy.errors import ModelError
from etdeploy.model.loader import ModelRef, load_model, parse_model_ref
from etdeploy.paths import cache_dir

if TYPE_CHECKING:  # imported where torch and executorch are
    import torch
    from executorch.devtools.intermediate_output_tap import TapSpec
    from torch.export import ExportedProgram
    from torch.fx import Node

# Bumped whenever what a tapped build records changes.
TAP_REVISION = 4


@dataclass
class TappedBuild:
    pte: Path
    manifest: TappedManifest
    cached: bool
    seconds: float
    warnings: list[str] = field(default_factory=list)

    @property
    def taps(self) -> list[TapInfo]:
        return list(self.manifest.taps)

    @property
    def model_outputs(self) -> int:
        """How many of the program's outputs are the model's own (the rest are taps)."""
        return self.manifest.model_outputs

    @property
    def reference_program(self) -> Path:
        """The tapped ExportedProgram that was lowered (torch.export.save)."""
        return tapped_reference_path(self.pte)


def tapped_reference_path(pte: Path) -> Path:
    return pte.with_suffix(".pt2")  # model.tapped.pte -> model.tapped.pt2


def build_tapped(model: str, options: BuildOptions, plan: TapPlan) -> TappedBuild:
    """Build (or fetch from the cache) the tapped sibling of `build(model, options)`."""
    started = time.perf_counter()
    backend = get_backend(options.backend)
    ref = parse_model_ref(model)
    base = cache_key(ref, options, ref.fingerprint())
    key = hashlib.sha256(
        json.dumps(
            {"build": base, "plan": plan.key_fields(), "revision": TAP_REVISION}, sort_keys=True
        ).encode()
    ).hexdigest()
    entry = cache_dir("builds") / f"tapped-{key[:32]}"
    pte = entry / f"{ref.name}.tapped.pte"
    with held_lock(Path(str(entry) + ".lock"), -1):  # as build() locks its entries
        cached = _read_tapped_manifest(pte) if options.use_cache and pte.is_file() else None
        if cached is not None and calibration_unchanged(cached):
            return TappedBuild(pte, cached, True, time.perf_counter() - started)
        with warnings_module.catch_warnings():
            # torch.export and the lowering emit deprecation chatter on every call.
            warnings_module.simplefilter("ignore")
            try:
                built = _build_uncached(ref, options, backend, plan)
            except CannotHandOut as refused:
                # Tapped again without the views: they only rearrange a value
                # (no rounding of their own), and a delegate computes them inside.
                built = _build_uncached(ref, options, backend, plan, leave_out=refused.views)
        manifest = replace(built.manifest, cache_key=key, base_cache_key=base)
        tmp = Path(tempfile.mkdtemp(prefix=".building-", dir=entry.parent))
        try:
            (tmp / pte.name).write_bytes(built.program)
            tapped_reference_path(tmp / pte.name).write_bytes(built.reference)
            write_json_atomic(manifest_path(tmp / pte.name), manifest.to_json())
            if entry.exists():
                shutil.rmtree(entry)
            os.replace(tmp, entry)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return TappedBuild(pte, manifest, False, time.perf_counter() - started)


def _read_tapped_manifest(pte: Path) -> TappedManifest | None:
    path = manifest_path(pte)
    if not path.is_file() or not tapped_reference_path(pte).is_file():
        return None
    try:
        return TappedManifest.from_json(json.loads(path.read_text()))
    except (OSError, ValueError):  # ManifestError among them: built anew
        return None


@dataclass(frozen=True)
class _TappedFiles:
    """An uncached tapped build: its manifest, the program, and the tapped
    ExportedProgram's bytes (torch.export.save), the eager reference of every tap."""

    manifest: TappedManifest
    program: bytes
    reference: bytes


@dataclass(frozen=True)
class _Selection:
    """The nodes to tap, each with its reducer, and those left untapped and why."""

    chosen: list[Node]
    # Values carried into --localize-module's module (tap_plan.select_nodes).
    context: set[str]
    ranges: dict[object, ValueRange]  # the program's range constraints, by symbol
    reducers: dict[str, str | None]
    untapped: dict[str, str]
    # Views tapped: what to leave out when the delegate refuses to hand them out.
    views: dict[str, str]


def _select(
    exported: ExportedProgram, plan: TapPlan, leave_out: Mapping[str, str] | None
) -> _Selection:
    chosen, context = select_nodes(exported, plan)
    ranges = dict(exported.range_constraints)
    reducers = assign_reducers(chosen, plan.budget_bytes, ranges)
    untapped = {
        n.name: "of dynamic size, over --localize-budget"
        for n in chosen
        if reducers[n.name] is None
    }
    untapped.update(
        {n.name: (leave_out or {})[n.name] for n in chosen if n.name in (leave_out or {})}
    )
    for name in untapped:
        reducers[name] = None
    views = {n.name: VIEW_LEFT_OUT for n in chosen if n.name not in untapped and is_view(n)}
    chosen = [n for n in chosen if n.name not in untapped]
    if not chosen:
        raise ModelError(
            "every value to tap is of dynamic size and over --localize-budget",
            "raise --localize-budget, or narrow the taps with --localize-module",
        )
    return _Selection(chosen, context, ranges, reducers, untapped, views)


def _build_uncached(
    ref: ModelRef,
    options: BuildOptions,
    backend: Backend,
    plan: TapPlan,
    leave_out: Mapping[str, str] | None = None,
) -> _TappedFiles:
    """The tapped program and its record; `leave_out` names values not to tap, with
    the reason."""
    from executorch.devtools.intermediate_output_tap import (
        FULL_TENSOR,
        tap_intermediate_outputs_,
    )
    from executorch.devtools.intermediate_output_tap import (
        STATS as STATS_REDUCER,
    )

    spec = load_model(ref)
    if options.dynamic:
        spec.dynamic = parse_dynamic(options.dynamic)
    exported = export_model(spec, ref.source_files)
    model_outputs = len(exported.graph.output_node().args[0])
    selection = _select(exported, plan, leave_out)
    inputs = tapped_inputs(exported, {n.name for n in selection.chosen})
    full = {name for name, reducer in selection.reducers.items() if reducer == FULL}
    stats = {name for name, reducer in selection.reducers.items() if reducer == STATS}
    _, specs = tap_intermediate_outputs_(
        exported,
        [(named(full), FULL_TENSOR), (named(stats), STATS_REDUCER)],
    )
    calibration: JsonObject | None = None
    steps: dict[int, float] = {}
    if options.quantize:
        batches, calibration = calibration_batches(spec, options)
        program = quantize(exported, options.quantize, batches)
        steps = _tap_steps(program)
    else:
        _give_taps_values(exported)
        program = exported
    reference = _saved(program)
    lowered = lower_tapped(program, backend, selection.views)
    taps = _tap_infos(
        specs, selection, lowered, steps=steps, inputs=inputs, source_files=ref.source_files,
        full_reducer=FULL_TENSOR.name,
    )  # fmt: skip
    # The model's own values by the model's names (input_0, output_0, ... as lowered
    # when it gives none), each tap's as tap:NODE.
    in_names = list(spec.input_names or [])[: len(lowered.method.inputs)]
    out_names = list(spec.output_names or [])[:model_outputs]
    out_names += [f"output_{i}" for i in range(len(out_names), len(lowered.method.outputs))]
    for tap in taps:
        out_names[tap.output_index] = f"tap:{tap.node}"
    method = replace(
        lowered.method,
        inputs=tuple(
            replace(value, name=name)
            for value, name in zip(lowered.method.inputs, in_names, strict=False)
        )
        + lowered.method.inputs[len(in_names) :],
        outputs=tuple(
            replace(value, name=name)
            for value, name in zip(lowered.method.outputs, out_names, strict=True)
        ),
    )
    manifest = TappedManifest(
        model=ModelSource(ref.text, ref.kind, spec.name, ref.fingerprint()),
        versions=versions(),
        backend=backend.name,
        quantization=Quantization(
            options.quantize, Calibration.from_json(calibration) if calibration else None
        )
        if options.quantize
        else None,
        plan=plan.key_fields(),
        model_outputs=model_outputs,
        taps=tuple(taps),
        why_untapped=dict(selection.untapped),
        methods=(method,),
        delegation=lowered.delegation,
        reference=tapped_reference_path(Path(f"{ref.name}.tapped.pte")).name,
        size_bytes=len(lowered.program),
        sha256=hashlib.sha256(lowered.program).hexdigest(),
        built_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    )
    return _TappedFiles(manifest, lowered.program, reference)


def _tap_infos(
    specs: Sequence[TapSpec],
    selection: _Selection,
    lowered: LoweredTaps,
    *,
    steps: Mapping[int, float],
    inputs: Mapping[str, tuple[str, ...]],
    source_files: Sequence[Path],
    full_reducer: str,
) -> list[TapInfo]:
    """Each tap (the tap pass's TapSpecs) as the manifest records it: its node, where its
    value was computed (partition, delegate or CPU kernel) and the source line."""
    meta = {n.name: n for n in selection.chosen}
    same_as = {s.output_index: s.node_name for s in specs}
    merged = lowered.merged
    taps = []
    for tap in specs:
        node = meta[tap.node_name]
        val = node.meta["val"]
        partition, delegate, kernel = lowered.partitions[tap.output_index]
        source, code = user_source(tap.stack_trace, source_files)
        taps.append(
            TapInfo(
                node=tap.node_name,
                op=short_op(tap.op_target),
                target=tap.op_target,
                output_index=tap.output_index,
                reducer=FULL if tap.reducer_name == full_reducer else STATS,
                fields=tuple(tap.fields),
                shape=tuple(int_dims(val.shape)),
                dtype=str(val.dtype).removeprefix("torch."),
                nbytes=value_bytes(node, selection.ranges) or 0,
                inputs=inputs[tap.node_name],
                partition=partition,
                delegate=delegate,
                kernel=kernel,
                module=tap.module_path or None,
                module_class=tap.module_class,
                source=source,
                code=code,
                step=steps.get(tap.output_index),
                context=tap.node_name in selection.context,
                same_as=same_as[merged[tap.output_index]] if tap.output_index in merged else None,
            )
        )
    return taps


# -- taps through quantization and lowering -------------------------------------------------


def _give_taps_values(exported: ExportedProgram) -> None:
    """Each tap node's meta["val"] (what its reducer gives on the fake input),
    which the tap pass leaves out and torch.export.save requires."""
    from executorch.devtools.intermediate_output_tap import find_tap_nodes, get_reducer

    for tap in find_tap_nodes(exported.graph_module):
        if "val" in tap.meta:
            continue
        source = tap.args[0].meta["val"]
        # An exported graph's values are fake tensors, each naming its fake mode.
        mode = getattr(source, "fake_mode", None)
        assert mode is not None
        with mode:
            tap.meta["val"] = get_reducer(str(tap.args[1])).eager(source)


def _tap_steps(program: ExportedProgram) -> dict[int, float]:
    """Output index -> the step of the quantization grid a tapped value lies on
    (the per-tensor dequantize it is read from), in the converted program."""
    import torch

    dequantize = torch.ops.quantized_decomposed.dequantize_per_tensor.default
    steps: dict[int, float] = {}
    outputs = program.graph.output_node().args[0]
    for index, node in enumerate(outputs):
        if node.op != "call_function" or not node.args:
            continue
        source = node.args[0]
        if getattr(source, "target", None) == dequantize and isinstance(source.args[1], float):
            steps[index] = float(source.args[1])
    return steps


def _saved(program: ExportedProgram) -> bytes:
    import torch

    buffer = io.BytesIO()
    torch.export.save(program, buffer)
    return buffer.getvalue()


# -- naming -----------------------------------------------------------------------------------

_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in [^\n]*\n(?P<code>[^\n]*)')


def user_source(
    stack_trace: str | None, source_files: Sequence[Path]
) -> tuple[str | None, str | None]:
    """(file.py:LINE, the line's code) of the innermost frame in the model's own
    files; else the innermost frame outside torch."""
    if not stack_trace:
        return None, None
    frames = list(_FRAME.finditer(stack_trace))
    own = {str(Path(p).resolve()) for p in source_files}

    def resolved(path: str) -> str:
        try:
            return str(Path(path).resolve())
        except OSError:
            return path

    picked = next((f for f in reversed(frames) if resolved(f["file"]) in own), None)
    if picked is None:
        picked = next(
            (f for f in reversed(frames) if f"{os.sep}torch{os.sep}" not in f["file"]), None
        )
    if picked is None:
        return None, None
    return f"{Path(picked['file']).name}:{picked['line']}", picked["code"].strip() or None


# -- the expected values ---------------------------------------------------------------------


def load_reference(path: Path) -> torch.fx.GraphModule:
    """The tapped ExportedProgram, ready to run eagerly: its module is a graph (an
    unlifted ExportedProgram's module() is a GraphModule)."""
    # Registers tap.Tensor (its eager impl applies the reducer) and the
    # quantized_decomposed operators a quantized program calls.
    import executorch.devtools.intermediate_output_tap  # noqa: F401
    import torch
    import torchao.quantization.pt2e  # noqa: F401

    module = torch.export.load(str(path)).module()
    assert isinstance(module, torch.fx.GraphModule)
    return module

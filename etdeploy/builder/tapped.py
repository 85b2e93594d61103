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
import operator
import os
import re
import shutil
import tempfile
import time
import warnings as warnings_module
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import filelock

from etdeploy.builder import (
    BuildOptions,
    cache_key,
    calibration_batches,
    calibration_unchanged,
    parse_dynamic,
    versions,
)
from etdeploy.builder.manifest import manifest_path, write_json_atomic
from etdeploy.builder.tap_plan import (
    FULL,
    STATS,
    TapPlan,
    assign_reducers,
    int_dims,
    named,
    select_nodes,
    tapped_inputs,
    value_bytes,
)
from etdeploy.errors import ModelError
from etdeploy.model.loader import parse_model_ref
from etdeploy.paths import cache_dir

SCHEMA = "etdeploy.tapped/1"
# Bumped whenever what a tapped build records changes.
TAP_REVISION = 4


@dataclass(frozen=True)
class TapInfo:
    """One tapped value, as the tapped build's manifest records it."""

    node: str  # the FX node of the exported program
    op: str  # aten op, short: layer_norm
    target: str  # aten.layer_norm.default
    output_index: int  # in the tapped program's outputs
    reducer: str  # full | stats
    fields: tuple[str, ...]  # the STATS summary's values, in order
    shape: tuple[int, ...]  # of the tapped tensor (not of its summary)
    dtype: str
    nbytes: int
    # Tapped nodes this value is computed from (through untapped ones): what
    # its error is compared with. Placeholders (inputs, weights) carry none.
    inputs: tuple[str, ...]
    partition: str  # a delegate's name (XNNPACK) or CPU
    delegate: int | None = None  # which delegated subgraph, in program order
    kernel: str | None = None  # the CPU kernel, when not delegated
    module: str | None = None
    module_class: str | None = None
    source: str | None = None  # file.py:12, the innermost user frame
    code: str | None = None  # that line's text
    # Quantization step of the grid the value lies on (a dequantize's scale).
    step: float | None = None
    # Tapped only as a value carried into --localize-module's module: what its
    # first operator was given, never itself blamed (its own inputs are untapped).
    context: bool = False
    # Another tap carries the same value (this node is a copy the delegate drops,
    # or one of a quantized value's dequantized copies): handed out once, there.
    same_as: str | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TapInfo:
        values = dict(data)
        for name in ("fields", "shape", "inputs"):
            values[name] = tuple(values.get(name) or ())
        return cls(**values)


@dataclass
class TappedBuild:
    pte: Path
    manifest: dict[str, Any]
    cached: bool
    seconds: float
    warnings: list[str] = field(default_factory=list)

    @property
    def taps(self) -> list[TapInfo]:
        return [TapInfo.from_json(t) for t in self.manifest["taps"]]

    @property
    def model_outputs(self) -> int:
        """How many of the program's outputs are the model's own (the rest are taps)."""
        return int(self.manifest["model_outputs"])

    @property
    def reference_program(self) -> Path:
        """The tapped ExportedProgram that was lowered (torch.export.save)."""
        return tapped_reference_path(self.pte)


def tapped_reference_path(pte: Path) -> Path:
    return pte.with_suffix(".pt2")  # model.tapped.pte -> model.tapped.pt2


def build_tapped(model: str, options: BuildOptions, plan: TapPlan) -> TappedBuild:
    """Build (or fetch from the cache) the tapped sibling of `build(model, options)`."""
    from etdeploy.builder.backends import get_backend

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
    with filelock.FileLock(str(entry) + ".lock"):
        cached = _read_tapped_manifest(pte) if options.use_cache and pte.is_file() else None
        if cached is not None and calibration_unchanged(cached):
            return TappedBuild(pte, cached, True, time.perf_counter() - started)
        with warnings_module.catch_warnings():
            # torch.export and the lowering emit deprecation chatter on every call.
            warnings_module.simplefilter("ignore")
            try:
                manifest, buffer, reference = _build_uncached(ref, options, backend, plan)
            except _CannotHandOut as refused:
                # Tapped again without the views: they only rearrange a value
                # (no rounding of their own), and a delegate computes them inside.
                manifest, buffer, reference = _build_uncached(
                    ref, options, backend, plan, leave_out=refused.views
                )
        manifest["cache_key"] = key
        manifest["base_cache_key"] = base
        tmp = Path(tempfile.mkdtemp(prefix=".building-", dir=entry.parent))
        try:
            (tmp / pte.name).write_bytes(buffer)
            tapped_reference_path(tmp / pte.name).write_bytes(reference)
            write_json_atomic(manifest_path(tmp / pte.name), manifest)
            if entry.exists():
                shutil.rmtree(entry)
            os.replace(tmp, entry)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return TappedBuild(pte, manifest, False, time.perf_counter() - started)


def _read_tapped_manifest(pte: Path) -> dict[str, Any] | None:
    path = manifest_path(pte)
    if not path.is_file() or not tapped_reference_path(pte).is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if data.get("schema") == SCHEMA else None


def _build_uncached(
    ref: Any,
    options: BuildOptions,
    backend: Any,
    plan: TapPlan,
    leave_out: Mapping[str, str] | None = None,
) -> tuple[dict[str, Any], bytes, bytes]:
    """The manifest, the tapped program, and the tapped ExportedProgram's bytes;
    `leave_out` names values not to tap, with the reason."""
    from executorch.devtools.intermediate_output_tap import (
        FULL_TENSOR,
        tap_intermediate_outputs_,
    )
    from executorch.devtools.intermediate_output_tap import (
        STATS as STATS_REDUCER,
    )

    from etdeploy.builder.export import export_model
    from etdeploy.model.loader import load_model

    spec = load_model(ref)
    if options.dynamic:
        spec.dynamic = parse_dynamic(options.dynamic)
    exported = export_model(spec, ref.source_files)
    model_outputs = len(exported.graph.output_node().args[0])
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
    views = {n.name: _VIEW_LEFT_OUT for n in chosen if n.name not in untapped and _is_view(n)}
    chosen = [n for n in chosen if n.name not in untapped]
    if not chosen:
        raise ModelError(
            "every value to tap is of dynamic size and over --localize-budget",
            "raise --localize-budget, or narrow the taps with --localize-module",
        )
    inputs = tapped_inputs(exported, {n.name for n in chosen})
    full = {name for name, reducer in reducers.items() if reducer == FULL}
    stats = {name for name, reducer in reducers.items() if reducer == STATS}
    _, specs = tap_intermediate_outputs_(
        exported,
        [(named(full), FULL_TENSOR), (named(stats), STATS_REDUCER)],
    )
    meta = {n.name: n for n in chosen}
    calibration: dict[str, Any] | None = None
    steps: dict[int, float] = {}
    if options.quantize:
        from etdeploy.builder.quantize import quantize

        batches, calibration = calibration_batches(spec, options)
        program = quantize(exported, options.quantize, batches)
        steps = _tap_steps(program)
    else:
        _give_taps_values(exported)
        program = exported
    reference = _saved(program)
    buffer, method, partitions, delegation, merged = _lower(program, backend, views)
    same_as = {s.output_index: s.node_name for s in specs}
    out_names = list(spec.output_names or [])
    for i, value in enumerate(method["outputs"]):
        value["name"] = out_names[i] if i < min(len(out_names), model_outputs) else f"output_{i}"
    in_names = list(spec.input_names or [])
    for i, value in enumerate(method["inputs"]):
        value["name"] = in_names[i] if i < len(in_names) else f"input_{i}"
    taps = []
    for tap in specs:
        node = meta[tap.node_name]
        val = node.meta["val"]
        partition, delegate, kernel = partitions[tap.output_index]
        source, code = user_source(tap.stack_trace, ref.source_files)
        method["outputs"][tap.output_index]["name"] = f"tap:{tap.node_name}"
        taps.append(
            TapInfo(
                node=tap.node_name,
                op=_short_op(tap.op_target),
                target=tap.op_target,
                output_index=tap.output_index,
                reducer=FULL if tap.reducer_name == FULL_TENSOR.name else STATS,
                fields=tuple(tap.fields),
                shape=tuple(int_dims(val.shape)),
                dtype=str(val.dtype).removeprefix("torch."),
                nbytes=value_bytes(node, ranges) or 0,
                inputs=inputs[tap.node_name],
                partition=partition,
                delegate=delegate,
                kernel=kernel,
                module=tap.module_path or None,
                module_class=tap.module_class,
                source=source,
                code=code,
                step=steps.get(tap.output_index),
                context=tap.node_name in context,
                same_as=same_as[merged[tap.output_index]] if tap.output_index in merged else None,
            )
        )
    manifest = {
        "schema": SCHEMA,
        "model": {"ref": ref.text, "kind": ref.kind, "name": spec.name,
                  "fingerprint": ref.fingerprint()},
        "versions": versions(),
        "backend": backend.name,
        "quantization": {"mode": options.quantize, "calibration": calibration}
        if options.quantize
        else None,
        "plan": plan.key_fields(),
        "model_outputs": model_outputs,
        "taps": [asdict(t) for t in taps],
        # Left untapped, and why: dynamic-size values over the budget (see
        # assign_reducers), views a delegate would not hand out.
        "untapped": list(untapped),
        "why_untapped": untapped,
        "methods": [method],
        "delegation": delegation,
        "reference": tapped_reference_path(Path(f"{ref.name}.tapped.pte")).name,
        "size_bytes": len(buffer),
        "sha256": hashlib.sha256(buffer).hexdigest(),
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }  # fmt: skip
    return manifest, buffer, reference


# -- taps through quantization and lowering -------------------------------------------------


def _give_taps_values(exported: Any) -> None:
    """Each tap node's meta["val"] (what its reducer gives on the fake input),
    which the tap pass leaves out and torch.export.save requires."""
    from executorch.devtools.intermediate_output_tap import find_tap_nodes, get_reducer
    from torch._guards import detect_fake_mode

    for tap in find_tap_nodes(exported.graph_module):
        if "val" in tap.meta:
            continue
        source = tap.args[0].meta["val"]
        mode = detect_fake_mode([source])
        assert mode is not None
        with mode:
            tap.meta["val"] = get_reducer(str(tap.args[1])).eager(source)


def _tap_steps(program: Any) -> dict[int, float]:
    """Output index -> the step of the quantization grid a tapped value lies on
    (the per-tensor dequantize it is read from), in the converted program."""
    import torch

    dequantize = torch.ops.quantized_decomposed.dequantize_per_tensor.default
    steps: dict[int, float] = {}
    outputs = program.graph.output_node().args[0]
    for index, node in enumerate(outputs):
        source = node.args[0] if node.op == "call_function" and node.args else None
        if getattr(source, "target", None) == dequantize and isinstance(source.args[1], float):
            steps[index] = float(source.args[1])
    return steps


def _saved(program: Any) -> bytes:
    import torch

    buffer = io.BytesIO()
    torch.export.save(program, buffer)
    return buffer.getvalue()


# Delegate ids as a user knows them.
_BACKEND_NAMES = {"XnnpackBackend": "XNNPACK", "CoreMLBackend": "CoreML", "VulkanBackend": "Vulkan"}
# Ops that only move a value between a delegate and the rest: look through them.
_PASS_THROUGH = ("quantize_per_tensor", "dequantize_per_tensor", "getitem")


class _CannotHandOut(ModelError):
    """The delegate refused to hand a tapped value out (XNNPACK: an output that
    is also an input of its partition); `views` are the tapped views to leave out."""

    def __init__(self, error: ModelError, views: Mapping[str, str]) -> None:
        super().__init__(error.message, error.hint, log=error.log)
        self.views = dict(views)


_VIEW_LEFT_OUT = (
    "a view (it only rearranges its input's value) the delegate would not hand out; "
    "its value is its input's, which is judged"
)
_VIEWS = (
    "view", "reshape", "_unsafe_view", "permute", "transpose", "t", "squeeze", "unsqueeze",
    "expand", "slice", "select", "flatten", "unflatten", "split", "split_with_sizes",
    "chunk", "unbind", "narrow", "movedim", "contiguous", "clone", "dropout", "alias",
)  # fmt: skip


def _is_view(node: Any) -> bool:
    return _short_op(str(node.target)) in _VIEWS


def _lower(
    program: Any, backend: Any, views: Mapping[str, str]
) -> tuple[
    bytes,
    dict[str, Any],
    dict[int, tuple[str, int | None, str | None]],
    dict[str, Any],
    dict[int, int],
]:
    """Lower with the build's partitioner, read where each tap's value was
    computed, strip the taps, serialise. Also returns the taps merged into
    another carrying the same value (output index -> the kept tap's)."""
    from executorch.devtools.intermediate_output_tap import strip_taps_
    from executorch.exir import to_edge_transform_and_lower

    from etdeploy.builder.lower import _method_info, count_delegation

    merged: dict[int, int] = {}
    try:
        edge = to_edge_transform_and_lower(
            program,
            transform_passes=[_one_tap_per_value(merged)],
            partitioner=backend.partitioners(),
        )
        graph_module = edge.exported_program().graph_module
        partitions = _partitions(graph_module)
        delegation = count_delegation(graph_module)
        strip_taps_(edge)
        lowered = edge.to_executorch()
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        error = ModelError(
            f"lowering the tapped program to {backend.name} failed: {type(exc).__name__}: {first[:200]}",
            "localise with coarser taps (--localize-module), or report it: the untapped "
            "program lowers",
            log=str(exc),
        )
        # XNNPACK's preprocess (xnnpack_preprocess.py, generate_node_to_external_map,
        # executorch 1.5.1, read 2026-12-04) refuses a partition output that is also
        # one of its inputs: a tapped view it computes as a pass-through.
        if "already in the inputs" in first and views:
            raise _CannotHandOut(error, views) from exc
        raise error from exc
    plan = lowered.executorch_program.execution_plan
    return (
        bytes(lowered.buffer), _method_info(plan[0]), partitions, delegation.to_json(), merged
    )  # fmt: skip


def _one_tap_per_value(merged: dict[int, int]) -> Callable[[Any], Any]:
    """An edge pass before partitioning: every tap reads the node that computed
    its value (not a copy of it), and of taps reading the same value (an
    eval-mode dropout's and its input's, two dequantized copies of a quantized
    value) only the first stays: a delegate hands each of its outputs out once
    (XNNPACK raises on one listed twice). The others' outputs become the kept
    tap's; `merged` records output index -> the kept tap's output index."""
    from executorch.devtools.intermediate_output_tap import find_tap_nodes
    from torch.fx.passes.infra.pass_base import PassResult

    from etdeploy.builder.tap_plan import through_copies, value_key

    def one_tap_per_value(graph_module: Any) -> Any:
        outputs = list(graph_module.graph.output_node().args[0])
        position = {node: i for i, node in enumerate(outputs)}
        kept: dict[Any, Any] = {}
        changed = False
        for tap in find_tap_nodes(graph_module):
            computed = through_copies(tap.args[0])
            if computed is not tap.args[0]:
                tap.replace_input_with(tap.args[0], computed)
                changed = True
            key = (value_key(computed), str(tap.args[1]))
            if key not in kept:
                kept[key] = tap
                continue
            merged[position[tap]] = position[kept[key]]
            tap.replace_all_uses_with(kept[key])
            graph_module.graph.erase_node(tap)
            changed = True
        if changed:
            # A merged tap's dequantized copy, now unread, would still make the
            # partition hand its quantized value out a second time.
            graph_module.graph.eliminate_dead_code()
            graph_module.recompile()
        return PassResult(graph_module, changed)

    return one_tap_per_value


def _partitions(graph_module: Any) -> dict[int, tuple[str, int | None, str | None]]:
    """Output index of each tap -> (partition, delegate index, CPU kernel)."""
    from executorch.devtools.intermediate_output_tap import find_tap_nodes

    from etdeploy.builder.lower import _op_name

    delegates = [
        n.target
        for n in graph_module.graph.nodes
        if n.op == "get_attr" and n.name.startswith("lowered_module")
    ]
    taps = set(find_tap_nodes(graph_module))
    found: dict[int, tuple[str, int | None, str | None]] = {}
    outputs = graph_module.graph.output_node().args[0]
    for index, node in enumerate(outputs):
        if node not in taps:
            continue
        source = node.args[0]
        while True:
            call = source.args[0] if source.target is operator.getitem else None
            if call is not None and _is_delegate_call(call):
                lowered = getattr(graph_module, call.args[0].target)
                name = _BACKEND_NAMES.get(lowered.backend_id, lowered.backend_id)
                found[index] = (name, delegates.index(call.args[0].target), None)
                break
            op = _op_name(source.target) if source.op == "call_function" else source.op
            if op in _PASS_THROUGH and source.args:
                source = source.args[0]
                continue
            found[index] = ("CPU", None, op)
            break
    return found


def _is_delegate_call(node: Any) -> bool:
    return node.op == "call_function" and "executorch_call_delegate" in str(node.target)


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


def _short_op(target: str) -> str:
    # aten.layer_norm.default -> layer_norm
    parts = target.split(".")
    return parts[1] if len(parts) >= 3 else target


# -- the expected values ---------------------------------------------------------------------


def load_reference(path: Path) -> Any:
    """The tapped ExportedProgram, ready to run eagerly."""
    # Registers tap.Tensor (its eager impl applies the reducer) and the
    # quantized_decomposed operators a quantized program calls.
    import executorch.devtools.intermediate_output_tap  # noqa: F401
    import torch
    import torchao.quantization.pt2e  # noqa: F401

    return torch.export.load(str(path)).module()

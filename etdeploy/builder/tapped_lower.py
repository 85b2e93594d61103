"""Lowering a tapped program (etdeploy.builder.tapped): the build's partitioner, one
tap per value, where each tap's value was computed (a delegate or a CPU kernel),
and a delegate's refusal to hand a tapped view out."""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from etdeploy.builder.backends import Backend
from etdeploy.builder.lower import _method_info, _op_name, count_delegation
from etdeploy.builder.manifest_records import DelegationRecord, MethodRecord
from etdeploy.builder.tap_plan import graph_outputs, input_node, short_op, through_copies, value_key
from etdeploy.errors import ModelError

if TYPE_CHECKING:  # imported where torch is
    from torch.export import ExportedProgram
    from torch.fx import GraphModule, Node
    from torch.fx.passes.infra.pass_base import PassResult

    from etdeploy.builder.tap_plan import ValueKey

# Delegate ids as a user knows them.
_BACKEND_NAMES = {"XnnpackBackend": "XNNPACK", "CoreMLBackend": "CoreML", "VulkanBackend": "Vulkan"}
# Ops that only move a value between a delegate and the rest: look through them.
_PASS_THROUGH = ("quantize_per_tensor", "dequantize_per_tensor", "getitem")


class CannotHandOut(ModelError):
    """The delegate refused to hand a tapped value out (XNNPACK: an output that
    is also an input of its partition); `views` are the tapped views to leave out."""

    def __init__(self, error: ModelError, views: Mapping[str, str]) -> None:
        super().__init__(error.message, error.hint, log=error.log)
        self.views = dict(views)


VIEW_LEFT_OUT = (
    "a view (it only rearranges its input's value) the delegate would not hand out; "
    "its value is its input's, which is judged"
)
_VIEWS = (
    "view", "reshape", "_unsafe_view", "permute", "transpose", "t", "squeeze", "unsqueeze",
    "expand", "slice", "select", "flatten", "unflatten", "split", "split_with_sizes",
    "chunk", "unbind", "narrow", "movedim", "contiguous", "clone", "dropout", "alias",
)  # fmt: skip


def is_view(node: Node) -> bool:
    return short_op(str(node.target)) in _VIEWS


@dataclass(frozen=True)
class LoweredTaps:
    """The tapped program lowered: its bytes, its method's record, where each tap's
    value was computed, the delegation counts, and the taps merged into another
    carrying the same value."""

    program: bytes
    method: MethodRecord
    # Output index of each tap -> (partition, delegate index, CPU kernel).
    partitions: dict[int, tuple[str, int | None, str | None]]
    delegation: DelegationRecord
    # Output index of a merged tap -> the kept tap's output index.
    merged: dict[int, int]


def lower_tapped(
    program: ExportedProgram, backend: Backend, views: Mapping[str, str]
) -> LoweredTaps:
    """Lower with the build's partitioner, read where each tap's value was
    computed, strip the taps, serialise."""
    from executorch.devtools.intermediate_output_tap import strip_taps_
    from executorch.exir import to_edge_transform_and_lower

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
            raise CannotHandOut(error, views) from exc
        raise error from exc
    plan = lowered.executorch_program.execution_plan
    return LoweredTaps(
        bytes(lowered.buffer), _method_info(plan[0]), partitions, delegation.record(), merged
    )


def _one_tap_per_value(merged: dict[int, int]) -> Callable[[GraphModule], PassResult]:
    """An edge pass before partitioning: every tap reads the node that computed
    its value (not a copy of it), and of taps reading the same value (an
    eval-mode dropout's and its input's, two dequantized copies of a quantized
    value) only the first stays: a delegate hands each of its outputs out once
    (XNNPACK raises on one listed twice). The others' outputs become the kept
    tap's; `merged` records output index -> the kept tap's output index."""
    from executorch.devtools.intermediate_output_tap import find_tap_nodes
    from torch.fx.passes.infra.pass_base import PassResult

    def one_tap_per_value(graph_module: GraphModule) -> PassResult:
        outputs = graph_outputs(graph_module.graph)
        position = {node: i for i, node in enumerate(outputs)}
        kept: dict[tuple[ValueKey, str], Node] = {}
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


def _partitions(graph_module: GraphModule) -> dict[int, tuple[str, int | None, str | None]]:
    """Output index of each tap -> (partition, delegate index, CPU kernel)."""
    from executorch.devtools.intermediate_output_tap import find_tap_nodes

    delegates = [
        n.target
        for n in graph_module.graph.nodes
        if n.op == "get_attr" and n.name.startswith("lowered_module")
    ]
    taps = set(find_tap_nodes(graph_module))
    found: dict[int, tuple[str, int | None, str | None]] = {}
    from torch.fx import Node as GraphNode

    for index, node in enumerate(graph_outputs(graph_module.graph)):
        if not isinstance(node, GraphNode) or node not in taps:
            continue
        source = input_node(node, 0)
        while source is not None:
            call = input_node(source, 0) if source.target is operator.getitem else None
            # executorch_call_delegate(lowered_module, *inputs)
            module = input_node(call, 0) if call is not None and _is_delegate_call(call) else None
            if module is not None:
                lowered = getattr(graph_module, str(module.target))
                name = _BACKEND_NAMES.get(lowered.backend_id, lowered.backend_id)
                found[index] = (name, delegates.index(module.target), None)
                break
            op = _op_name(source.target) if source.op == "call_function" else source.op
            handed_on = input_node(source, 0) if op in _PASS_THROUGH else None
            if handed_on is not None:
                source = handed_on
                continue
            found[index] = ("CPU", None, op)
            break
    return found


def _is_delegate_call(node: Node) -> bool:
    return node.op == "call_function" and "executorch_call_delegate" in str(node.target)

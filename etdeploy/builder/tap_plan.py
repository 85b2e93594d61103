"""Which values a tapped build taps, and how: the granularity (every operator,
each module's output, or the values leaving a partition), --localize-module's
module, and the byte budget that decides between a whole tensor and a summary.

Works on the exported program's FX graph (torch.export), before any tap is
inserted; etdeploy.builder.tapped does the tapping and the lowering.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from etdeploy.errors import ModelError, UsageError
from etdeploy.settings import LOCALIZE_BUDGET_BYTES

if TYPE_CHECKING:  # imported where torch is: the tapped build
    import torch
    from torch.export import ExportedProgram
    from torch.fx import Graph, Node

    from etdeploy.builder.manifest_records import JsonObject

    # What identifies a value: the node that computed it, or a quantized value
    # with its grid (value_key).
    ValueKey = Node | tuple[str, Node, tuple[str, ...]]


class ValueRange(Protocol):
    """A dynamic size's range, as the exported program's range constraints give it."""

    @property
    def upper(self) -> object: ...


# How finely to tap: every operator; each leaf module's output; or only values
# that already leave a partition (a delegate's outputs and CPU kernels' outputs),
# which cannot change what a delegate fuses.
GRANULARITIES = ("ops", "modules", "partitions")

# The default of --localize-budget, declared beside it (etdeploy.settings).
DEFAULT_BUDGET_BYTES = LOCALIZE_BUDGET_BYTES

FULL = "full"
STATS = "stats"


@dataclass(frozen=True)
class TapPlan:
    """Which values to tap, and how: full tensors within `budget_bytes` (in
    graph order), the STATS summary beyond it."""

    granularity: str = "ops"
    # A module path or fnmatch pattern (encoder.layers.3, *.attention): only
    # operators inside it, and the values carried into it.
    module: str | None = None
    # Exact node names (the partition-boundary plan is computed from an earlier
    # tapped build's partitions).
    nodes: tuple[str, ...] = ()
    budget_bytes: int = DEFAULT_BUDGET_BYTES

    def __post_init__(self) -> None:
        if self.granularity not in GRANULARITIES:
            raise UsageError(
                f"unknown tap granularity {self.granularity!r}",
                f"one of {', '.join(GRANULARITIES)}",
            )
        if self.budget_bytes < 0:
            raise UsageError(f"--localize-budget must be 0 or more, got {self.budget_bytes}")

    def key_fields(self) -> JsonObject:
        return {
            "granularity": self.granularity,
            "module": self.module,
            "nodes": sorted(self.nodes),
            "budget_bytes": self.budget_bytes,
        }


def graph_outputs(graph: Graph) -> tuple[object, ...]:
    """What a graph returns, in order: its output node's values."""
    returned = graph.output_node().args[0]
    return tuple(returned) if isinstance(returned, (list, tuple)) else (returned,)


def _tensor_val(node: Node) -> torch.Tensor | None:
    import torch

    val = node.meta.get("val")
    return val if isinstance(val, torch.Tensor) else None


def candidates(exported: ExportedProgram) -> list[Node]:
    """Every operator whose value is one floating-point tensor, in graph order:
    what can carry a numeric error (an index or a mask is exact or wrong)."""
    found = []
    for node in exported.graph.nodes:
        if node.op != "call_function":
            continue
        val = _tensor_val(node)
        if val is not None and val.dtype.is_floating_point:
            found.append(node)
    return found


def module_paths(node: Node) -> list[str]:
    """The module instances a node ran inside, outermost first ('' is the model)."""
    stack = node.meta.get("nn_module_stack") or {}
    paths = []
    for entry in stack.values():
        path = entry[0] if isinstance(entry, tuple) else entry
        if isinstance(path, str):
            paths.append(path)
    return paths


def path_matches(path: str, pattern: str) -> bool:
    """The module at `pattern`, or one under it; fnmatch globs allowed."""
    return bool(path) and (
        path == pattern or path.startswith(pattern + ".") or fnmatch.fnmatchcase(path, pattern)
    )


def in_module(node: Node, pattern: str) -> bool:
    return any(path_matches(p, pattern) for p in module_paths(node))


def _leaf_terminal(node: Node) -> bool:
    """The value leaving its innermost module: no user runs inside that module."""
    stack = node.meta.get("nn_module_stack") or {}
    if len(stack) < 2:  # the model itself: its output is compared anyway
        return False
    leaf = list(stack)[-1]
    return all(leaf not in (user.meta.get("nn_module_stack") or {}) for user in node.users)


def select_nodes(exported: ExportedProgram, plan: TapPlan) -> tuple[list[Node], set[str]]:
    """The nodes to tap, in graph order, and which of them are only the values
    carried into --localize-module's module."""
    pool = candidates(exported)
    feeding: set[str] = set()
    if plan.module is not None:
        inside = [n for n in pool if in_module(n, plan.module)]
        if not inside:
            known = sorted({p for n in pool for p in module_paths(n) if p})
            raise UsageError(
                f"--localize-module {plan.module!r} matches no module of the model",
                "module paths are: "
                + (", ".join(known[:12]) or "none (the model has no submodules)")
                + (" ..." if len(known) > 12 else ""),
            )
        inside_names = {n.name for n in inside}
        # The values carried into the module, so its first operator is judged
        # against what it was given.
        pool_names = {n.name for n in pool}
        feeding = {
            arg.name
            for n in inside
            for arg in n.all_input_nodes
            if arg.name in pool_names and arg.name not in inside_names
        }
        pool = [n for n in pool if n.name in inside_names or n.name in feeding]
    if plan.granularity == "modules":
        pool = [n for n in pool if _leaf_terminal(n)]
    elif plan.granularity == "partitions":
        wanted = set(plan.nodes)
        pool = [n for n in pool if n.name in wanted]
    if not pool:
        raise ModelError(
            f"no value to tap at {plan.granularity} granularity"
            + (f" in {plan.module}" if plan.module else ""),
            "the graph has no floating-point operator there",
        )
    return pool, feeding & {n.name for n in pool}


def int_dims(shape: Sequence[int | torch.SymInt]) -> list[int]:
    """A shape's sizes; a dynamic dim is its example size, or -1 if unknown."""
    dims = []
    for d in shape:
        if isinstance(d, int):
            dims.append(d)
        else:
            hint = getattr(getattr(d, "node", None), "hint", None)
            dims.append(int(hint) if hint is not None else -1)
    return dims


def value_bytes(node: Node, ranges: Mapping[object, ValueRange]) -> int | None:
    """Bytes of the node's value; of a dynamic size, at its largest (None: no
    upper bound). Never int() on a symbolic size: that pins it to the example's."""
    val = _tensor_val(node)
    if val is None:
        return None
    size: int = val.element_size()
    for dim in val.shape:
        if isinstance(dim, int):
            size *= dim
            continue
        expr = dim.node.expr
        try:
            bound = int(expr.xreplace({s: ranges[s].upper for s in expr.free_symbols}))
        except (KeyError, TypeError, ValueError, OverflowError, AttributeError):
            return None
        size *= bound
    return size


def _is_dynamic(node: Node) -> bool:
    val = _tensor_val(node)
    return val is not None and any(not isinstance(dim, int) for dim in val.shape)


def assign_reducers(
    nodes: Sequence[Node], budget_bytes: int, ranges: Mapping[object, ValueRange]
) -> dict[str, str | None]:
    """Full tensors in graph order while they fit the budget (a dynamic size at
    its largest); the summary beyond. A dynamic value beyond it is not tapped
    (None): the summary's percentile reads the size once, at build time."""
    used = 0
    chosen: dict[str, str | None] = {}
    for node in nodes:
        size = value_bytes(node, ranges)
        if size is not None and used + size <= budget_bytes:
            used += size
            chosen[node.name] = FULL
        else:
            chosen[node.name] = None if _is_dynamic(node) else STATS
    return chosen


def tapped_inputs(exported: ExportedProgram, tapped: set[str]) -> dict[str, tuple[str, ...]]:
    """For each tapped node, the nearest tapped nodes it is computed from."""
    memo: dict[str, tuple[str, ...]] = {}

    def sources(node: Node) -> tuple[str, ...]:
        if node.name in memo:
            return memo[node.name]
        found: list[str] = []
        for arg in node.all_input_nodes:
            if arg.name in tapped:
                found.append(arg.name)
            elif arg.op == "call_function":
                found.extend(sources(arg))
        memo[node.name] = tuple(dict.fromkeys(found))
        return memo[node.name]

    return {n.name: sources(n) for n in exported.graph.nodes if n.name in tapped}


def named(names: set[str]) -> Callable[[Node], bool]:
    return lambda node: node.name in names


# Ops that hand on their input's value unchanged (in the exported or the edge
# dialect): a copy, an alias, an eval-mode dropout. A tap of one shows the value
# of the node it copies; a delegate that drops the copy hands that value out once.
_SAME_VALUE = ("clone", "_clone_dim_order", "alias", "alias_copy", "detach", "detach_copy",
               "contiguous", "dropout", "lift_fresh_copy")  # fmt: skip


def _op_of(node: Node) -> str:
    parts = str(node.target).split(".")
    return parts[-2] if len(parts) >= 2 else parts[-1]


def _is_dequantize(node: Node) -> bool:
    return node.op == "call_function" and "dequantize_per_tensor" in str(node.target)


def _is_quantize(node: Node) -> bool:
    target = str(node.target)
    return (
        node.op == "call_function" and "quantize_per_tensor" in target and not _is_dequantize(node)
    )


def input_node(node: Node, index: int) -> Node | None:
    """The node's argument at `index` when it is a value of the graph."""
    from torch.fx import Node as GraphNode

    arg = node.args[index] if index < len(node.args) else None
    return arg if isinstance(arg, GraphNode) else None


def through_copies(node: Node) -> Node:
    """The node that computed the value `node` carries (through copies of it)."""
    while node.op == "call_function" and _op_of(node) in _SAME_VALUE:
        source = input_node(node, 0)
        if source is None:
            break
        node = source
    return node


def value_key(node: Node) -> ValueKey:
    """What identifies the value a node carries: through copies to the node that
    computed it, and a dequantize of a quantized value (the quantizer gives each
    user its own copy) as that quantized value with its grid, looking through a
    requantization to the same grid (around a copy)."""
    node = through_copies(node)
    if not _is_dequantize(node):
        return node
    quantized, grid = input_node(node, 0), tuple(str(a) for a in node.args[1:6])
    if quantized is None:
        return node
    if _is_quantize(quantized) and tuple(str(a) for a in quantized.args[1:6]) == grid:
        source = input_node(quantized, 0)
        inner = through_copies(source) if source is not None else None
        same_grid = inner is not None and tuple(str(a) for a in inner.args[1:6]) == grid
        if inner is not None and same_grid and _is_dequantize(inner):
            return value_key(inner)
    return ("dequantized", quantized, grid)


def short_op(target: str) -> str:
    # aten.layer_norm.default -> layer_norm
    parts = target.split(".")
    return parts[1] if len(parts) >= 3 else target

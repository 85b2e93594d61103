"""The error each tapped operator added itself on the device, apart from the
error it was handed.

The tapped program's eager twin (the ExportedProgram that was lowered, with
its taps) runs once per localised sample with every whole tapped value
replaced by the device's own: each operator then computes from exactly what
the device gave it, and its result, set against the device's, is the error
that operator made. It runs in float64 (a quantize takes float32, as the
program does), so the result is what the operator should give, and the
device's error is judged against what float32 allows that operator
(etdeploy.pipeline.operator_bounds), or, for a value on a quantization grid,
against the grid's step.

Untapped operators between two taps (a value of another dtype, a summary tap's
value) are run too: the error of a tapped value is then that of the stretch
from the nearest taps before it.

A warm run reads the result from the cache, keyed by the twin's bytes, the
inputs and the device's values, so torch is not imported again.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from etdeploy.builder.tap_plan import FULL, graph_outputs, input_node, value_key
from etdeploy.builder.tapped import load_reference
from etdeploy.builder.tapped_manifest import TapInfo
from etdeploy.paths import cache_dir
from etdeploy.results.result import OperatorError

if TYPE_CHECKING:  # imported where torch is
    import torch
    from torch.fx import GraphModule, Node
    from torch.fx.node import Argument

    from etdeploy.pipeline.operator_bounds import Bound

# Bumped whenever what is measured or how it is bounded changes.
REVISION = 2
# Per sample, per output of the tapped program (by output index).
Values = list[dict[int, np.ndarray]]


def operator_errors(
    reference_program: Path,
    program_sha256: str,
    taps: Sequence[TapInfo],
    samples: Sequence[tuple[np.ndarray, ...]],
    device: Values,
    *,
    quant_steps: float,
    use_cache: bool = True,
) -> list[dict[str, OperatorError]]:
    """Per sample, each whole tapped value's own error (by node), cached by the
    tapped program's digest (`program_sha256`: its eager twin is built with it),
    the inputs and the device's values."""
    measured = [t for t in taps if t.reducer == FULL and not t.context]
    digest = hashlib.sha256(f"{REVISION}:{program_sha256}:{quant_steps!r}".encode())
    for tap in measured:
        digest.update(f"{tap.node}:{tap.output_index}:{tap.step!r}".encode())
    for sample, values in zip(samples, device, strict=True):
        for array in (*sample, *(values[t.output_index] for t in measured)):
            digest.update(f"{array.dtype}{array.shape}".encode())
            digest.update(np.ascontiguousarray(array).tobytes())
    path = cache_dir("references") / f"operators-{digest.hexdigest()[:32]}.json"
    if use_cache and path.is_file():
        try:
            rows = json.loads(path.read_text())
            return [{k: OperatorError.from_json(v) for k, v in row.items()} for row in rows]
        except (OSError, ValueError, TypeError, KeyError):
            path.unlink(missing_ok=True)  # damaged: measure again
    found = _measure(reference_program, measured, samples, device, quant_steps)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps([{k: v.to_json() for k, v in row.items()} for row in found]))
    os.replace(tmp, path)
    return found


def _measure(
    reference_program: Path,
    taps: Sequence[TapInfo],
    samples: Sequence[tuple[np.ndarray, ...]],
    device: Values,
    quant_steps: float,
) -> list[dict[str, OperatorError]]:
    import torch

    module = load_reference(reference_program)
    outputs = graph_outputs(module.graph)
    # Each tap's value node in the twin: the tap's argument.
    value_of = {tap.node: _tapped_value(outputs[tap.output_index]) for tap in taps}
    rows = []
    with torch.no_grad():
        for sample, values in zip(samples, device, strict=True):
            given = {value_of[t.node]: values[t.output_index] for t in taps}
            run = _DeviceFed(module, given)
            run.run(*(torch.from_numpy(np.ascontiguousarray(a)) for a in sample))
            rows.append(
                {
                    tap.node: _error(
                        run, value_of[tap.node], values[tap.output_index], tap, quant_steps
                    )
                    for tap in taps
                }
            )
    return rows


def _tapped_value(output: object) -> Node:
    """The value a tap output hands out: the tap's argument (its node in the graph)."""
    from torch.fx import Node as GraphNode

    value = input_node(output, 0) if isinstance(output, GraphNode) else None
    assert value is not None, f"{output} is not a tap of a value"
    return value


def _error(
    run: _DeviceFed, node: Node, got: np.ndarray, tap: TapInfo, quant_steps: float
) -> OperatorError:
    """The device's value of `node` against what the operator gives on the device's inputs."""
    want = run.computed.get(node.name)
    if want is None:
        return OperatorError(math.inf, math.inf, math.inf, 0.0, "other", 1)
    expected = want.detach().to(dtype=_float64()).numpy()
    actual = np.asarray(got, dtype=np.float64)
    magnitude = _magnitude(expected)
    if actual.shape != expected.shape:
        return OperatorError(math.inf, math.inf, math.inf, 0.0, "other", 1)
    diff = _difference(actual, expected)
    max_abs = float(diff.max()) if diff.size else 0.0
    rel = max_abs / magnitude if magnitude > 0 else (0.0 if max_abs == 0 else math.inf)
    if tap.step:
        steps = max_abs / tap.step
        allowed = quant_steps * tap.step
        return OperatorError(
            max_abs, rel, steps / quant_steps if quant_steps else math.inf,
            allowed / magnitude if magnitude > 0 else math.inf, "quantized", 1, steps,
        )  # fmt: skip
    bound = run.bounds[node.name]
    limits = bound.allowed.numpy()
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = float(np.max(diff / limits)) if diff.size else 0.0
    return OperatorError(
        max_abs, rel, ratio if math.isfinite(ratio) else math.inf,
        float(np.max(limits)) / magnitude if magnitude > 0 else math.inf, bound.kind, bound.n,
    )  # fmt: skip


def _float64() -> torch.dtype:
    import torch

    return torch.float64


def _magnitude(values: np.ndarray) -> float:
    finite = values[np.isfinite(values)]
    return float(np.max(np.abs(finite))) if finite.size else 0.0


def _difference(actual: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """|actual - expected|; the same NaN or infinity on both sides is agreement,
    a non-finite value on one side an infinite error."""
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(actual - expected)
    same = (np.isnan(actual) & np.isnan(expected)) | (np.isinf(actual) & (actual == expected))
    diff = np.where(same, 0.0, diff)
    return np.where(np.isnan(diff), np.inf, diff)


def _is_quantize(target: object) -> bool:
    text = str(target)
    return ("quantize_per" in text and "dequantize" not in text) or "choose_qparams" in text


class _DeviceFed:
    """Runs a GraphModule node by node, in float64, handing every consumer of a
    tapped value (or of a copy of it) the device's value instead of its own;
    records each tapped node's own result and its float32 bound."""

    def __init__(self, module: GraphModule, device: Mapping[Node, np.ndarray]) -> None:
        import torch

        self.module = module
        self.computed: dict[str, torch.Tensor] = {}
        self.bounds: dict[str, Bound] = {}
        self.watched = {node.name for node in device}
        # A getitem's bound comes from the operator whose tuple it picks from.
        self.picked: dict[str, list[tuple[str, int]]] = {}
        for node in device:
            source, index = input_node(node, 0), node.args[1] if len(node.args) > 1 else None
            getitem = node.op == "call_function" and "getitem" in str(node.target)
            if getitem and source is not None and isinstance(index, int):
                self.picked.setdefault(source.name, []).append((node.name, index))
        self.substitute = {
            value_key(node): torch.from_numpy(np.ascontiguousarray(v)).to(torch.float64)
            for node, v in device.items()
        }
        self.value_key = value_key

    def run(self, *inputs: torch.Tensor) -> None:
        import torch

        env: dict[Node, Argument] = {}
        placeholders = iter(inputs)
        for node in self.module.graph.nodes:
            if node.op == "placeholder":
                env[node] = next(placeholders)
                continue
            if node.op == "output":
                break
            args = torch.fx.node.map_arg(node.args, lambda n: env[n])
            kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: env[n])
            if node.op == "get_attr":
                result = _attribute(self.module, node.target)
            elif node.op == "call_module":
                result = getattr(self.module, node.target)(*args, **kwargs)
            else:
                args, kwargs = _precision(node.target, args, kwargs)
                result = node.target(*args, **kwargs)
                self._record(node, args, kwargs, result)
            given = self.substitute.get(self.value_key(node))
            if given is not None and isinstance(result, torch.Tensor):
                env[node] = given.to(result.dtype)
            else:
                env[node] = result

    def _record(
        self,
        node: Node,
        args: Sequence[object],
        kwargs: Mapping[str, object],
        result: torch.Tensor | Sequence[torch.Tensor],
    ) -> None:
        import torch

        from etdeploy.pipeline.operator_bounds import bound_for

        operator = node.target
        if isinstance(operator, str):  # a call_function's target is its callable
            return
        if node.name in self.watched and isinstance(result, torch.Tensor):
            self.computed[node.name] = result
            if not _is_dequantize(node.target):
                self.bounds[node.name] = bound_for(operator, args, kwargs, result)
        for name, index in self.picked.get(node.name, ()):
            self.bounds[name] = bound_for(operator, args, kwargs, result[index])


def _is_dequantize(target: object) -> bool:
    return "dequantize_per" in str(target)


def _attribute(module: GraphModule, target: str) -> Argument:
    *path, name = target.split(".")
    owner = module
    for part in path:
        owner = getattr(owner, part)
    value: Argument = getattr(owner, name)
    return value


def _precision(
    target: object, args: Sequence[object], kwargs: Mapping[str, object]
) -> tuple[list[object], dict[str, object]]:
    """Float tensors in float64, except into a quantize (which takes float32)."""
    import torch

    wanted = torch.float32 if _is_quantize(target) else torch.float64

    def convert(value: object) -> object:
        if isinstance(value, torch.Tensor) and value.dtype in (torch.float32, torch.float64):
            return value.to(wanted)
        if isinstance(value, (list, tuple)):
            return type(value)(convert(v) for v in value)
        return value

    return [convert(a) for a in args], {k: convert(v) for k, v in kwargs.items()}

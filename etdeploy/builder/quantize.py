"""PT2E int8 quantization with the XNNPACK quantizer, per-channel weights.

`int8` is static: activations are calibrated on real sample inputs. `int8-dynamic`
quantizes weights statically and activations at run time (no calibration), each
row of a linear's input on its own range, as XNNPACK computes it
(per_token_dynamic_activations).
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from etdeploy.build_options import PROGRAM_QUANTIZATIONS
from etdeploy.errors import InputError

if TYPE_CHECKING:  # imported where torch is
    import torch
    from torch.export import ExportedProgram
    from torch.fx import GraphModule, Node

MODES = PROGRAM_QUANTIZATIONS


def quantize(
    exported: ExportedProgram, mode: str, calibration: Sequence[tuple[torch.Tensor, ...]]
) -> ExportedProgram:
    """Return an ExportedProgram whose graph carries quantize/dequantize pairs."""
    import torch
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    config = get_symmetric_quantization_config(
        is_per_channel=True, is_dynamic=mode == "int8-dynamic"
    )
    quantizer = XNNPACKQuantizer().set_global(config)
    prepared = prepare_pt2e(exported.module(), quantizer)
    for index, batch in enumerate(calibration):
        try:
            prepared(*batch)
        except Exception as exc:
            shapes = ", ".join(f"{tuple(t.shape)} {t.dtype}" for t in batch)
            raise InputError(
                f"calibration sample {index} ({shapes}) does not fit the model: "
                f"{str(exc).strip().splitlines()[0][:160]}",
                "give calibration inputs with the shapes and dtypes of the example inputs",
            ) from exc
    converted = convert_pt2e(prepared)
    if mode == "int8-dynamic":
        per_token_dynamic_activations(converted)
    args = exported.example_inputs[0]
    return torch.export.export(converted, tuple(args), dynamic_shapes=_dynamic_shapes_of(exported))


def per_token_dynamic_activations(converted: GraphModule) -> int:
    """Make each dynamically quantized input of a linear quantized per row (token), as
    XNNPACK quantizes it on the device; returns how many inputs were rewritten.

    The XNNPACK quantizer's dynamic config asks for per-tensor activations
    (get_symmetric_quantization_config(is_dynamic=True): qscheme per_tensor_affine, so
    convert_pt2e writes choose_qparams.tensor -> quantize_per_tensor.tensor ->
    dequantize_per_tensor.tensor, one scale for the whole tensor). XNNPACK has no
    per-tensor dynamic quantization: its delegate serialises such a tensor as
    PerTokenDynamicQuant(num_nonbatch_dims=1) before a linear, one scale and zero point
    per row of the last dim (executorch 1.5.1, backends/xnnpack/operators/node_visitor.py
    and quant_params.py, _from_dynamic_input_node; read 2026-12-05). Left per-tensor,
    the eager program quantizes every row on the widest row's range, coarser than the
    device does, and a transformer (whose tokens' ranges differ many times over) departs
    from it by a percent of its range. torch.ao's quantized_decomposed per-token ops
    (choose_qparams_per_token_asymmetric, quantize_per_token, dequantize_per_token;
    torch 2.13 torch/ao/quantization/fx/_decomposed.py, read 2026-12-05) compute
    XNNPACK's per-row parameters (its asymmetric qd8 range, zero included) and XNNPACK
    lowers them to the same per-token tensor, so the program lowered and the program
    kept as the reference are one. An input feeding a convolution is left per-tensor:
    XNNPACK quantizes it per batch element (num_nonbatch_dims=3), which is the
    per-tensor range at batch 1.
    """
    import operator

    import torch

    ops = torch.ops.quantized_decomposed
    graph = converted.graph
    rewritten = 0
    for quantize_node in list(graph.nodes):
        if quantize_node.target != ops.quantize_per_tensor.tensor:
            continue
        source, scale, _zero_point = quantize_node.args[:3]
        chooser = scale.args[0] if isinstance(scale, torch.fx.Node) and scale.args else None
        if not isinstance(chooser, torch.fx.Node) or chooser.target != ops.choose_qparams.tensor:
            continue  # a static grid (int8): not a dynamic activation
        if not _feeds_a_linear(quantize_node):
            continue
        with graph.inserting_before(quantize_node):
            chosen = graph.call_function(
                ops.choose_qparams_per_token_asymmetric.default, (source, torch.int8)
            )
            scales = graph.call_function(operator.getitem, (chosen, 0))
            zero_points = graph.call_function(operator.getitem, (chosen, 1))
            grid = (scales, zero_points, -128, 127, torch.int8)
            quantized = graph.call_function(ops.quantize_per_token.default, (source, *grid))
            dequantized = graph.call_function(
                ops.dequantize_per_token.default, (quantized, *grid, torch.float32)
            )
        for user in list(quantize_node.users):
            user.replace_all_uses_with(dequantized)
            graph.erase_node(user)
        graph.erase_node(quantize_node)
        if all(not picked.users for picked in chooser.users):
            for picked in list(chooser.users):
                graph.erase_node(picked)
            graph.erase_node(chooser)
        rewritten += 1
    if rewritten:
        graph.lint()
        converted.recompile()
    return rewritten


def _feeds_a_linear(quantize_node: Node) -> bool:
    # As XNNPACK decides between a linear's and a convolution's dynamic input
    # (QuantParams._feeds_into_conv): the first of the two found below the node.
    pending = list(quantize_node.users)
    while pending:
        user = pending.pop()
        target = str(user.target)
        if "linear" in target:
            return True
        if "conv" in target:
            return False
        pending.extend(user.users)
    return False


def _dynamic_shapes_of(exported: ExportedProgram) -> tuple[dict[int, object] | None, ...] | None:
    # Re-exporting the quantized module must keep the dims the first export made dynamic.
    from torch.export import Dim

    shapes = []
    any_dynamic = False
    for spec in exported.graph_signature.input_specs:
        if spec.kind.name != "USER_INPUT":
            continue
        node = next(n for n in exported.graph.nodes if n.name == spec.arg.name)
        val = node.meta.get("val")
        dims: dict[int, object] = {}
        for i, size in enumerate(getattr(val, "shape", ())):
            if not isinstance(size, int):
                rng = exported.range_constraints.get(size.node.expr)
                low = int(rng.lower) if rng is not None else 1
                high = int(rng.upper) if rng is not None and rng.upper.is_finite else 2**20
                dims[i] = Dim(f"{spec.arg.name}_d{i}", min=low, max=high)
                any_dynamic = True
        shapes.append(dims or None)
    return tuple(shapes) if any_dynamic else None


class QuantizationStep(TypedDict):
    """An output's quantization grid, as a build's manifest records it."""

    scale: float  # the step: a correct int8 kernel lands on the same grid point or the next
    zero_point: int
    qmin: int
    qmax: int
    dtype: str  # int8, uint8


def output_quantization(exported: ExportedProgram) -> list[QuantizationStep | None]:
    """Per output of the converted program, its quantization when the graph ends in
    a per-tensor dequantize (the output is a grid of `scale` steps), else None.

    The step is the unit a device's error against the quantized program is
    measured in: a correct int8 kernel lands on the same grid point or the next.
    """
    import torch

    (output,) = [n for n in exported.graph.nodes if n.op == "output"]
    found: list[QuantizationStep | None] = []
    dequantize = torch.ops.quantized_decomposed.dequantize_per_tensor.default
    for node in output.args[0]:
        if isinstance(node, torch.fx.Node) and node.target == dequantize:
            # dequantize_per_tensor.default(input, scale, zero_point, quant_min, quant_max,
            # dtype): scalars in the graph (the .tensor overload takes tensors).
            scale, zero_point, qmin, qmax, dtype = node.args[1:6]
            if (
                isinstance(scale, float)
                and isinstance(zero_point, int)
                and isinstance(qmin, int)
                and isinstance(qmax, int)
            ):
                found.append({
                    "scale": scale, "zero_point": zero_point, "qmin": qmin, "qmax": qmax,
                    "dtype": str(dtype).removeprefix("torch."),
                })  # fmt: skip
                continue
        found.append(None)
    return found


def saved(exported: ExportedProgram) -> bytes:
    """The converted program as torch.export.save writes it."""
    import torch

    buffer = io.BytesIO()
    torch.export.save(exported, buffer)
    return buffer.getvalue()


def load_quantized(path: Path) -> torch.nn.Module:
    """The converted program saved beside a quantized build, ready to run eagerly."""
    import torch

    # Registers the quantized_decomposed operators the saved graph calls.
    import torchao.quantization.pt2e  # noqa: F401

    return torch.export.load(str(path)).module()

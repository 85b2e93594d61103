"""int8-dynamic: the program a build keeps as its reference quantizes a linear's input
per row (token), as XNNPACK does, and so computes what the lowered program computes.

A real multi-row linear: the first block's MLP down projection of a small Llama-shaped
model trained on license texts, fed the activations it reads on held-out prompts (each
token's row on a range of its own). XNNPACK runs here in executorch's Python runtime:
the same kernels the device's runner links.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from etdeploy.builder.backends import get_backend
from etdeploy.builder.export import export_model
from etdeploy.builder.lower import lower
from etdeploy.builder.quantize import quantize
from etdeploy.pipeline.references import host_runtime_outputs

pytestmark = pytest.mark.slow

LLAMA_BLOCK = Path(__file__).resolve().parent.parent / "data" / "models" / "llama_block.py"


def _llama_block() -> ModuleType:
    spec = importlib.util.spec_from_file_location("llama_block", LLAMA_BLOCK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def down_projection() -> dict[str, Any]:
    """The multi-row linear, its real inputs, and what XNNPACK computes on them."""
    import torch

    model = _llama_block().down_projection()
    samples = [(np.load(path),) for path in model.samples]
    exported = export_model(model, ())
    return {"model": model, "samples": samples, "exported": exported, "torch": torch}


def _on_xnnpack(program: Any, samples: list[tuple[np.ndarray, ...]], tmp: Path) -> list[Any]:
    pte = tmp / "program.pte"
    pte.write_bytes(lower(program, get_backend("xnnpack")).buffer)
    return [row[0] for row in host_runtime_outputs(pte, "forward", samples)]


def _eager(program: Any, samples: list[tuple[np.ndarray, ...]]) -> list[Any]:
    import torch

    module = program.module()
    with torch.no_grad():
        return [module(torch.from_numpy(sample[0])).numpy() for sample in samples]


def _worst_share(got: list[Any], want: list[Any]) -> float:
    """The largest error over all samples as a share of the reference's range."""
    return max(float(np.abs(g - w).max() / np.abs(w).max()) for g, w in zip(got, want, strict=True))


def test_the_rows_of_a_transformers_linear_input_have_ranges_far_apart(
    down_projection: dict[str, Any],
) -> None:
    # The premise of the tests below: one range for the whole input would be several
    # times too coarse for most of its rows.
    for (activations,) in down_projection["samples"]:
        assert activations.shape == (1, 16, 176)
        per_row = np.abs(activations[0]).max(axis=-1)
        assert per_row.max() / per_row.min() > 3


def test_the_int8_dynamic_reference_computes_what_xnnpack_computes(
    down_projection: dict[str, Any], tmp_path: Path
) -> None:
    import torch

    program = quantize(down_projection["exported"], "int8-dynamic", [_example(down_projection)])
    samples = down_projection["samples"]
    device, reference = _on_xnnpack(program, samples, tmp_path), _eager(program, samples)
    # fp32 reassociation only: the int8 inputs and weights are the same on both sides.
    assert _worst_share(device, reference) < 1e-5
    targets = {str(n.target) for n in program.graph.nodes if n.op == "call_function"}
    assert "quantized_decomposed.quantize_per_token.default" in targets
    assert "quantized_decomposed.choose_qparams.tensor" not in targets
    # ...and what quantization costs against the float linear stays small.
    with torch.no_grad():
        floats = [down_projection["model"].module(torch.from_numpy(s[0])).numpy() for s in samples]
    assert 1e-4 < _worst_share(reference, floats) < 0.02


def test_one_range_for_the_whole_input_departs_from_xnnpack_by_a_percent(
    down_projection: dict[str, Any], tmp_path: Path
) -> None:
    """The cause, shown on the quantizer's own program: convert_pt2e writes one
    dynamic scale per tensor, XNNPACK lowers it per row (the lowered program is the
    same either way), so that program is no reference for the device."""
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    config = get_symmetric_quantization_config(is_per_channel=True, is_dynamic=True)
    exported = down_projection["exported"]
    prepared = prepare_pt2e(exported.module(), XNNPACKQuantizer().set_global(config))
    prepared(*exported.example_inputs[0])
    per_tensor = down_projection["torch"].export.export(
        convert_pt2e(prepared), exported.example_inputs[0]
    )
    samples = down_projection["samples"]
    assert (
        _worst_share(_on_xnnpack(per_tensor, samples, tmp_path), _eager(per_tensor, samples)) > 3e-3
    )
    per_row = quantize(exported, "int8-dynamic", [exported.example_inputs[0]])
    # The device's outputs are the same whichever of the two was lowered.
    assert _worst_share(_on_xnnpack(per_tensor, samples, tmp_path), _eager(per_row, samples)) < 1e-5


def test_static_int8_keeps_its_calibrated_per_tensor_grid(
    down_projection: dict[str, Any],
) -> None:
    import torch

    calibration = [tuple(torch.from_numpy(a) for a in s) for s in down_projection["samples"]]
    program = quantize(down_projection["exported"], "int8", calibration)
    targets = {str(n.target) for n in program.graph.nodes if n.op == "call_function"}
    assert not any("per_token" in t or "choose_qparams" in t for t in targets)
    assert "quantized_decomposed.quantize_per_tensor.default" in targets


def _example(down_projection: dict[str, Any]) -> tuple[Any, ...]:
    # As a build does it: int8-dynamic's one pass over the example inputs (its weights'
    # observers see the weights then).
    return tuple(down_projection["exported"].example_inputs[0])

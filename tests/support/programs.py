"""Real .pte programs built once per session with torch.export and executorch 1.5.1.

- xnnpack.pte: a small CNN lowered with XnnpackPartitioner; its weights land in named-data
  segments the delegate refers to by sha256 key.
- portable.pte: the same CNN with no partitioner, plus a second method (`features`) that
  shares the conv weights; constants land in the constant segment, stored once.
- external.pte: constants moved out to external data (.ptd); the program names them.

Weights are the model's own initialisation (torch.manual_seed(0)), real float entropy.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest


@dataclass(frozen=True)
class BuiltPrograms:
    xnnpack: Path
    portable: Path
    external: Path
    params: dict[str, tuple[tuple[int, ...], int]]  # name -> (shape, nbytes)
    weights: Path  # a few MB of the float weights of initialised layers, raw


def _model() -> Any:
    import torch

    class SmallCnn(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 16, 3)
            self.fc = torch.nn.Linear(16 * 30 * 30, 64)
            self.out = torch.nn.Linear(64, 10)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.out(torch.relu(self.fc(torch.relu(self.conv(x)).flatten(1))))

    class Features(torch.nn.Module):
        def __init__(self, base: SmallCnn) -> None:
            super().__init__()
            self.base = base

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(self.base.conv(x))

    torch.manual_seed(0)
    model = SmallCnn().eval()
    return model, Features(model).eval()


@pytest.fixture(scope="session")
def programs(tmp_path_factory: pytest.TempPathFactory) -> BuiltPrograms:
    import numpy as np
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower

    out = tmp_path_factory.mktemp("sizecheck-pte")
    model, features = _model()
    example = (torch.randn(1, 3, 32, 32),)
    with torch.no_grad():
        xnn = to_edge_transform_and_lower(
            torch.export.export(model, example), partitioner=[XnnpackPartitioner()]
        ).to_executorch()
        portable = to_edge_transform_and_lower(
            {
                "forward": torch.export.export(model, example),
                "features": torch.export.export(features, example),
            }
        ).to_executorch()
        external = to_edge_transform_and_lower(torch.export.export(model, example)).to_executorch(
            config=ExecutorchBackendConfig(external_constants=True)
        )
    paths = {}
    for name, prog in (("xnnpack", xnn), ("portable", portable), ("external", external)):
        paths[name] = out / f"{name}.pte"
        paths[name].write_bytes(prog.buffer)

    # A few MB of real float weights: freshly initialised layers (kaiming-uniform, as
    # PyTorch initialises them), not zeros or a repeated pattern.
    torch.manual_seed(1)
    layers = [torch.nn.Linear(512, 512) for _ in range(4)] + [torch.nn.Conv2d(128, 128, 3)]
    flat = np.concatenate([p.detach().numpy().ravel() for la in layers for p in la.parameters()])
    weights = out / "weights.bin"
    weights.write_bytes(flat.astype(np.float32).tobytes())
    params = {
        k: (tuple(v.shape), v.numel() * v.element_size()) for k, v in model.state_dict().items()
    }
    return BuiltPrograms(
        xnnpack=paths["xnnpack"],
        portable=paths["portable"],
        external=paths["external"],
        params=params,
        weights=weights,
    )


@dataclass(frozen=True)
class TrainedPrograms:
    """Real trained weights (tests/sizecheck/weights.py) as real programs and payloads."""

    float_pte: Path  # the trained MLP, not delegated: weights in the constant segment
    int8_pte: Path  # the same, PT2E int8 per-channel, XNNPACK: qc8 weights in named data
    float_payload: Path  # 48 MB of the trained float weights (permuted copies)
    int8_payload: Path  # 48 MB of them as per-channel int8, scales and biases


PAYLOAD_BYTES = 48 * 1024 * 1024


def _trained_params() -> list[Any]:
    # Trained once per etdeploy cache (about 10 s); tests/conftest.py gives the test run its
    # own cache, kept between runs.
    import numpy as np

    from etdeploy.atomic import atomic_write
    from etdeploy.paths import cache_dir
    from tests.sizecheck import weights

    path = cache_dir("test-weights") / f"digits-mlp-{weights.SEED}-{weights.HIDDEN}.npz"
    try:
        with np.load(path) as stored:
            return [stored[f"arr_{i}"] for i in range(len(stored.files))]
    except (OSError, ValueError):  # not trained yet, or a damaged file: train again
        pass
    params = weights.train_digits_mlp()
    buffer = io.BytesIO()
    np.savez(buffer, *params)
    atomic_write(path, buffer.getvalue())
    return params


@pytest.fixture(scope="session")
def trained(tmp_path_factory: pytest.TempPathFactory) -> TrainedPrograms:
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from executorch.exir import to_edge_transform_and_lower
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from tests.sizecheck import weights

    out = tmp_path_factory.mktemp("sizecheck-trained")
    params = _trained_params()
    model = weights.load_into(params)
    # Real inputs: the digits themselves (calibration for the int8 activations).
    from sklearn.datasets import load_digits

    digits = torch.tensor(load_digits().images.reshape(-1, 64)[:32] / 16.0, dtype=torch.float32)
    example = (digits[:4],)
    with torch.no_grad():
        exported = torch.export.export(model, example)
        float_pte = out / "trained-float.pte"
        float_pte.write_bytes(to_edge_transform_and_lower(exported).to_executorch().buffer)
        quantizer = XNNPACKQuantizer().set_global(
            get_symmetric_quantization_config(is_per_channel=True)
        )
        prepared = prepare_pt2e(exported.module(), quantizer)
        for start in range(0, len(digits), 4):
            prepared(digits[start : start + 4])
        quantized = torch.export.export(convert_pt2e(prepared), example)
        int8_pte = out / "trained-int8.pte"
        int8_pte.write_bytes(
            to_edge_transform_and_lower(quantized, partitioner=[XnnpackPartitioner()])
            .to_executorch()
            .buffer
        )
    float_payload = out / "trained-float.bin"
    weights.write_payload(float_payload, params, PAYLOAD_BYTES)
    int8_payload = out / "trained-int8.bin"
    weights.write_payload(int8_payload, params, PAYLOAD_BYTES, int8=True)
    return TrainedPrograms(float_pte, int8_pte, float_payload, int8_payload)

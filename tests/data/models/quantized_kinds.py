"""Models whose outputs must be judged by their kind, for the quantized-verification tests.

Each factory ships its own real samples: structured signals written next to this
file on first use (square waves, ramps and steps: what a sensor or a feature
extractor produces), never random noise. The samples double as calibration data.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
import torch
from torch import nn

# Beside the test run's cache, not in the source tree.
SAMPLES = Path(os.environ.get("ETDEPLOY_CACHE_DIR", tempfile.gettempdir())) / "quantized-kinds"


def _signals(folder: Path, length: int, *, drift: float, count: int = 12) -> list[Path]:
    """Square waves of several periods and amplitudes, drifting by `drift` per step
    (a drift of 1e-3 or more on every other one only). With a tiny drift the flat
    tops of a smoothed wave differ by far less than an int8 step: equal peaks
    once quantized (ties for any argmax)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    t = np.arange(length, dtype=np.float32)
    for i in range(count):
        period = 8 + 4 * (i % 4)
        amplitude = 0.5 + 0.25 * (i % 3)
        wave = amplitude * np.sign(np.sin(2 * np.pi * t / period)).astype(np.float32)
        if i % 2 or drift < 1e-3:
            wave = wave + np.float32(drift) * t
        path = folder / f"signal{i:02d}.npy"
        if not path.exists():
            np.save(path, wave.reshape(1, length).astype(np.float32))
        paths.append(path)
    return paths


class Smoothing(nn.Module):
    """A 5-tap moving average: a regression output [1, 64] that looks like logits
    by its shape, with many equal peaks."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(1, 1, 5, padding=2, bias=False)
        with torch.no_grad():
            self.conv.weight.fill_(0.2)

    def forward(self, signal: torch.Tensor) -> torch.Tensor:
        return self.conv(signal.unsqueeze(1)).squeeze(1)


def smoothing():
    """No declared kind: the [1, 64] output is guessed a classifier, top-1 only reported."""
    from etdeploy.model import ModelSpec

    return ModelSpec(
        module=Smoothing().eval(),
        example_inputs=(torch.zeros(1, 64),),
        input_names=["signal"],
        output_names=["smoothed"],
        samples=_signals(SAMPLES / "level64", 64, drift=1e-4),
    )


class NearTies(nn.Module):
    """Four classes whose first two logits differ by a hair: int8 cannot keep the
    argmax between them, though it keeps the signal (high SQNR)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(64, 4, bias=False)
        with torch.no_grad():
            base = torch.linspace(0.5, 1.5, 64) / 64
            tilt = torch.linspace(-1.0, 1.0, 64) / 64
            self.fc.weight.copy_(torch.stack([base, base + 2e-3 * tilt, -base, 0.5 * tilt]))

    def forward(self, signal: torch.Tensor) -> torch.Tensor:
        return self.fc(signal)


def near_ties():
    """A declared classifier: top-1 agreement is part of the accuracy budget."""
    from etdeploy.model import ModelSpec

    return ModelSpec(
        module=NearTies().eval(),
        example_inputs=(torch.zeros(1, 64),),
        input_names=["signal"],
        output_names=["logits"],
        output_kinds={"logits": "classifier"},
        samples=_signals(SAMPLES / "drifting64", 64, drift=0.01),
    )


class Embedder(nn.Module):
    """A small feature extractor: an embedding judged by cosine."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(5)
        self.net = nn.Sequential(nn.Linear(64, 32), nn.Tanh(), nn.Linear(32, 16))

    def forward(self, signal: torch.Tensor) -> torch.Tensor:
        return self.net(signal)


def embedder():
    from etdeploy.model import ModelSpec

    return ModelSpec(
        module=Embedder().eval(),
        example_inputs=(torch.zeros(1, 64),),
        input_names=["signal"],
        output_names=["embedding"],
        output_kinds={"embedding": "embedding"},
        samples=_signals(SAMPLES / "drifting64", 64, drift=0.01),
    )

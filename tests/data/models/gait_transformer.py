"""A stock torch.nn.TransformerEncoderLayer over a window of IMU readings of any
length (4..32 steps, exported dynamic), as a new user would write it, for the
localisation tests on XNNPACK (fp32 and int8).

Small (d_model 16, two heads) so it builds in seconds. Inputs are walking
gait at 50 Hz (accelerometer in m/s^2 with gravity on z, gyroscope in rad/s),
windows of 12, 20 and 24 steps; int8 is calibrated on 16-step windows (the
example's length).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
import torch
from torch import nn

SAMPLES = Path(os.environ.get("ETDEPLOY_CACHE_DIR", tempfile.gettempdir())) / "gait"
D_MODEL = 16


def _gait(folder: Path, lengths: tuple[int, ...], phase: float) -> list[Path]:
    """Accelerometer and gyroscope while walking: a step rhythm of 1.6-2.2 Hz,
    the vertical bounce at twice it, at the sensors' resolution."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, steps in enumerate(lengths):
        t = np.arange(steps) / 50.0 + phase
        cadence = 1.6 + 0.2 * i
        angle = 2 * np.pi * cadence * t
        acc = np.stack(
            [0.3 * np.sin(angle), 0.2 * np.cos(angle), 9.81 + 1.5 * np.sin(2 * angle)], axis=1
        )
        gyro = np.stack(
            [0.5 * np.cos(angle + 0.3), 0.1 * np.sin(angle), 0.05 + 0.02 * np.sin(2 * angle)],
            axis=1,
        )
        window = np.concatenate([np.round(acc, 3), np.round(gyro, 4)], axis=1)[None]
        path = folder / f"walk{i}_{steps}.npy"
        if not path.exists():
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp.npy")
            np.save(tmp, window.astype(np.float32))
            os.replace(tmp, path)
        paths.append(path)
    return paths


class GaitTransformer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(5)
        self.embed = nn.Linear(6, D_MODEL)
        self.layer = nn.TransformerEncoderLayer(
            D_MODEL, nhead=2, dim_feedforward=32, dropout=0.1, batch_first=True
        )
        self.head = nn.Linear(D_MODEL, 4)

    def forward(self, imu: torch.Tensor) -> torch.Tensor:
        return self.head(self.layer(self.embed(imu)))


def build():
    from etdeploy.model import ModelSpec

    return ModelSpec(
        module=GaitTransformer().eval(),
        example_inputs=(torch.zeros(1, 16, 6),),
        name="gait_transformer",
        input_names=["imu"],
        output_names=["activity"],
        output_kinds={"activity": "regression"},
        dynamic={"imu": {1: (4, 32)}},
        samples=_gait(SAMPLES / "verify", (12, 20, 24), phase=0.0),
        calibration=_gait(SAMPLES / "calibrate", (16, 16, 16, 16), phase=3.0),
    )

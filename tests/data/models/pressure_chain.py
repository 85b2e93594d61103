"""A sensor model with a real ExecuTorch precision loss in the middle of a chain,
for the localisation tests.

Barometric pressure in hPa: a window's mean (about 1000) dwarfs its spread (a
few hPa), so a layer_norm over it must subtract two nearly equal numbers.
Eager PyTorch computes the moments accurately; ExecuTorch's portable CPU kernel
for native_layer_norm computes the variance as E[x^2] - E[x]^2 in float32
(kernels/portable/cpu/op_native_layer_norm.cpp, read 2026-12-03), where each
term is about 1e6 and their difference a few units, so the variance, and every
normalised value after it, is off by percent. The optimized kernel library our
runner links falls back to that scalar code below 256 normalised elements (its
op_native_layer_norm.cpp; measured here: a 256-reading window stays within
1e-4), so the window is 64 readings. XNNPACK does not take layer_norm: it runs
on that CPU kernel in the XNNPACK build too.

The chain: a per-station calibration add (large magnitude, exact in float32:
innocent), the layer_norm (the culprit), then two linear layers that carry the
error on (innocent).

`correct` is the same model on pressure anomalies (the station mean removed
first, in the data), where the layer_norm is well conditioned and every
backend agrees with eager.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
import torch
from torch import nn

WINDOW = 64  # hourly readings
# Beside the test run's cache, not in the source tree.
SAMPLES = Path(os.environ.get("ETDEPLOY_CACHE_DIR", tempfile.gettempdir())) / "pressure-chain"


def _pressure_windows(folder: Path, *, anomalies: bool, count: int = 8) -> list[Path]:
    """Hourly station pressure over 64 hours: a station's mean level (990-1030
    hPa), a passing weather system (a slow swing of a few hPa), the semidiurnal
    atmospheric tide (about 1 hPa, period 12 h) and the sensor's 0.01 hPa
    resolution. With `anomalies` the station's mean is removed."""
    folder.mkdir(parents=True, exist_ok=True)
    hours = np.arange(WINDOW, dtype=np.float64)
    paths = []
    for i in range(count):
        level = 990.0 + 40.0 * i / max(count - 1, 1)
        front = (2.0 + 0.5 * i) * np.sin(2 * np.pi * hours / (96 + 12 * i) + 0.7 * i)
        tide = 0.9 * np.cos(2 * np.pi * (hours + 2 * i) / 12.0)
        reading = np.round(level + front + tide, 2)
        if anomalies:
            reading = reading - reading.mean()
        path = folder / f"station{i:02d}.npy"
        if not path.exists():
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp.npy")
            np.save(tmp, reading.astype(np.float32).reshape(1, WINDOW))
            os.replace(tmp, path)
        paths.append(path)
    return paths


class PressureChain(nn.Module):
    def __init__(self, calibrate: bool = True) -> None:
        super().__init__()
        torch.manual_seed(13)
        # A per-station sensor calibration, in hPa: small next to the readings.
        self.calibration = nn.Parameter(torch.linspace(-0.4, 0.4, WINDOW)) if calibrate else None
        self.norm = nn.LayerNorm(WINDOW)
        self.head = nn.Sequential(nn.Linear(WINDOW, 32), nn.ReLU(), nn.Linear(32, 8))

    def forward(self, pressure: torch.Tensor) -> torch.Tensor:
        calibrated = pressure + self.calibration if self.calibration is not None else pressure
        normalised = self.norm(calibrated)
        return self.head(normalised)


def _spec(anomalies: bool, calibrate: bool = True):
    from etdeploy.model import ModelSpec

    return ModelSpec(
        module=PressureChain(calibrate).eval(),
        example_inputs=(torch.zeros(1, WINDOW),),
        name="pressure_chain",
        input_names=["pressure"],
        output_names=["forecast"],
        output_kinds={"forecast": "regression"},
        samples=_pressure_windows(
            SAMPLES / ("anomalies" if anomalies else "absolute"), anomalies=anomalies
        ),
    )


def build():
    """Absolute pressure: the layer_norm loses precision on every backend."""
    return _spec(anomalies=False)


def correct():
    """Pressure anomalies: the same network, well conditioned."""
    return _spec(anomalies=True)


def uncalibrated():
    """Absolute pressure without the calibration add, for int8: XNNPACK's
    quantizer would put the add's output (about 1000 hPa) on a grid of about
    4 hPa steps, erasing the signal; without it the readings stay float into
    the layer_norm (which XNNPACK's quantizer leaves in float on the CPU) and
    the linear layers after it run in int8."""
    return _spec(anomalies=False, calibrate=False)

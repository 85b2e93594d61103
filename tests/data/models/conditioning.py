"""Small sensor models for the localisation tests: where an error is born, and
where float32's conditioning makes it visible.

Each runs real ExecuTorch CPU kernels on structured sensor signals (not noise).
Sums and means on ExecuTorch's portable kernels accumulate in one float32 loop
(kernels/portable/cpu/op_mean.cpp, op_sum.cpp, read 2026-12-04); eager PyTorch
sums blockwise (its cascade sum), so the two round differently, each well
within what float32 allows a sum over n values (about n * epsilon of the sum of
magnitudes). Neither is wrong; a later operation can make the difference seen:

- `detrend`: the window's mean removed from barometric pressure in pascals
  (about 101 kPa, varying by tens of pascals): the subtraction cancels all but
  the last few digits, so the mean's rounding becomes a percent of the result.
- `ratio`: each accelerometer axis divided by its own mean level; one axis is
  nearly level (its mean a few thousandths of g), so a rounding the device
  and eager share equally in absolute terms is a large part of that quotient.
- `attention`: a softmax over the energy of each time step (sums of squared
  readings in large units): logits in the thousands, where an absolute
  rounding of the logits changes the weights by a visible fraction.

`thermal` is a different kind: ExecuTorch's portable native_group_norm
computes the variance as E[x^2] - E[x]^2 in float32 (op_native_group_norm.cpp,
read 2026-12-04), which for temperatures in kelvin (a mean near 300 K, a spread
of about a kelvin) loses most of its digits. The group norm is the operator
that computes something wrong given its inputs: the linear layers before and
after it are innocent.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
import torch
from torch import nn

# Beside the test run's cache, not in the source tree.
SAMPLES = Path(os.environ.get("ETDEPLOY_CACHE_DIR", tempfile.gettempdir())) / "conditioning"


def _save(folder: Path, name: str, array: np.ndarray) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.npy"
    if not path.exists():
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp.npy")
        np.save(tmp, array.astype(np.float32))
        os.replace(tmp, path)
    return path


# -- detrend: a reduction whose rounding a later subtraction reveals ----------------------------

PRESSURE_WINDOW = 2048  # readings at 10 Hz: about 3.4 minutes


def _pressure_pa(count: int = 4) -> list[Path]:
    """Barometric pressure in Pa at 10 Hz: a station level (99-103 kPa), a slow
    drift of a passing front, and building sway (a 0.2 Hz swing of a few Pa),
    at the sensor's 0.25 Pa resolution."""
    t = np.arange(PRESSURE_WINDOW) / 10.0
    paths = []
    for i in range(count):
        level = 99_000.0 + 1_300.0 * i
        drift = (8.0 + 3.0 * i) * np.sin(2 * np.pi * t / (600.0 + 90.0 * i))
        sway = 2.5 * np.sin(2 * np.pi * 0.2 * t + i)
        reading = np.round((level + drift + sway) * 4.0) / 4.0
        paths.append(_save(SAMPLES / "pressure_pa", f"site{i}", reading.reshape(1, -1)))
    return paths


class Detrend(nn.Module):
    """Pressure anomalies (the window's mean removed), then a small head."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(21)
        self.head = nn.Linear(PRESSURE_WINDOW, 4)

    def forward(self, pressure: torch.Tensor) -> torch.Tensor:
        level = pressure.mean(dim=-1, keepdim=True)
        anomaly = pressure - level
        return self.head(anomaly * 0.05)


def detrend():
    return _spec(
        Detrend(),
        torch.full((1, PRESSURE_WINDOW), 101_325.0),
        "detrend",
        "pressure",
        "features",
        _pressure_pa(),
    )


# -- altitude: a level added on the way, then a mean and a subtraction ---------------------------

ALTITUDE_WINDOW = 4096  # barometric altitude at 20 Hz: about 3.4 minutes


def _height_m(count: int = 4) -> list[Path]:
    """Height above the launch site in metres (a drone holding its altitude: a slow
    drift of a few centimetres and a 0.5 Hz bob of millimetres), at the sensor's
    0.1 mm resolution."""
    t = np.arange(ALTITUDE_WINDOW) / 20.0
    paths = []
    for i in range(count):
        drift = (0.03 + 0.01 * i) * np.sin(2 * np.pi * t / (120.0 + 30.0 * i))
        bob = 0.004 * np.sin(2 * np.pi * 0.5 * t + i)
        reading = np.round((drift + bob) * 10_000.0) / 10_000.0
        paths.append(_save(SAMPLES / "height_m", f"flight{i}", reading.reshape(1, -1)))
    return paths


class Altitude(nn.Module):
    """Height above sea level (the site's elevation added: values near 1,000 m), its
    window mean removed, then a small head: the add makes the values large, the mean's
    rounding differs between the device and eager, the subtraction cancels."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(23)
        self.head = nn.Linear(ALTITUDE_WINDOW, 4)

    def forward(self, height: torch.Tensor) -> torch.Tensor:
        altitude = height + 1_013.0
        level = altitude.mean(dim=-1, keepdim=True)
        return self.head(altitude - level)


def altitude():
    return _spec(
        Altitude(), torch.zeros((1, ALTITUDE_WINDOW)), "altitude", "height", "features",
        _height_m(),
    )  # fmt: skip


# -- ratio: a division by a small value ------------------------------------------------------------

ACCEL_WINDOW = 1024  # 100 Hz


def _acceleration(count: int = 4) -> list[Path]:
    """A phone on a table that rocks slowly (one 0.1 Hz period per window) and
    vibrates at 30 Hz, in m/s^2: gravity on z, a tilt of a few milliradians on
    y, almost none on x (the rocking averages out over the window), at the
    sensor's 0.001 m/s^2 steps."""
    t = np.arange(ACCEL_WINDOW) / 100.0
    paths = []
    for i in range(count):
        levels = np.array([0.0005 * (i + 1), 9.81 * (0.002 + 0.001 * i), 9.81])[:, None]
        rocking = np.array([[4.0], [0.5], [0.1]]) * np.sin(2 * np.pi * t / 10.24 + 0.3 * i)
        vibration = 0.8 * np.sin(2 * np.pi * 30.0 * t + np.array([[0.0], [1.1], [2.3]]) + i)
        reading = np.round((levels + rocking + vibration) * 1000.0) / 1000.0
        paths.append(_save(SAMPLES / "acceleration", f"table{i}", reading[None]))
    return paths


class Ratio(nn.Module):
    """Each axis relative to its own mean level."""

    def forward(self, acceleration: torch.Tensor) -> torch.Tensor:
        level = acceleration.mean(dim=-1, keepdim=True)
        return acceleration[..., :64] / level


def ratio():
    return _spec(
        Ratio(),
        torch.ones(1, 3, ACCEL_WINDOW),
        "ratio",
        "acceleration",
        "relative",
        _acceleration(),
    )


# -- attention: a softmax over large logits (no operator wrong) --------------------------------------

STEPS, FEATURES = 16, 2048


def _vibration_energy(count: int = 4) -> list[Path]:
    """16 time steps of a 2048-bin vibration spectrum in (mm/s)^2: a machine's
    running line near 50 Hz over a broad floor (about 50 per bin, so a step's
    energy is about 1e5), and a bearing fault that grows over the window."""
    bins = np.arange(FEATURES)
    paths = []
    for i in range(count):
        rows = []
        for step in range(STEPS):
            floor = 50.0 + 7.0 * np.cos(bins / 37.0) + 3.0 * np.sin(bins / 5.3 + i)
            line = 900.0 * (1.0 + 0.001 * np.sin(step)) * np.exp(-(((bins - 50) / 3.0) ** 2))
            fault = (0.02 * (i + 1) * step) * np.exp(-(((bins - 310) / 8.0) ** 2))
            rows.append(floor + line + fault)
        paths.append(_save(SAMPLES / "vibration", f"machine{i}", np.stack(rows)[None]))
    return paths


class Attention(nn.Module):
    """Which time step holds the event: a softmax over each step's total energy."""

    def forward(self, spectrum: torch.Tensor) -> torch.Tensor:
        energy = spectrum.sum(dim=-1)
        return torch.softmax(energy, dim=-1)


def attention():
    return _spec(
        Attention(),
        torch.ones(1, STEPS, FEATURES),
        "attention",
        "spectrum",
        "weights",
        _vibration_energy(),
    )


# -- thermal: a broken operator mid-chain ------------------------------------------------------------

SENSORS, HOURS = 8, 32


def _temperatures(count: int = 4) -> list[Path]:
    """Eight thermistors along a pipe, hourly, in kelvin: each sensor's level
    (290-300 K, 0.8 K apart), a daily swing of about half a kelvin, at 0.01 K
    resolution."""
    hours = np.arange(HOURS)
    paths = []
    for i in range(count):
        levels = 290.0 + 0.8 * np.arange(SENSORS)[:, None] + 1.5 * i
        swing = (0.5 + 0.1 * i) * np.sin(2 * np.pi * (hours + 3 * i) / 24.0)
        gradient = 0.05 * np.arange(SENSORS)[:, None] * np.cos(2 * np.pi * hours / 24.0)
        reading = np.round((levels + swing + gradient) * 100.0) / 100.0
        paths.append(_save(SAMPLES / "thermal", f"pipe{i}", reading[None]))
    return paths


class Thermal(nn.Module):
    """A per-sensor calibration (linear, near identity), a group norm over each
    pair of sensors, then a linear head."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(31)
        self.calibrate = nn.Conv1d(SENSORS, SENSORS, 1)
        with torch.no_grad():
            self.calibrate.weight.copy_(torch.eye(SENSORS).unsqueeze(-1) * 1.001)
            self.calibrate.bias.copy_(torch.linspace(-0.2, 0.2, SENSORS))
        self.norm = nn.GroupNorm(SENSORS // 2, SENSORS)
        self.head = nn.Linear(HOURS, 6)

    def forward(self, temperature: torch.Tensor) -> torch.Tensor:
        calibrated = self.calibrate(temperature)
        normalised = self.norm(calibrated)
        return self.head(normalised)


def thermal():
    return _spec(
        Thermal(),
        torch.full((1, SENSORS, HOURS), 300.0),
        "thermal",
        "temperature",
        "state",
        _temperatures(),
    )


def _spec(module: nn.Module, example: torch.Tensor, name: str, given: str, gives: str,
          samples: list[Path]):  # fmt: skip
    from etdeploy.model import ModelSpec

    return ModelSpec(
        module=module.eval(), example_inputs=(example,), name=name, input_names=[given],
        output_names=[gives], output_kinds={gives: "regression"}, samples=samples,
    )  # fmt: skip

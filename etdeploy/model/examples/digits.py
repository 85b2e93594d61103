"""`digits`: a small CNN on scikit-learn's 8x8 handwritten digits (real data that
ships with scikit-learn, no download). Trained deterministically on first use in
a few seconds on CPU and cached. Its samples are the whole held-out split with
their labels (one .npz: x and y), so every run of it is also a task-accuracy check;
int8 builds calibrate on training images, never on the test set.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from etdeploy.model.spec import ModelSpec
from etdeploy.paths import cache_dir

if TYPE_CHECKING:  # imported where used: the examples load without torch
    import numpy as np
    import torch

SEED = 20261202
EPOCHS = 12
# Test images never seen in training (a fifth of the 1,797): the real sample inputs.
HELD_OUT = 360
CALIBRATION = 64  # training images an int8 build calibrates on
# Bump when the architecture, training or split changes, so stale files are not reused.
VERSION = 2


def _model() -> torch.nn.Module:
    import torch
    from torch import nn

    class DigitsNet(nn.Module):
        """Two convolutions (the second strided, so no pooling op is needed by any
        backend) and a linear classifier over 10 digits."""

        def __init__(self) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
            self.conv2 = nn.Conv2d(16, 32, 3, stride=2, padding=1)
            self.fc = nn.Linear(32 * 4 * 4, 10)

        def forward(self, image: torch.Tensor) -> torch.Tensor:
            x = torch.relu(self.conv1(image))
            x = torch.relu(self.conv2(x))
            scores: torch.Tensor = self.fc(x.flatten(1))
            return scores

    return DigitsNet()


def _data() -> tuple[np.ndarray, np.ndarray]:
    import numpy as np
    from sklearn.datasets import load_digits

    digits = load_digits()
    # Pixel values are 0..16; scale to 0..1 as a preprocessing step would.
    images = (digits.images.astype(np.float32) / 16.0)[:, None, :, :]
    labels = digits.target.astype(np.int64)
    order = np.random.default_rng(SEED).permutation(len(labels))
    return images[order], labels[order]


def _train(weights: Path) -> float:
    import torch

    torch.manual_seed(SEED)
    images, labels = _data()
    train_x = torch.from_numpy(images[HELD_OUT:])
    train_y = torch.from_numpy(labels[HELD_OUT:])
    model = _model()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    generator = torch.Generator().manual_seed(SEED)
    for _ in range(EPOCHS):
        order = torch.randperm(len(train_y), generator=generator)
        for start in range(0, len(order), 64):
            batch = order[start : start + 64]
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(train_x[batch]), train_y[batch])
            loss.backward()
            optimizer.step()
    model.eval()
    with torch.no_grad():
        test_x = torch.from_numpy(images[:HELD_OUT])
        accuracy = float((model(test_x).argmax(1).numpy() == labels[:HELD_OUT]).mean())
    tmp = weights.with_suffix(f".tmp{os.getpid()}")
    torch.save(model.state_dict(), tmp)
    os.replace(tmp, weights)
    return accuracy


def ensure_trained() -> Path:
    """The cached example directory: weights.pt, held_out.npz (x, y), calibration/*.npy,
    info.json."""
    import filelock
    import numpy as np

    root = cache_dir("models") / f"digits-v{VERSION}"
    root.mkdir(parents=True, exist_ok=True)
    info_path = root / "info.json"
    with filelock.FileLock(str(root / ".lock")):
        if info_path.exists():
            return root
        accuracy = _train(root / "weights.pt")
        images, labels = _data()
        held_out = root / f"held_out.tmp{os.getpid()}.npz"
        np.savez(held_out, x=images[:HELD_OUT], y=labels[:HELD_OUT])
        os.replace(held_out, root / "held_out.npz")
        calibration = root / "calibration"
        calibration.mkdir(exist_ok=True)
        for i in range(HELD_OUT, HELD_OUT + CALIBRATION):
            np.save(calibration / f"train{i:04d}.npy", images[i : i + 1])
        tmp = info_path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"held_out_accuracy": accuracy, "held_out": HELD_OUT}))
        os.replace(tmp, info_path)
    return root


def build() -> ModelSpec:
    import torch

    root = ensure_trained()
    model = _model()
    model.load_state_dict(torch.load(root / "weights.pt", weights_only=True))
    model.eval()
    # A shape specification only: verification uses the held-out samples.
    example = (torch.zeros(1, 1, 8, 8),)
    return ModelSpec(
        module=model,
        example_inputs=example,
        name="digits",
        input_names=["image"],
        output_names=["logits"],
        output_kinds={"logits": "classifier"},
        samples=[root / "held_out.npz"],
        calibration=[root / "calibration"],
        task="classification",
    )

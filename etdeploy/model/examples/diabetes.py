"""`diabetes`: a small regression MLP on scikit-learn's diabetes data (442 patients,
ten baseline measurements, disease progression a year later: real data that ships with
scikit-learn, no download; Efron et al. 2004, "Least Angle Regression", Annals of
Statistics 32(2)). Trained deterministically on first use in about a second and
cached. Its samples are the held-out fifth with their targets, so a run of it scores
the regression task (mean absolute error on the device beside eager, paired per
patient) as digits scores classification.
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

SEED = 20261204
EPOCHS = 300
HELD_OUT = 88  # a fifth of the 442 patients, never seen in training
# Bump when the architecture, training or split changes, so stale files are not reused.
VERSION = 1


def _model() -> torch.nn.Module:
    from torch import nn

    return nn.Sequential(
        nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 16), nn.ReLU(), nn.Linear(16, 1)
    )


def _data() -> tuple[np.ndarray, np.ndarray]:
    import numpy as np
    from sklearn.datasets import load_diabetes

    data = load_diabetes()
    # The features come mean-centred and scaled by scikit-learn; the target is kept in
    # its own units (a disease progression score, 25..346), so errors read as such.
    features = data.data.astype(np.float32)
    targets = data.target.astype(np.float32)
    order = np.random.default_rng(SEED).permutation(len(targets))
    return features[order], targets[order]


def _train(weights: Path) -> float:
    import torch

    torch.manual_seed(SEED)
    features, targets = _data()
    x = torch.from_numpy(features[HELD_OUT:])
    y = torch.from_numpy(targets[HELD_OUT:])[:, None]
    model = _model()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(EPOCHS):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        test = model(torch.from_numpy(features[:HELD_OUT]))[:, 0].numpy()
    error = float(abs(test - targets[:HELD_OUT]).mean())
    tmp = weights.with_suffix(f".tmp{os.getpid()}")
    torch.save(model.state_dict(), tmp)
    os.replace(tmp, weights)
    return error


def ensure_trained() -> Path:
    """The cached example directory: weights.pt, held_out.npz (x, y), info.json."""
    import filelock
    import numpy as np

    root = cache_dir("models") / f"diabetes-v{VERSION}"
    root.mkdir(parents=True, exist_ok=True)
    info_path = root / "info.json"
    with filelock.FileLock(str(root / ".lock")):
        if info_path.exists():
            return root
        error = _train(root / "weights.pt")
        features, targets = _data()
        held_out = root / f"held_out.tmp{os.getpid()}.npz"
        np.savez(held_out, x=features[:HELD_OUT], y=targets[:HELD_OUT])
        os.replace(held_out, root / "held_out.npz")
        tmp = info_path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"held_out_mean_abs_error": error, "held_out": HELD_OUT}))
        os.replace(tmp, info_path)
    return root


def build() -> ModelSpec:
    import torch

    root = ensure_trained()
    model = _model()
    model.load_state_dict(torch.load(root / "weights.pt", weights_only=True))
    model.eval()
    return ModelSpec(
        module=model,
        example_inputs=(torch.zeros(1, 10),),
        name="diabetes",
        input_names=["measurements"],
        output_names=["progression"],
        output_kinds={"progression": "regression"},
        samples=[root / "held_out.npz"],
        task="regression",
    )

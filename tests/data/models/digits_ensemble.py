"""`digits_ensemble`: about 256 MB of real float weights, for the warm-run benchmark and the
multi-GB-class tests (issue 20); `embedder`: the same copies as a 256 MB embedding model, for
the memory benchmark (issue 26).

The weights are fifteen copies of one trained network, not random numbers: the MLP of
tests/sizecheck/weights.py (64 -> 2048 -> 2048 -> 10, 4.35 M parameters, 17.4 MB), trained
deterministically on scikit-learn's handwritten digits (shipped with scikit-learn, no
download) in about 10 s on two cores. Each copy has its hidden units permuted, which is a
symmetry of an MLP: every copy computes exactly what the trained network computes, so
every copy's bytes are a real trained network's weights, in another order. The model
averages the fifteen copies' logits: the trained network's answer, through 261 MB of
weights (15 x 17.4 MB).

Why not random tensors: deflate on float weights gains almost only from the exponent byte,
whose spread depends on the trained distribution, so noise would misstate the size
verdict; and noise weights give noise logits, where a device that computed garbage could
still look close. Why not one network with huge layers: the only real data that ships
offline (the digits) trains a 17 MB network in seconds, and a 256 MB one would take
minutes to train; tiling trained copies keeps the build to the export and lowering.

The trained parameters are cached in etdeploy's cache (models/digits-mlp-<hash of the
training code>); the build and the eager reference run the factory, a warm run never does.
The training code lives in tests/sizecheck/weights.py, which the model's fingerprint does
not see (only files beside this one count): change SEED, HIDDEN or EPOCHS there and run
with --no-cache.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from pathlib import Path
from typing import Any

COPIES = 15
# Held-out-style samples: real digits, one per file, flattened to the MLP's 64 inputs.
SAMPLES = 4
SEED = 20261203

_WEIGHTS_PY = Path(__file__).resolve().parents[2] / "sizecheck" / "weights.py"


def _weights_module() -> Any:
    spec = importlib.util.spec_from_file_location("etdeploy_digits_mlp_weights", _WEIGHTS_PY)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _trained(weights: Any) -> tuple[list[Any], Path]:
    """The trained MLP's parameters, trained once and cached; and the sample directory."""
    import filelock
    import numpy as np
    from sklearn.datasets import load_digits

    from etdeploy.paths import cache_dir

    code = hashlib.sha256(_WEIGHTS_PY.read_bytes()).hexdigest()[:16]
    root = cache_dir("models") / f"digits-mlp-{code}"
    root.mkdir(parents=True, exist_ok=True)
    params_path = root / "params.npz"
    samples = root / "samples"
    with filelock.FileLock(str(root / ".lock")):
        if not params_path.is_file():
            params = weights.train_digits_mlp()
            tmp = root / f".params.{os.getpid()}.npz"
            np.savez(tmp, *params)
            os.replace(tmp, params_path)
        if not samples.is_dir():
            digits = load_digits()
            staging = root / f".samples.{os.getpid()}"
            staging.mkdir()
            for i in range(SAMPLES):
                image = (digits.images[i].reshape(1, 64) / 16.0).astype(np.float32)
                np.save(staging / f"digit{i:02d}_label{digits.target[i]}.npy", image)
            os.replace(staging, samples)
    with np.load(params_path) as archive:
        params = [archive[f"arr_{i}"] for i in range(len(archive.files))]
    return params, samples


def _copies() -> tuple[Any, list[list[Any]], Path]:
    import numpy as np

    weights = _weights_module()
    params, samples = _trained(weights)
    rng = np.random.default_rng(SEED)
    return weights, [params] + [weights.permuted(params, rng) for _ in range(COPIES - 1)], samples


def build() -> Any:
    import torch

    from etdeploy.model import ModelSpec

    weights, copies, samples = _copies()

    class DigitsEnsemble(torch.nn.Module):
        """COPIES permuted copies of the trained MLP; their logits averaged."""

        def __init__(self) -> None:
            super().__init__()
            self.copies = torch.nn.ModuleList(weights.load_into(c) for c in copies)

        def forward(self, image: torch.Tensor) -> torch.Tensor:
            logits = [mlp(image) for mlp in self.copies]
            return torch.stack(logits).mean(dim=0)

    return ModelSpec(
        module=DigitsEnsemble().eval(),
        example_inputs=(torch.zeros(1, 64),),
        name="digits_ensemble",
        input_names=["image"],
        output_names=["logits"],
        output_kinds={"logits": "classifier"},
        samples=[samples],
    )


def embedder() -> Any:
    """The copies' last hidden layers (2048 features each, after the ReLU) side by side:
    a 30720-wide embedding of a digit through 260 MB of trained weights (the output layers
    are not used, so export drops them). Judged by cosine, as an embedding."""
    import torch

    from etdeploy.model import ModelSpec

    weights, copies, samples = _copies()

    class DigitsEmbedder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.copies = torch.nn.ModuleList(weights.load_into(c)[:4] for c in copies)

        def forward(self, image: torch.Tensor) -> torch.Tensor:
            return torch.cat([features(image) for features in self.copies], dim=1)

    return ModelSpec(
        module=DigitsEmbedder().eval(),
        example_inputs=(torch.zeros(1, 64),),
        name="digits_embedder",
        input_names=["image"],
        output_names=["embedding"],
        output_kinds={"embedding": "embedding"},
        samples=[samples],
    )

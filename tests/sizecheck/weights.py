"""Real trained weights at any size, for the sampled size estimate's tests and benchmark.

Why trained, and not random tensors: deflate gains on float weights almost only from the
exponent byte, whose spread depends on the values' distribution (scale, tails, the dead
units training leaves), and a sampled estimate is only as good as the payload is uneven.
Random noise has neither. So the weights come from a real network trained on real data:
an MLP (64 -> 2048 -> 2048 -> 10, 4.35 M parameters, 17.4 MB) trained for a few epochs on
scikit-learn's handwritten digits (shipped with scikit-learn, no download), deterministic
from its seed, about 10 s on two cores, over 95% accurate on the digits.

Bigger payloads are made of copies of that network with its hidden units permuted: each copy
computes exactly what the trained network computes (permuting hidden units is a symmetry of
an MLP), so each is a real trained network's weights, but no two copies' bytes are in the
same order. (deflate's window is 32 KiB; a copy 17 MB away could not be matched anyway.)

The int8 payload is those weights as XNNPACK stores a per-channel int8 linear layer (its
qc8 weights, `get_symmetric_quantization_config(is_per_channel=True)`): int8 weights
rounded with one symmetric fp32 scale per output channel, the scales, and the fp32 biases.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

SEED = 20261203
HIDDEN = 2048
EPOCHS = 3


def train_digits_mlp(hidden: int = HIDDEN, epochs: int = EPOCHS) -> list[np.ndarray]:
    """[W1, b1, W2, b2, W3, b3] of an MLP trained on the digits, as float32 arrays."""
    import torch
    from sklearn.datasets import load_digits

    torch.manual_seed(SEED)
    digits = load_digits()
    x = torch.tensor(digits.images.reshape(-1, 64) / 16.0, dtype=torch.float32)
    y = torch.tensor(digits.target)
    model = torch.nn.Sequential(
        torch.nn.Linear(64, hidden), torch.nn.ReLU(),
        torch.nn.Linear(hidden, hidden), torch.nn.ReLU(),
        torch.nn.Linear(hidden, 10),
    )  # fmt: skip
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    order = torch.Generator().manual_seed(SEED)
    for _ in range(epochs):
        perm = torch.randperm(len(y), generator=order)
        for start in range(0, len(y), 64):
            batch = perm[start : start + 64]
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x[batch]), y[batch]).backward()
            optimizer.step()
    with torch.no_grad():
        accuracy = float((model(x).argmax(1) == y).float().mean())
    assert accuracy > 0.95, f"the digits MLP did not train ({accuracy:.2f})"
    return [p.detach().numpy().astype(np.float32).copy() for p in model.parameters()]


def load_into(params: list[np.ndarray]) -> Any:
    """The trained MLP as a torch module (for lowering it to a real .pte)."""
    import torch

    w1, _, w2, _, w3, _ = params
    model = torch.nn.Sequential(
        torch.nn.Linear(w1.shape[1], w1.shape[0]), torch.nn.ReLU(),
        torch.nn.Linear(w2.shape[1], w2.shape[0]), torch.nn.ReLU(),
        torch.nn.Linear(w3.shape[1], w3.shape[0]),
    )  # fmt: skip
    with torch.no_grad():
        for p, value in zip(model.parameters(), params, strict=True):
            p.copy_(torch.from_numpy(value))
    return model.eval()


def permuted(params: list[np.ndarray], rng: np.random.Generator) -> list[np.ndarray]:
    """The same network with both hidden layers' units permuted: it computes the same."""
    w1, b1, w2, b2, w3, b3 = params
    p1 = rng.permutation(w1.shape[0])
    p2 = rng.permutation(w2.shape[0])
    return [w1[p1], b1[p1], w2[p2][:, p1], b2[p2], w3[:, p2], b3]


def per_channel_int8(params: list[np.ndarray]) -> list[np.ndarray]:
    """XNNPACK's qc8 layout of each linear layer: int8 weights, fp32 scales, fp32 bias."""
    out: list[np.ndarray] = []
    for weight, bias in zip(params[::2], params[1::2], strict=True):
        scale = np.maximum(np.abs(weight).max(axis=1), 1e-12).astype(np.float32) / 127
        out.append(np.clip(np.round(weight / scale[:, None]), -127, 127).astype(np.int8))
        out.extend([scale, bias.astype(np.float32)])
    return out


def _copies(params: list[np.ndarray], int8: bool, seed: int) -> Iterator[bytes]:
    rng = np.random.default_rng(seed)
    first = True
    while True:
        copy = params if first else permuted(params, rng)
        first = False
        for array in per_channel_int8(copy) if int8 else copy:
            yield array.tobytes()


def write_payload(path: Path, params: list[np.ndarray], nbytes: int, *, int8: bool = False) -> int:
    """At least `nbytes` of the trained weights (float32, or per-channel int8) in
    permuted copies, whole layers only; returns the size written."""
    written = 0
    with path.open("wb") as fh:
        for blob in _copies(params, int8, SEED):
            fh.write(blob)
            written += len(blob)
            if written >= nbytes:
                break
    return written

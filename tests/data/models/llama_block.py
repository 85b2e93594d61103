"""A hand-written Llama-shaped model as a user writes one for a factory: byte tokens
embedded, two decoder blocks (RMSNorm, causal multi-head attention with rotary
positions, RMSNorm, SwiGLU MLP), a final RMSNorm and the next-byte head, over a prompt
of 16 tokens. Its input is the token embeddings of the prompt (what the first block
reads), so the program is the transformer itself.

Real, not noise: trained for a few hundred steps on next-byte prediction over the
license texts Debian ships in every system (/usr/share/common-licenses, package
base-files), verified on prompts from license texts it did not train on. The weights
are trained once and kept in the test cache (ETDEPLOY_CACHE_DIR), single-threaded:
the weights then do not depend on the machine's core count, and a model this small
trains about 8x faster on one thread than on two when the cores are busy (25 s
against 207 s here, 2026-12-05, load 8 on 2 cores).

`build` is the whole model; `down_projection` is the first block's MLP down
projection alone, a multi-row linear fed the real activations it sees on those
prompts (each token's row on a range of its own, several times apart, as a
transformer's are).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

import numpy as np
import torch
from torch import nn

LICENSES = Path("/usr/share/common-licenses")
TRAIN_TEXTS = ("GPL-3", "LGPL-2.1", "Apache-2.0", "GFDL-1.3", "MPL-2.0")
HELD_OUT_TEXTS = ("Artistic", "BSD", "MPL-1.1")
VOCAB = 256  # bytes
WIDTH = 64
HEADS = 4
HIDDEN = 176
LAYERS = 2
PROMPT = 16
PROMPTS = 4
TRAIN_STEPS = 400
TRAIN_THREADS = 1
CACHE = Path(os.environ.get("ETDEPLOY_CACHE_DIR", tempfile.gettempdir())) / "llama_block"


class RMSNorm(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * self.weight


def _rotary(length: int, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    inverse = 1.0 / (10000 ** (torch.arange(0, head_dim, 2).float() / head_dim))
    angles = torch.outer(torch.arange(length).float(), inverse)
    return angles.cos(), angles.sin()


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attention_norm = RMSNorm(WIDTH)
        self.wq = nn.Linear(WIDTH, WIDTH, bias=False)
        self.wk = nn.Linear(WIDTH, WIDTH, bias=False)
        self.wv = nn.Linear(WIDTH, WIDTH, bias=False)
        self.wo = nn.Linear(WIDTH, WIDTH, bias=False)
        self.mlp_norm = RMSNorm(WIDTH)
        self.gate = nn.Linear(WIDTH, HIDDEN, bias=False)
        self.up = nn.Linear(WIDTH, HIDDEN, bias=False)
        self.down = nn.Linear(HIDDEN, WIDTH, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        batch, length, _ = x.shape
        h = self.attention_norm(x)
        heads = (batch, length, HEADS, WIDTH // HEADS)
        q = _rotate(self.wq(h).view(heads), cos, sin).transpose(1, 2)
        k = _rotate(self.wk(h).view(heads), cos, sin).transpose(1, 2)
        v = self.wv(h).view(heads).transpose(1, 2)
        attended = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.wo(attended.transpose(1, 2).reshape(batch, length, WIDTH))
        h = self.mlp_norm(x)
        return x + self.down(nn.functional.silu(self.gate(h)) * self.up(h))


class TinyLlama(nn.Module):
    """Token embeddings in, next-byte logits out."""

    def __init__(self) -> None:
        super().__init__()
        self.embedding = nn.Embedding(VOCAB, WIDTH)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = RMSNorm(WIDTH)
        self.head = nn.Linear(WIDTH, VOCAB, bias=False)
        cos, sin = _rotary(PROMPT, WIDTH // HEADS)
        self.register_buffer("cos", cos[:, None, :], persistent=False)
        self.register_buffer("sin", sin[:, None, :], persistent=False)

    def forward(self, embeddings: torch.Tensor) -> torch.Tensor:
        x = embeddings
        for block in self.blocks:
            x = block(x, self.cos, self.sin)
        return self.head(self.norm(x))


def _text(names: tuple[str, ...]) -> bytes:
    return b"\n".join((LICENSES / name).read_bytes() for name in names)


def _trained() -> TinyLlama:
    """Trained once (seeded) and kept in the cache under the digest of its recipe."""
    torch.manual_seed(0)
    model = TinyLlama()
    recipe = hashlib.sha256(
        _text(TRAIN_TEXTS)
        + repr((WIDTH, HEADS, HIDDEN, LAYERS, PROMPT, TRAIN_STEPS, TRAIN_THREADS)).encode()
    ).hexdigest()[:16]
    kept = CACHE / f"weights-{recipe}.pt"
    if kept.is_file():
        model.load_state_dict(torch.load(kept, weights_only=True))
        return model.eval()
    threads = torch.get_num_threads()
    torch.set_num_threads(TRAIN_THREADS)
    try:
        _train(model)
    finally:
        torch.set_num_threads(threads)
    CACHE.mkdir(parents=True, exist_ok=True)
    tmp = kept.with_name(f".{kept.name}.{os.getpid()}.tmp")
    torch.save(model.state_dict(), tmp)
    os.replace(tmp, kept)
    return model.eval()


def _train(model: TinyLlama) -> None:
    tokens = torch.tensor(list(_text(TRAIN_TEXTS)), dtype=torch.long)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    generator = torch.Generator().manual_seed(0)
    for _ in range(TRAIN_STEPS):
        starts = torch.randint(0, len(tokens) - PROMPT - 1, (32,), generator=generator)
        window = torch.stack([tokens[s : s + PROMPT + 1] for s in starts.tolist()])
        logits = model(model.embedding(window[:, :-1]))
        loss = nn.functional.cross_entropy(logits.reshape(-1, VOCAB), window[:, 1:].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def _prompts(names: tuple[str, ...], count: int) -> list[bytes]:
    """The first PROMPT bytes of the first `count` lines of some length in `names`."""
    lines = [line.strip() for line in _text(names).splitlines()]
    return [line[:PROMPT] for line in lines if len(line) >= 40][:count]


def held_out_prompts() -> list[bytes]:
    """Prompts from license texts the model did not train on."""
    return _prompts(HELD_OUT_TEXTS, PROMPTS)


def _example(model: TinyLlama) -> torch.Tensor:
    # A training prompt fixes the shapes for export; the verified ones are held out.
    return _embedded(model, _prompts(TRAIN_TEXTS, 1)[0])


def _embedded(model: TinyLlama, prompt: bytes) -> torch.Tensor:
    with torch.no_grad():
        return model.embedding(torch.tensor([list(prompt)], dtype=torch.long))


def _kept_samples(folder: Path, arrays: list[np.ndarray]) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, array in enumerate(arrays):
        path = folder / f"prompt{i}.npy"
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp.npy")
        np.save(tmp, array.astype(np.float32))
        os.replace(tmp, path)
        paths.append(path)
    return paths


def build():
    from etdeploy.model import ModelSpec

    model = _trained()
    embedded = [_embedded(model, p).numpy() for p in held_out_prompts()]
    return ModelSpec(
        module=model,
        example_inputs=(_example(model),),
        name="tiny_llama",
        input_names=["embeddings"],
        output_names=["logits"],
        # Each position's next-byte scores, judged as a signal (SQNR).
        output_kinds={"logits": "regression"},
        samples=_kept_samples(CACHE / "embeddings", embedded),
    )


def down_projection_inputs(model: TinyLlama, embedded: list[torch.Tensor]) -> list[np.ndarray]:
    """What the first block's down projection reads on each prompt's embeddings."""
    found: list[np.ndarray] = []
    down = model.blocks[0].down
    hook = down.register_forward_hook(lambda _m, args, _out: found.append(args[0].numpy()))
    try:
        for x in embedded:
            with torch.no_grad():
                model(x)
    finally:
        hook.remove()
    return found


def down_projection():
    from etdeploy.model import ModelSpec

    model = _trained()
    (example,) = down_projection_inputs(model, [_example(model)])
    inputs = down_projection_inputs(model, [_embedded(model, p) for p in held_out_prompts()])
    return ModelSpec(
        module=model.blocks[0].down,
        example_inputs=(torch.from_numpy(example),),
        name="down_projection",
        input_names=["activations"],
        output_names=["projected"],
        output_kinds={"projected": "regression"},
        samples=_kept_samples(CACHE / "down_inputs", inputs),
    )

"""A tiny Llama trained once per session on real English text, saved as a Hugging Face folder.

The path a user's downloaded SmolLM2 takes is the path tested: config.json naming
LlamaForCausalLM, model.safetensors from save_pretrained, and a byte-level BPE
tokenizer.json trained on the same text. Nothing is downloaded: the text is the
license texts Debian's base-files package installs in /usr/share/common-licenses on
every Debian/Ubuntu machine.

- `folder` (MODEL): 2 layers, hidden 64, vocab 512, trained on most of the licenses for
  long enough that greedy generation reads as license prose. Every paragraph ends in
  the end-of-sequence token `</s>` (config.json's eos_token_id), as pretraining ends
  each document in one, so greedy generation from the last words of a paragraph stops. Its `prompts.txt` holds
  sentences of the GPL-2 text, which it never saw in training: the held-out text its
  perplexity is measured on.
- `other_folder`: the same architecture and tokenizer, trained from another seed on other
  texts; a program built from it is the planted "wrong weights" regression against MODEL.

Everything is seeded; torch runs single-threaded while training so the weights do not
depend on how many cores the machine has. Trained once per etdeploy cache
(tests/support/kept.py), under the digest of this file, the texts and the versions of
what trains and saves the folders: a warm run reads them back (about 20 s saved).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

LICENSES = Path("/usr/share/common-licenses")
# GPL and GPL-3 are the same text, as are GFDL/GFDL-1.3 and LGPL/LGPL-3: each once.
TRAINING_TEXTS = ("GPL-3", "Apache-2.0", "MPL-2.0", "LGPL-2.1", "GFDL-1.3", "Artistic", "MPL-1.1")
OTHER_TEXTS = ("GFDL-1.2", "LGPL-2", "Artistic", "BSD", "CC0-1.0")
HELD_OUT_TEXT = "GPL-2"
EOS_ID = 1  # "</s>", the tokenizer's second special token

VOCAB_SIZE = 512
HIDDEN = 64
INTERMEDIATE = 192  # 32 and 64 divide it, 128 does not: a group size the tests can refuse
WINDOW = 64
STEPS = 300
OTHER_STEPS = 150
PROMPT_COUNT = 6
PROMPT_WORDS = 16


@dataclass(frozen=True)
class TinyLm:
    folder: Path  # the Hugging Face folder (MODEL), with its own prompts.txt
    other_folder: Path  # a differently trained model, same shapes and tokenizer
    prompts: Path  # held-out prompts, a prompt a line (the same as folder/prompts.txt)
    held_out: Path  # the whole held-out license text (GPL-2)


def _read(names: tuple[str, ...]) -> str:
    return "\n\n".join((LICENSES / name).read_text(encoding="utf-8") for name in names)


def _normalise(text: str) -> str:
    # License texts are hard-wrapped and indented; prose is what the model should learn.
    return re.sub(r"[ \t]*\n[ \t]*(?=\S)", " ", re.sub(r"[ \t]+", " ", text)).strip()


def _paragraph_ids(tokenizer: Any, names: tuple[str, ...]) -> list[int]:
    """The texts' paragraphs tokenized, each followed by the end-of-sequence id."""
    ids: list[int] = []
    for paragraph in _read(names).split("\n\n"):
        if paragraph.strip():
            ids += [*tokenizer.encode(_normalise(paragraph)).ids, EOS_ID]
    return ids


def held_out_prompts(count: int = PROMPT_COUNT, words: int = PROMPT_WORDS) -> list[str]:
    """Sentences of the held-out text, each cut to `words` words: real prose never trained on."""
    paragraphs = [_normalise(p) for p in _read((HELD_OUT_TEXT,)).split("\n\n")]
    long_ones = [p for p in paragraphs if len(p.split()) >= words and p[0].isupper()]
    step = max(1, len(long_ones) // count)
    return [" ".join(p.split()[:words]) for p in long_ones[::step][:count]]


def _train_tokenizer(text: str) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=["<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator([text], trainer=trainer)
    return tokenizer


def _train_model(ids: list[int], seed: int, steps: int) -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        bos_token_id=0,
        eos_token_id=EOS_ID,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config)
    data = torch.tensor(ids, dtype=torch.long)
    optimiser = torch.optim.AdamW(model.parameters(), lr=4e-3, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimiser, steps)
    generator = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(steps):
        starts = torch.randint(0, len(data) - WINDOW, (32,), generator=generator)
        batch = torch.stack([data[s : s + WINDOW] for s in starts.tolist()])
        # The model shifts labels itself: position i learns token i + 1.
        loss = model(input_ids=batch, labels=batch).loss
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        schedule.step()
    return model.eval()


def _save(model: Any, tokenizer: Any, folder: Path, prompts: list[str]) -> None:
    from transformers import PreTrainedTokenizerFast

    folder.mkdir(parents=True)
    model.save_pretrained(folder)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>")
    fast.save_pretrained(folder)
    (folder / "prompts.txt").write_text("\n".join(prompts) + "\n", encoding="utf-8")


def build_tiny_lms(root: Path) -> TinyLm:
    """Train the tokenizer and both models under `root` (20 s to a minute on 2 cores)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        text = _normalise(_read(TRAINING_TEXTS))
        tokenizer = _train_tokenizer(text)
        prompts = held_out_prompts()
        model = _train_model(_paragraph_ids(tokenizer, TRAINING_TEXTS), seed=0, steps=STEPS)
        _save(model, tokenizer, root / "tiny-llama", prompts)
        other = _train_model(_paragraph_ids(tokenizer, OTHER_TEXTS), seed=1, steps=OTHER_STEPS)
        _save(other, tokenizer, root / "tiny-llama-other", prompts)
    finally:
        torch.set_num_threads(threads)
    lms = tiny_lms_in(root)
    lms.held_out.write_text(_normalise(_read((HELD_OUT_TEXT,))), encoding="utf-8")
    lms.prompts.write_text("\n".join(prompts) + "\n", encoding="utf-8")
    return lms


def tiny_lms_in(root: Path) -> TinyLm:
    return TinyLm(root / "tiny-llama", root / "tiny-llama-other", root / "prompts.txt",
                  root / "held-out.txt")  # fmt: skip


def _recipe() -> str:
    """What the folders are made from: this code, the texts, and what trains and saves them."""
    from importlib.metadata import version

    from tests.support.kept import digest_of

    names = sorted({*TRAINING_TEXTS, *OTHER_TEXTS, HELD_OUT_TEXT})
    return digest_of([
        Path(__file__).read_bytes(), *((LICENSES / name).read_bytes() for name in names),
        *(version(p) for p in ("torch", "transformers", "tokenizers")),
    ])  # fmt: skip


@pytest.fixture(scope="session")
def tiny_lm() -> TinyLm:
    from tests.support.kept import kept

    return tiny_lms_in(kept("tiny-lm", _recipe(), build_tiny_lms))

"""A Hugging Face causal-LM folder as MODEL: what it holds, checked before anything slow.

The layout is the one `save_pretrained` writes and the Hub serves (SmolLM2, Llama 3.2,
Qwen3): config.json whose `architectures` names a `*ForCausalLM` class, the weights as
*.safetensors, and the tokenizer as tokenizer.json (tokenizers) or tokenizer.model
(SentencePiece). Reading it here needs neither torch nor transformers: config.json is
JSON, and whether the files exist is a listing. Everything the road takes of the folder's
files is read here once, into LmFolder; the model itself is loaded where it is exported
(etdeploy.pipeline.llm.lm_export.load_causal_lm).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from etdeploy.errors import ModelError
from etdeploy.jsonvalue import JsonObject

CONFIG = "config.json"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model")
# The folder's own prompts (a prompt a line), used when --inputs is not given.
PROMPTS_FILE = "prompts.txt"
# Beside a factory's saved model: the prompts the factory named (ModelSpec.samples), for
# the runs that find the folder saved and do not run the factory.
FACTORY_INPUTS = "etdeploy-factory.json"


@dataclass(frozen=True)
class LmFolder:
    """A causal-LM folder, its files found and what its JSON files say read once: the
    sizes a build and its checks take, and the ids that end a sequence."""

    path: Path
    architecture: str  # e.g. LlamaForCausalLM
    model_type: str  # e.g. llama
    config: dict[str, Any]
    weights: tuple[Path, ...]
    tokenizer: Path
    prompts: Path | None  # the folder's own prompts.txt, when it ships one
    vocab_size: int = 0
    # Keys and values of every layer for one position (batch 1, float32), as a static
    # cache holds them: a program's KV cache is this times its max_seq_len.
    kv_bytes_per_position: int = 0
    # The input size of each kind of linear layer a decoder block has (what a 4-bit
    # group must divide): attention's projections and output, the MLP's.
    linear_input_sizes: tuple[tuple[str, int], ...] = ()
    # The ids that end a sequence as generation_config.json or config.json say them
    # (`eos_token_id`: an id or a list, Llama 3 lists three); () when neither does.
    eos_ids: tuple[int, ...] = ()
    # Else the tokenizer's end token as tokenizer_config.json names it (`eos_token`),
    # looked up in the tokenizer (etdeploy.pipeline.llm.prompts.end_ids).
    eos_token: str | None = None
    # The prompts a factory named (ModelSpec.samples), as --inputs takes them, when the
    # folder is where a factory's causal LM was saved (etdeploy.pipeline.llm.factory).
    factory_inputs: tuple[str, ...] = ()


def _sizes(config: Mapping[str, object]) -> tuple[int, tuple[tuple[str, int], ...]]:
    """config.json's KV cache bytes per position and its linears' input sizes."""
    hidden = _count(config, "hidden_size")
    heads = _count(config, "num_attention_heads")
    kv_heads = _count(config, "num_key_value_heads") or heads
    head_dim = _count(config, "head_dim") or (hidden // heads if heads else 0)
    layers = _count(config, "num_hidden_layers")
    dtype_bytes = 4
    sizes = {"q/k/v_proj, gate/up_proj, lm_head": hidden, "o_proj": heads * head_dim}
    intermediate = _count(config, "intermediate_size")
    if intermediate:
        sizes["down_proj"] = intermediate
    linears = tuple((name, size) for name, size in sizes.items() if size > 0)
    return 2 * layers * kv_heads * head_dim * dtype_bytes, linears


def _count(config: Mapping[str, object], key: str) -> int:
    """A size config.json gives (0 when it gives none)."""
    value = config.get(key)
    return int(value) if isinstance(value, (int, float)) else 0


def _end_of_sequence(
    path: Path, config: Mapping[str, object]
) -> tuple[tuple[int, ...], str | None]:
    """The ids that end a sequence, as transformers' generate stops on them: the
    folder's generation_config.json `eos_token_id`, else config.json's; and the
    tokenizer's end token (tokenizer_config.json `eos_token`) for when neither says."""
    for said_in in (_read_object(path / "generation_config.json"), config):
        said = said_in.get("eos_token_id")
        ids = [said] if isinstance(said, int) else said if isinstance(said, list) else []
        found = tuple(i for i in ids if isinstance(i, int) and not isinstance(i, bool) and i >= 0)
        if found:
            return found, None
    token = _read_object(path / "tokenizer_config.json").get("eos_token")
    if isinstance(token, dict):  # an AddedToken written out: {"content": "</s>", ...}
        token = token.get("content")
    return (), token if isinstance(token, str) else None


def _factory_inputs(path: Path) -> tuple[str, ...]:
    """FACTORY_INPUTS' prompts, () when the folder has none (not a factory's)."""
    recorded = _read_object(path / FACTORY_INPUTS).get("inputs")
    items = recorded if isinstance(recorded, list) else []
    return tuple(item for item in items if isinstance(item, str))


def _read_object(path: Path) -> JsonObject:
    """A JSON object from the folder, or {} when the file is absent or is not one
    (optional files: what they do not say is not said)."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return raw if isinstance(raw, dict) else {}


def looks_like_lm_folder(model: str | None) -> bool:
    """MODEL names a folder with a config.json: the language-model road (the other
    MODEL kinds are files, module paths and example names)."""
    if not model:
        return False
    path = Path(model)
    return path.is_dir() and (path / CONFIG).is_file()


def open_lm_folder(model: str | Path) -> LmFolder:
    """The folder read and checked: a causal LM with weights and a tokenizer, or a
    ModelError (exit 2) saying what is missing."""
    path = Path(model)
    raw = _config(path)
    architectures = raw.get("architectures") or []
    causal = [a for a in architectures if isinstance(a, str) and a.endswith("ForCausalLM")]
    if not causal:
        named = ", ".join(map(str, architectures)) or "no architecture"
        raise ModelError(
            f"{path}: config.json names {named}, not a causal language model (*ForCausalLM)",
            "give the folder of a causal LM such as SmolLM2 or Llama 3.2 (its config.json "
            "lists e.g. LlamaForCausalLM under architectures)",
        )
    weights = tuple(sorted(path.glob("*.safetensors")))
    if not weights:
        raise ModelError(
            f"{path}: no *.safetensors weights",
            "save the model with save_pretrained (safetensors is its default), or download "
            "the model's .safetensors files into the folder",
        )
    tokenizer = next((path / n for n in TOKENIZER_FILES if (path / n).is_file()), None)
    if tokenizer is None:
        raise ModelError(
            f"{path}: no tokenizer (neither tokenizer.json nor tokenizer.model)",
            "save the tokenizer beside the model: tokenizer.save_pretrained(folder)",
        )
    prompts = path / PROMPTS_FILE
    kv_bytes_per_position, linears = _sizes(raw)
    ends, end_token = _end_of_sequence(path, raw)
    return LmFolder(
        path=path,
        architecture=causal[0],
        model_type=str(raw.get("model_type") or ""),
        config=raw,
        weights=weights,
        tokenizer=tokenizer,
        prompts=prompts if prompts.is_file() else None,
        vocab_size=_count(raw, "vocab_size"),
        kv_bytes_per_position=kv_bytes_per_position,
        linear_input_sizes=linears,
        eos_ids=ends,
        eos_token=end_token,
        factory_inputs=_factory_inputs(path),
    )


def _config(path: Path) -> dict[str, Any]:
    try:
        raw = json.loads((path / CONFIG).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ModelError(
            f"{path}: no config.json", "give a Hugging Face model folder (save_pretrained)"
        ) from None
    except (OSError, ValueError) as exc:
        raise ModelError(
            f"{path / CONFIG}: cannot read it ({exc})", "fix or replace the file"
        ) from None
    if not isinstance(raw, dict):
        raise ModelError(f"{path / CONFIG}: not a JSON object", "fix or replace the file")
    return raw

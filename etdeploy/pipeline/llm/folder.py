"""A Hugging Face causal-LM folder as MODEL: what it holds, checked before anything slow.

The layout is the one `save_pretrained` writes and the Hub serves (SmolLM2, Llama 3.2,
Qwen3): config.json whose `architectures` names a `*ForCausalLM` class, the weights as
*.safetensors, and the tokenizer as tokenizer.json (tokenizers) or tokenizer.model
(SentencePiece). Reading it here needs neither torch nor transformers: config.json is
JSON, and whether the files exist is a listing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from etdeploy.errors import ModelError
from etdeploy.jsonvalue import JsonObject

CONFIG = "config.json"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model")
# The folder's own prompts (a prompt a line), used when --inputs is not given.
PROMPTS_FILE = "prompts.txt"


@dataclass(frozen=True)
class LmFolder:
    """A causal-LM folder, its files found and its config read."""

    path: Path
    architecture: str  # e.g. LlamaForCausalLM
    model_type: str  # e.g. llama
    config: dict[str, Any]
    weights: tuple[Path, ...]
    tokenizer: Path
    prompts: Path | None  # the folder's own prompts.txt, when it ships one

    @property
    def vocab_size(self) -> int:
        return int(self.config.get("vocab_size") or 0)

    @property
    def hidden_size(self) -> int:
        return int(self.config.get("hidden_size") or 0)

    def kv_cache_bytes(self, max_seq_len: int, dtype_bytes: int = 4) -> int:
        """Keys and values of every layer for `max_seq_len` positions (batch 1), as a
        static cache holds them: what a program built elsewhere carries, from config.json."""
        heads = int(self.config.get("num_attention_heads") or 0)
        kv_heads = int(self.config.get("num_key_value_heads") or heads)
        head_dim = int(self.config.get("head_dim") or (self.hidden_size // heads if heads else 0))
        layers = int(self.config.get("num_hidden_layers") or 0)
        return 2 * layers * kv_heads * head_dim * max_seq_len * dtype_bytes

    def linear_input_sizes(self) -> dict[str, int]:
        """The input size of each kind of linear layer a decoder block has (what a
        4-bit group must divide): attention's projections and output, the MLP's."""
        hidden = self.hidden_size
        heads = int(self.config.get("num_attention_heads") or 0)
        head_dim = int(self.config.get("head_dim") or (hidden // heads if heads else 0))
        sizes = {"q/k/v_proj, gate/up_proj, lm_head": hidden, "o_proj": heads * head_dim}
        intermediate = int(self.config.get("intermediate_size") or 0)
        if intermediate:
            sizes["down_proj"] = intermediate
        return {name: size for name, size in sizes.items() if size > 0}


def eos_ids(folder: LmFolder, tokenizer: Any = None) -> tuple[int, ...]:
    """The ids that end a sequence, as transformers' generate stops on them: the
    folder's generation_config.json `eos_token_id` (an id or a list: Llama 3 lists
    three), else config.json's, else the tokenizer's end token (tokenizer_config.json
    `eos_token`, looked up in `tokenizer`). () when none is said: generation then runs
    to --max-new-tokens."""
    for name in ("generation_config.json", CONFIG):
        said = _read_object(folder.path / name).get("eos_token_id")
        ids = [said] if isinstance(said, int) else said if isinstance(said, list) else []
        found = tuple(i for i in ids if isinstance(i, int) and not isinstance(i, bool) and i >= 0)
        if found:
            return found
    token = _read_object(folder.path / "tokenizer_config.json").get("eos_token")
    if isinstance(token, dict):  # an AddedToken written out: {"content": "</s>", ...}
        token = token.get("content")
    if isinstance(token, str) and tokenizer is not None:
        found_id = tokenizer.token_to_id(token) if hasattr(tokenizer, "token_to_id") else None
        if found_id is None and hasattr(tokenizer, "convert_tokens_to_ids"):
            found_id = tokenizer.convert_tokens_to_ids(token)
        if isinstance(found_id, int) and found_id >= 0:
            return (found_id,)
    return ()


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
    return LmFolder(
        path=path,
        architecture=causal[0],
        model_type=str(raw.get("model_type") or ""),
        config=raw,
        weights=weights,
        tokenizer=tokenizer,
        prompts=prompts if prompts.is_file() else None,
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


def load_causal_lm(folder: LmFolder) -> Any:
    """The float eager model (torch, transformers), in eval mode and float32."""
    import torch
    from transformers import AutoModelForCausalLM

    model: Any = AutoModelForCausalLM.from_pretrained(folder.path, dtype=torch.float32)
    return model.eval()

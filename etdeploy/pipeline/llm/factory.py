"""A factory that returns a causal LM (`etdeploy run lm.py:build`), taken by the same
road as a Hugging Face folder: the model is saved once as the folder it would have been
(save_pretrained: config.json, safetensors, generation_config.json), with its tokenizer
beside it, and the folder road runs on that.

The factory returns the model itself, or a ModelSpec of it whose `tokenizer` names
tokenizer.json / tokenizer.model (or the folder holding one) and whose `samples` name
the prompts (text files or folders of them, as --inputs takes). Without a `tokenizer`
the model's own folder is used, the one `from_pretrained` loaded it from
(`config._name_or_path`). The saved folder is kept in the cache under the factory's
fingerprint (its file and the files beside it, etdeploy.model.loader.ModelRef), so a
later run neither runs the factory nor imports torch to find its road.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from etdeploy.errors import EtdeployError, ModelError
from etdeploy.model.loader import ModelRef, parse_model_ref
from etdeploy.model.spec import ModelSpec
from etdeploy.paths import cache_dir
from etdeploy.pipeline.llm.folder import (
    CONFIG,
    FACTORY_INPUTS,
    PROMPTS_FILE,
    TOKENIZER_FILES,
    looks_like_lm_folder,
)

# What goes beside a tokenizer file and is copied with it: its settings (the end
# token, the special tokens) as transformers' save_pretrained writes them.
_TOKENIZER_COMPANIONS = ("tokenizer_config.json", "special_tokens_map.json")
# Bump when what a saved folder holds changes.
_SAVED_AS = "etdeploy.pipeline.llm.factory/1"


def _entry(ref: ModelRef) -> Path:
    import hashlib

    key = hashlib.sha256(f"{_SAVED_AS}\n{ref.fingerprint()}".encode()).hexdigest()[:24]
    return cache_dir("llm-factories") / key


def language_model_folder(model: str | None, *, use_cache: bool = True) -> Path | None:
    """The causal-LM folder MODEL takes the language-model road with: MODEL itself when
    it is a Hugging Face folder, or the folder an earlier run saved its factory's causal
    LM as (no torch either way). None: the ordinary road (which may still find that a
    factory returns a causal LM: CausalLmReturned)."""
    if looks_like_lm_folder(model):
        return Path(str(model))
    return saved_factory_folder(model, use_cache=use_cache)


def saved_factory_folder(model: str | None, *, use_cache: bool = True) -> Path | None:
    """The folder a factory's causal LM was saved as by an earlier run, or None (not a
    factory, not a language model, not run yet, or --no-cache)."""
    if not model or not use_cache or ":" not in model or model.endswith(".pt2"):
        return None
    try:
        ref = parse_model_ref(model)
    except EtdeployError:  # not a model reference: the ordinary road says so
        return None
    if ref.kind not in ("file", "module"):
        return None
    folder = _entry(ref)
    return folder if (folder / CONFIG).is_file() else None


def save_factory_lm(ref: ModelRef, spec: ModelSpec) -> Path:
    """The factory's causal LM saved as a Hugging Face folder with its tokenizer and
    prompts (ModelError, exit 2, when no tokenizer can be found), written whole under
    a temporary name, then renamed."""
    tokenizer_files = _tokenizer_files(ref, spec)
    folder = _entry(ref)
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder.parent, prefix=".saving-") as temporary:
        staging = Path(temporary) / "model"
        spec.module.save_pretrained(staging)
        for path in tokenizer_files:
            shutil.copy2(path, staging / path.name)
        prompts = _prompts(spec, tokenizer_files[0].parent)
        if prompts is not None:
            shutil.copy2(prompts, staging / PROMPTS_FILE)
        samples = [str(Path(p).resolve()) for p in spec.samples]
        (staging / FACTORY_INPUTS).write_text(json.dumps({"inputs": samples}) + "\n")
        shutil.rmtree(folder, ignore_errors=True)
        staging.rename(folder)
    return folder


def _tokenizer_files(ref: ModelRef, spec: ModelSpec) -> list[Path]:
    given = spec.tokenizer
    named = Path(given) if given is not None else _loaded_from(spec)
    if named is not None and named.is_file() and named.name in TOKENIZER_FILES:
        found: Path | None = named
    elif named is not None and named.is_dir():
        found = next((named / n for n in TOKENIZER_FILES if (named / n).is_file()), None)
    else:
        found = None
    if found is None:
        where = f"{given}: no tokenizer.json or tokenizer.model" if given else "no tokenizer"
        raise ModelError(
            f"the factory {ref.text} returned a causal LM, but {where}",
            "return ModelSpec(module=model, example_inputs=(), tokenizer='path/to/"
            "tokenizer.json'), or load the model from a folder that holds its tokenizer",
        )
    companions = [found.parent / n for n in _TOKENIZER_COMPANIONS if (found.parent / n).is_file()]
    return [found, *companions]


def _loaded_from(spec: ModelSpec) -> Path | None:
    """The folder from_pretrained read the model from, when it was a local one."""
    name = getattr(getattr(spec.module, "config", None), "_name_or_path", None)
    if isinstance(name, str) and name and Path(name).is_dir():
        return Path(name)
    return None


def _prompts(spec: ModelSpec, tokenizer_dir: Path) -> Path | None:
    """The tokenizer's folder's own prompts.txt, kept as the saved folder's, when the
    factory names no samples."""
    if spec.samples:
        return None
    own = tokenizer_dir / PROMPTS_FILE
    return own if own.is_file() else None

"""The prompts of a language-model run (--inputs), read and tokenized on the host.

--inputs takes a text file (a prompt a line), a folder of .txt files (a prompt a file),
or nothing: the model folder's own prompts.txt. Each prompt is tokenized here with the
folder's tokenizer; only ids cross to the device (see etdeploy.runner.generation).
A prompt that does not fit the program's context with the tokens to generate is bad
input, refused before the build.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from etdeploy.errors import InputError
from etdeploy.pipeline.llm.folder import LmFolder


@dataclass(frozen=True)
class Prompt:
    """One prompt: where it came from, its text, its token ids."""

    name: str  # file:line, or the file's name
    text: str
    token_ids: tuple[int, ...]


def prompt_texts(inputs: Sequence[str], folder: LmFolder) -> list[tuple[str, str]]:
    """(name, text) of every prompt --inputs names, else of the folder's prompts.txt."""
    if not inputs:
        if folder.prompts is None:
            raise InputError(
                f"no prompts: --inputs not given and {folder.path} has no prompts.txt",
                "give --inputs prompts.txt (a prompt a line) or a folder of .txt files",
            )
        return _lines(folder.prompts)
    found: list[tuple[str, str]] = []
    for given in inputs:
        path = Path(given)
        if path.is_dir():
            files = sorted(path.glob("*.txt"))
            if not files:
                raise InputError(f"{path}: no .txt files", "put a prompt in each .txt file")
            found += [(f.name, _read(f).strip()) for f in files if _read(f).strip()]
        elif path.is_file():
            found += _lines(path)
        else:
            raise InputError(f"{given}: no such file or folder", "give a text file or a folder")
    if not found:
        raise InputError("the prompts are all empty", "write a prompt a line")
    return found


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read it as UTF-8 text ({exc})", "give text") from None


def _lines(path: Path) -> list[tuple[str, str]]:
    lines = [
        (f"{path.name}:{number}", line.strip())
        for number, line in enumerate(_read(path).splitlines(), start=1)
        if line.strip()
    ]
    if not lines:
        raise InputError(f"{path}: no prompts in it", "write a prompt a line")
    return lines


def load_tokenizer(folder: LmFolder) -> Any:
    """The folder's tokenizer: tokenizer.json through `tokenizers` (the same file an
    app ships), tokenizer.model through transformers' SentencePiece wrapper."""
    if folder.tokenizer.name == "tokenizer.json":
        from tokenizers import Tokenizer

        return Tokenizer.from_file(str(folder.tokenizer))
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder.path)


def encode(tokenizer: Any, text: str) -> list[int]:
    """Ids as the model was trained to see them (special tokens as the tokenizer adds
    them: a BOS for Llama-family post-processors)."""
    encoded = tokenizer.encode(text)
    return list(encoded.ids if hasattr(encoded, "ids") else encoded)


def read_prompts(
    inputs: Sequence[str], folder: LmFolder, tokenizer: Any = None
) -> tuple[Prompt, ...]:
    """The prompts tokenized with `tokenizer` (the folder's, loaded when not given)."""
    tokenizer = tokenizer if tokenizer is not None else load_tokenizer(folder)
    prompts = []
    for name, text in prompt_texts(inputs, folder):
        ids = encode(tokenizer, text)
        if len(ids) < 2:
            raise InputError(
                f"{name}: the prompt is {len(ids)} token(s)",
                "give prompts of at least two tokens: the first predicts the second",
            )
        prompts.append(Prompt(name, text, tuple(ids)))
    return tuple(prompts)


def check_context(prompts: Sequence[Prompt], max_seq_len: int, new_tokens: int) -> None:
    """Every prompt and its generation fit the static cache, or an InputError (exit 2)."""
    for prompt in prompts:
        needed = len(prompt.token_ids) + new_tokens - 1
        if needed > max_seq_len:
            raise InputError(
                f"{prompt.name}: the prompt is {len(prompt.token_ids)} tokens, and with "
                f"{new_tokens} to generate needs {needed} positions; the context is {max_seq_len}",
                "shorten the prompt, lower --max-new-tokens, or raise --max-seq-len",
            )


def eos_ids(folder: LmFolder, tokenizer: Any = None) -> tuple[int, ...]:
    """The ids that end a sequence, as transformers' generate stops on them: the
    folder's (generation_config.json, else config.json: LmFolder.eos_ids), else its
    tokenizer's end token (tokenizer_config.json `eos_token`) looked up in `tokenizer`.
    () when none is said: generation then runs to --max-new-tokens."""
    if folder.eos_ids or folder.eos_token is None or tokenizer is None:
        return folder.eos_ids
    token = folder.eos_token
    found_id = tokenizer.token_to_id(token) if hasattr(tokenizer, "token_to_id") else None
    if found_id is None and hasattr(tokenizer, "convert_tokens_to_ids"):
        found_id = tokenizer.convert_tokens_to_ids(token)
    return (found_id,) if isinstance(found_id, int) and found_id >= 0 else ()


def tokenizer_text(folder: LmFolder) -> Callable[[Sequence[int]], str]:
    """Ids to text with the folder's tokenizer, special tokens included: a generation
    that ended shows its end token (`</s>`)."""
    tokenizer = load_tokenizer(folder)

    def text(ids: Sequence[int]) -> str:
        return str(tokenizer.decode(list(ids), skip_special_tokens=False))

    return text

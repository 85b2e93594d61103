"""Generation with our runner: the contract between etdeploy and
`etdeploy_runner --generate` for a causal language model with a static KV cache.

Tokenization happens on the host: only token ids cross to the device. The runner
then needs no tokenizer library (the wheel ships none for a standalone binary),
the same ids feed the device, float eager and quantized eager, and a difference is
the program's, never a tokenizer's.

The program
    Method `forward` (or --method_name) takes two int64 tensors, the token ids
    `[1, S]` and their positions in the cache `[S]` (transformers'
    TorchExportableModuleForDecoderOnlyLM, transformers 5.25, read 2026-12-05),
    and returns float32 logits: `[1, S, V]` (every position fed), or `[1, V]` /
    `[1, 1, V]` (the last one only). S fixed at 1: one token per call. S dynamic
    with upper bound M: chunks of up to M tokens per call (prefill and teacher
    forcing), one token per decode step; when the logits cover only the last
    position, teacher forcing goes one token per call. The cache is static: a
    pass that starts again at position 0 overwrites it, and positions past the
    current one are masked by the program, so the two passes below share one
    loaded method. No LLM custom operators are needed (transformers' export
    lowered to XNNPACK has none); a program that uses them (llama::sdpa_with_kv_cache,
    llama::update_cache) is refused by preflight before anything is pushed, because
    the executorch wheel ships those kernels only as an export-time plugin
    (libcustom_ops_aot_lib.so needs libtorch and Python; android_harness/CMakeLists.txt).

One runner call per prompt
    etdeploy_runner --generate --model_path P --token_ids IDS --prompt_len P
        --max_new_tokens N --generated_file GEN --result_json R
        [--eos_ids E1,E2] [--logits_file OUT] [--method_name forward] [--cpu_threads K]
        [--data_path D]

    IDS     T token ids, raw int64 little-endian (T >= 1): the prompt, then any
            text the caller wants scored (a reference continuation, held-out text).
    (a) generation, timed: the first P ids (1 <= P <= T) are prefilled from
        position 0; the argmax of the last position's logits is the first new
        token, then each new token is fed back (one call each) until N ids are
        written to GEN (raw int64 little-endian), or until an id of --eos_ids
        (the tokenizer's end of sequence) is written: it is kept, and GEN then
        holds fewer than N. Without --eos_ids exactly N. N >= 1; at most
        P + N - 1 positions are used.
    (b) teacher forcing, only with --logits_file: the logits of every position
        of all T ids, T x V float32 little-endian, to OUT. Row t is the
        distribution of the token after ids[0..t]. The rows pass (a) computed
        for the same ids at the same positions are kept rather than computed
        again (the prompt's, when the method returns every position's logits,
        then each decode step's while the ids go on as the generated tokens did:
        the cache holds the same state for them); the pass feeds the rest from
        the first position where the ids depart, on the cache as (a) left it.
        Verifying a generation against its own greedy continuation then costs
        one more call, not a second generation.
    The cache length is the program's (its `get_max_seq_len` method when it has
    one, as ExecuTorch's LLM export writes it): a request beyond it is refused
    (exit 2) before any execution. Every file is written under a temporary
    name and renamed; a failed call leaves none of GEN, OUT or R.

The result document (R, schema GENERATION_SCHEMA)
    load_ms; vocab_size; max_seq_len (null: the program does not say);
    tokens_per_call (the largest chunk); token_count T, prompt_len P,
    max_new_tokens N; generated_count (GEN's ids, N or fewer after an end id);
    stopped_at_eos; prefill_ms (time to first token: from the first prefill
    call to the first new token's id), prefill_tokens_per_s; decode_ms (one per
    decode call, generated_count - 1 of them), decode_tokens_per_s (those over
    their sum; null when only one token was generated); teacher_forced_ms (the calls of pass (b) alone; null without
    --logits_file) and teacher_forced_reused (its leading rows taken from (a));
    peak_rss_bytes;
    the file names as given.

Failures are the runner's: one line `error: ...` on stderr and its exit codes
(1 runtime, 2 bad input, 3 an output not written), read by runner_failure.
`--describe` lists "generate" under `capabilities`, so preflight can tell a
runner that predates it (GENERATE_CAPABILITY).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any

import numpy as np

from etdeploy.errors import RunnerError, UsageError

# The schema tag of --generate's result document (android_harness/src/generate.cpp).
GENERATION_SCHEMA = "etdeploy.runner_generation/1"
# What --describe lists under "capabilities" when the runner takes --generate.
GENERATE_CAPABILITY = "generate"
# The token ids' and generated ids' file format: raw little-endian int64.
TOKEN_DTYPE = np.dtype("<i8")
LOGITS_DTYPE = np.dtype("<f4")


@dataclass(frozen=True)
class GenerationRequest:
    """One prompt: its ids (and any ids after it to be scored by teacher forcing),
    how many of them are the prompt, and how many tokens to generate greedily."""

    token_ids: tuple[int, ...]
    prompt_len: int
    max_new_tokens: int
    # Whether the runner also writes every position's logits (teacher forcing).
    teacher_forced: bool = True
    # End-of-sequence ids: generation stops after writing one. (): exactly N tokens.
    eos_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "token_ids", tuple(int(t) for t in self.token_ids))
        object.__setattr__(self, "eos_ids", tuple(int(t) for t in self.eos_ids))
        if any(t < 0 for t in self.eos_ids):
            raise UsageError("end-of-sequence ids must be 0 or more")
        if not self.token_ids:
            raise UsageError("a generation request needs at least one token id")
        if any(t < 0 for t in self.token_ids):
            raise UsageError("token ids must be 0 or more", "check the tokenizer's output")
        if not 1 <= self.prompt_len <= len(self.token_ids):
            raise UsageError(
                f"prompt_len {self.prompt_len} is not between 1 and the "
                f"{len(self.token_ids)} ids given"
            )
        if self.max_new_tokens < 1:
            raise UsageError(f"max_new_tokens must be at least 1, got {self.max_new_tokens}")

    @property
    def positions_needed(self) -> int:
        """Cache positions the call uses: the longer of the two passes."""
        generation = self.prompt_len + self.max_new_tokens - 1
        return max(generation, len(self.token_ids)) if self.teacher_forced else generation

    def check_fits(self, max_seq_len: int) -> None:
        """A UsageError (exit 2) when the call would run past the program's cache."""
        if self.positions_needed > max_seq_len:
            raise UsageError(
                f"the prompt and generation need {self.positions_needed} positions but the "
                f"program's context is {max_seq_len}",
                "shorten the prompt, lower the token count, or build with a larger --max-seq-len",
            )

    def ids_bytes(self) -> bytes:
        """The --token_ids file's bytes."""
        return np.asarray(self.token_ids, dtype=TOKEN_DTYPE).tobytes()


@dataclass(frozen=True)
class GenerationFiles:
    """Where one call's files are, as the runner sees them (on the device)."""

    token_ids: str
    generated: str
    result_json: str
    # None: no teacher-forced pass.
    logits: str | None = None

    @classmethod
    def under(cls, base: str, token_ids: str, *, teacher_forced: bool = True) -> GenerationFiles:
        """The outputs named BASE.generated.bin, BASE.logits.bin, BASE.json."""
        return cls(
            token_ids=token_ids,
            generated=f"{base}.generated.bin",
            result_json=f"{base}.json",
            logits=f"{base}.logits.bin" if teacher_forced else None,
        )

    def outputs(self) -> tuple[str, ...]:
        """What the call writes (to pull, then remove)."""
        written = (self.generated, self.result_json)
        return written if self.logits is None else (*written, self.logits)


@dataclass(frozen=True)
class GenerationInvocation:
    """One --generate call of our runner. Paths are as the runner sees them."""

    model_path: str
    files: GenerationFiles
    prompt_len: int
    max_new_tokens: int
    method: str = "forward"
    data_path: str | None = None
    # None: the runner's default (one thread per performant core).
    cpu_threads: int | None = None
    eos_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.prompt_len < 1 or self.max_new_tokens < 1:
            raise UsageError("prompt_len and max_new_tokens must be at least 1")
        if self.cpu_threads is not None and self.cpu_threads < 1 and self.cpu_threads != -1:
            raise UsageError(f"cpu_threads must be positive or -1, got {self.cpu_threads}")
        if not self.method:
            raise UsageError("method name must not be empty")


def generation_invocation(
    model_path: str,
    request: GenerationRequest,
    files: GenerationFiles,
    *,
    method: str = "forward",
    data_path: str | None = None,
    cpu_threads: int | None = None,
) -> GenerationInvocation:
    """The call that runs `request` with its files at `files`."""
    if (files.logits is not None) != request.teacher_forced:
        raise UsageError("a teacher-forced request needs a logits file, and only it")
    return GenerationInvocation(
        model_path, files, request.prompt_len, request.max_new_tokens, method, data_path,
        cpu_threads, request.eos_ids,
    )  # fmt: skip


def generation_argv(executable: str | PurePath, invocation: GenerationInvocation) -> list[str]:
    """The runner's command line for `invocation`."""
    files = invocation.files
    argv = [
        executable.as_posix() if isinstance(executable, PurePath) else executable,
        "--generate",
        f"--model_path={invocation.model_path}",
        f"--token_ids={files.token_ids}",
        f"--prompt_len={invocation.prompt_len}",
        f"--max_new_tokens={invocation.max_new_tokens}",
        f"--generated_file={files.generated}",
        f"--result_json={files.result_json}",
        f"--method_name={invocation.method}",
    ]
    if invocation.eos_ids:
        argv.append(f"--eos_ids={','.join(map(str, invocation.eos_ids))}")
    if files.logits is not None:
        argv.append(f"--logits_file={files.logits}")
    if invocation.data_path is not None:
        argv.append(f"--data_path={invocation.data_path}")
    if invocation.cpu_threads is not None:
        argv.append(f"--cpu_threads={invocation.cpu_threads}")
    return argv


@dataclass(frozen=True)
class GenerationTimings:
    """What the runner measured of one call, in milliseconds unless named otherwise."""

    load_ms: float
    # Time to first token: the prompt's prefill until the first new token's id.
    prefill_ms: float
    prefill_tokens_per_s: float
    # One per decode call (N - 1).
    decode_ms: tuple[float, ...]
    # None when nothing was decoded after the first token (N == 1).
    decode_tokens_per_s: float | None
    # The teacher-forced pass's own calls; None when it was not asked for.
    teacher_forced_ms: float | None
    # How many leading positions' logits it took from the generation pass.
    teacher_forced_reused: int | None = None

    @property
    def time_to_first_token_ms(self) -> float:
        return self.prefill_ms


@dataclass(frozen=True, eq=False)
class GenerationResult:
    """One call's outputs, checked against its request: the greedy ids, every
    position's logits (T x V, None without teacher forcing) and the timings."""

    generated_ids: tuple[int, ...]  # max_new_tokens, or fewer ending in an end id
    logits: np.ndarray | None
    timings: GenerationTimings
    vocab_size: int
    # The program's context, when it says (its get_max_seq_len method).
    max_seq_len: int | None
    tokens_per_call: int
    peak_rss_bytes: int | None
    runner_version: str | None


def _bad(path: Path, problem: str) -> RunnerError:
    return RunnerError(
        f"{path.name}: {problem}",
        "the runner and etdeploy disagree on the generation files; rebuild the runner "
        "with `etdeploy runner build --rebuild`",
    )


def _number(raw: dict[str, Any], key: str, path: Path, *, optional: bool = False) -> float | None:
    value = raw.get(key)
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _bad(path, f"{key} is {value!r}, not a number")
    return float(value)


def _count(raw: dict[str, Any], key: str, path: Path) -> int:
    value = raw.get(key)
    if type(value) is not int or value < 0:
        raise _bad(path, f"{key} is {value!r}, not a count")
    return value


def _document(path: Path, request: GenerationRequest) -> dict[str, Any]:
    try:
        raw = json.loads(path.read_bytes())
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise _bad(path, f"not a JSON document ({exc})") from exc
    if not isinstance(raw, dict) or raw.get("schema") != GENERATION_SCHEMA:
        schema = raw.get("schema") if isinstance(raw, dict) else None
        raise _bad(path, f"schema is {schema!r}, expected {GENERATION_SCHEMA!r}")
    asked = (len(request.token_ids), request.prompt_len, request.max_new_tokens)
    said = tuple(_count(raw, k, path) for k in ("token_count", "prompt_len", "max_new_tokens"))
    if said != asked:
        raise _bad(path, f"the runner ran (T, P, N) = {said}, but {asked} was asked")
    return raw


def _raw_array(path: Path, dtype: np.dtype[Any], count: int, what: str) -> np.ndarray:
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise _bad(path, f"cannot read the {what} ({exc.strerror})") from exc
    if size != count * dtype.itemsize:
        raise _bad(path, f"has {size} bytes; {count} {what} need {count * dtype.itemsize}")
    return np.fromfile(path, dtype=dtype)


def _generated_count(raw: dict[str, Any], request: GenerationRequest, path: Path) -> int:
    """How many ids GEN holds: N, or, with end ids, from 1 to N (a runner that
    predates --eos_ids writes no generated_count, and always N)."""
    if "generated_count" not in raw:
        return request.max_new_tokens
    count = _count(raw, "generated_count", path)
    if not 1 <= count <= request.max_new_tokens or (
        count < request.max_new_tokens and not request.eos_ids
    ):
        raise _bad(path, f"generated_count is {count} of {request.max_new_tokens} asked")
    return count


def read_generation(
    request: GenerationRequest,
    result_json: Path,
    generated: Path,
    logits: Path | None = None,
) -> GenerationResult:
    """The files of one call, read and checked against `request`: the document's
    counts, GEN's ids (N, or fewer ending at the first end id; each below the
    vocabulary size), OUT's T x V floats. Any mismatch is a RunnerError naming the file."""
    raw = _document(result_json, request)
    vocab = _count(raw, "vocab_size", result_json)
    if vocab < 1:
        raise _bad(result_json, "vocab_size is 0")
    count = _generated_count(raw, request, result_json)
    ids = _raw_array(generated, TOKEN_DTYPE, count, "generated ids")
    if ids.size and (ids.min() < 0 or ids.max() >= vocab):
        raise _bad(generated, f"holds an id outside the vocabulary of {vocab}")
    ends = [i for i, t in enumerate(ids.tolist()) if t in request.eos_ids]
    if (ends[0] != count - 1) if ends else count != request.max_new_tokens:
        raise _bad(generated, f"does not stop at its first end id (of {request.eos_ids})")
    table = None
    if request.teacher_forced:
        if logits is None:
            raise UsageError("a teacher-forced request's logits file was not given")
        cells = len(request.token_ids) * vocab
        table = _raw_array(logits, LOGITS_DTYPE, cells, "logits").reshape(-1, vocab)
    decode = raw.get("decode_ms")
    if not isinstance(decode, list) or len(decode) != count - 1:
        raise _bad(result_json, f"decode_ms lists no {count - 1} times")
    decode_ms = tuple(_number({"t": t}, "t", result_json) or 0.0 for t in decode)
    max_seq_len = raw.get("max_seq_len")
    reused = raw.get("teacher_forced_reused")
    timings = GenerationTimings(
        load_ms=_number(raw, "load_ms", result_json) or 0.0,
        prefill_ms=_number(raw, "prefill_ms", result_json) or 0.0,
        prefill_tokens_per_s=_number(raw, "prefill_tokens_per_s", result_json) or 0.0,
        decode_ms=decode_ms,
        decode_tokens_per_s=_number(raw, "decode_tokens_per_s", result_json, optional=True),
        teacher_forced_ms=_number(raw, "teacher_forced_ms", result_json, optional=True),
        teacher_forced_reused=reused if type(reused) is int else None,
    )
    peak = raw.get("peak_rss_bytes")
    version = raw.get("runner_version")
    return GenerationResult(
        generated_ids=tuple(int(t) for t in ids),
        logits=table,
        timings=timings,
        vocab_size=vocab,
        max_seq_len=max_seq_len if type(max_seq_len) is int else None,
        tokens_per_call=_count(raw, "tokens_per_call", result_json),
        peak_rss_bytes=peak if type(peak) is int else None,
        runner_version=version if isinstance(version, str) else None,
    )


def decode_tokens_per_s(decode_ms: Sequence[float]) -> float | None:
    """Tokens per second over these decode calls (what the runner reports)."""
    total = math.fsum(decode_ms)
    return len(decode_ms) / (total / 1000) if decode_ms and total > 0 else None

"""The generation contract (etdeploy/runner/generation.py): what a request may be,
the runner's command line for it, and how its files are read back. The runner's
side of it runs in tests/pipeline/test_generate.py on every device kind."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from etdeploy.errors import RunnerError, UsageError
from etdeploy.runner.generation import (
    GENERATION_SCHEMA,
    GenerationFiles,
    GenerationRequest,
    generation_argv,
    generation_invocation,
    read_generation,
)

REQUEST = GenerationRequest((5, 9, 2, 7, 3), prompt_len=3, max_new_tokens=4)


@pytest.mark.parametrize(
    ("ids", "prompt_len", "new", "problem"),
    [
        ((), 1, 1, "at least one token id"),
        ((1, -2), 1, 1, "0 or more"),
        ((1, 2), 0, 1, "prompt_len 0 is not between 1 and the 2 ids"),
        ((1, 2), 3, 1, "prompt_len 3 is not between 1 and the 2 ids"),
        ((1, 2), 2, 0, "max_new_tokens must be at least 1"),
    ],
)
def test_a_request_the_runner_cannot_run_is_refused_in_one_line(
    ids: tuple[int, ...], prompt_len: int, new: int, problem: str
) -> None:
    with pytest.raises(UsageError, match=problem) as refused:
        GenerationRequest(ids, prompt_len, new)
    assert refused.value.exit_code == 2


def test_the_positions_a_request_needs_are_the_longer_pass() -> None:
    assert REQUEST.positions_needed == 6  # 3 prompt + 4 new - 1 > 5 ids
    alone = GenerationRequest(REQUEST.token_ids, 3, 4, teacher_forced=False)
    assert alone.positions_needed == 6
    long_text = GenerationRequest(tuple(range(20)), 2, 4)
    assert long_text.positions_needed == 20
    long_text.check_fits(20)
    with pytest.raises(UsageError, match="need 20 positions but the program's context is 16"):
        long_text.check_fits(16)


def test_the_ids_file_is_raw_little_endian_int64() -> None:
    assert REQUEST.ids_bytes() == b"".join(t.to_bytes(8, "little") for t in (5, 9, 2, 7, 3))


def test_the_command_line_names_every_file_and_count() -> None:
    files = GenerationFiles.under("/w/job/g0", "/w/inputs/ab.bin")
    invocation = generation_invocation("/w/programs/p.pte", REQUEST, files, cpu_threads=2)
    assert generation_argv("/w/runners/x/etdeploy_runner", invocation) == [
        "/w/runners/x/etdeploy_runner", "--generate", "--model_path=/w/programs/p.pte",
        "--token_ids=/w/inputs/ab.bin", "--prompt_len=3", "--max_new_tokens=4",
        "--generated_file=/w/job/g0.generated.bin", "--result_json=/w/job/g0.json",
        "--method_name=forward", "--logits_file=/w/job/g0.logits.bin", "--cpu_threads=2",
    ]  # fmt: skip
    assert files.outputs() == ("/w/job/g0.generated.bin", "/w/job/g0.json", "/w/job/g0.logits.bin")


def test_generation_alone_asks_for_no_logits_and_a_mismatch_is_refused() -> None:
    alone = GenerationRequest(REQUEST.token_ids, 3, 4, teacher_forced=False)
    files = GenerationFiles.under("g", "ids.bin", teacher_forced=False)
    argv = generation_argv("runner", generation_invocation("p.pte", alone, files))
    assert not any(a.startswith("--logits_file") for a in argv)
    with pytest.raises(UsageError, match="teacher-forced request needs a logits file"):
        generation_invocation("p.pte", REQUEST, files)


def _write_call(
    tmp_path: Path, request: GenerationRequest, *, vocab: int = 8, ids: list[int] | None = None,
    rows: int | None = None, **document: object,
) -> tuple[Path, Path, Path]:  # fmt: skip
    """The files a runner call writes, as the runner writes them (generate.cpp)."""
    result = tmp_path / "g.json"
    body = {
        "schema": GENERATION_SCHEMA, "vocab_size": vocab, "token_count": len(request.token_ids),
        "prompt_len": request.prompt_len, "max_new_tokens": request.max_new_tokens,
        "tokens_per_call": 1, "load_ms": 1.5, "prefill_ms": 2.0, "prefill_tokens_per_s": 1500.0,
        "decode_ms": [0.5] * (request.max_new_tokens - 1), "decode_tokens_per_s": 2000.0,
        "teacher_forced_ms": 3.0, "max_seq_len": None, "peak_rss_bytes": 1 << 20,
        **document,
    }  # fmt: skip
    result.write_text(json.dumps(body))
    generated = tmp_path / "g.generated.bin"
    np.asarray(ids if ids is not None else [1, 2, 3, 4], dtype="<i8").tofile(generated)
    logits = tmp_path / "g.logits.bin"
    count = len(request.token_ids) if rows is None else rows
    np.arange(count * vocab, dtype="<f4").tofile(logits)
    return result, generated, logits


def test_a_calls_files_are_read_into_ids_logits_and_timings(tmp_path: Path) -> None:
    result = read_generation(REQUEST, *_write_call(tmp_path, REQUEST))
    assert result.generated_ids == (1, 2, 3, 4)
    assert result.logits is not None and result.logits.shape == (5, 8)
    assert result.logits[4, 7] == 39.0
    assert result.timings.decode_ms == (0.5, 0.5, 0.5)
    assert result.timings.time_to_first_token_ms == 2.0 and result.max_seq_len is None


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"rows": 4}, r"^g\.logits\.bin: has 128 bytes; 40 logits need 160"),
        ({"ids": [1, 2, 3]}, r"^g\.generated\.bin: has 24 bytes; 4 generated ids need 32"),
        ({"ids": [1, 2, 3, 8]}, r"^g\.generated\.bin: holds an id outside the vocabulary of 8"),
        ({"prompt_len": 2}, r"^g\.json: the runner ran \(T, P, N\) = \(5, 2, 4\)"),
        ({"schema": "other/1"}, r"^g\.json: schema is 'other/1'"),
        ({"decode_ms": [0.5]}, r"^g\.json: decode_ms lists no 3 times"),
        ({"prefill_ms": "soon"}, r"^g\.json: prefill_ms is 'soon', not a number"),
    ],
)
def test_files_that_disagree_with_the_request_name_the_file(
    tmp_path: Path, change: dict[str, object], message: str
) -> None:
    with pytest.raises(RunnerError, match=message) as refused:
        read_generation(REQUEST, *_write_call(tmp_path, REQUEST, **change))  # type: ignore[arg-type]
    assert "\n" not in refused.value.message and refused.value.exit_code == 3


ENDING = GenerationRequest((5, 9, 2, 7, 3), prompt_len=3, max_new_tokens=4, eos_ids=(1, 6))


def test_end_ids_go_to_the_runner_and_end_generation_sooner(tmp_path: Path) -> None:
    files = GenerationFiles.under("g", "ids.bin")
    argv = generation_argv("runner", generation_invocation("p.pte", ENDING, files))
    assert "--eos_ids=1,6" in argv
    # Two ids, the second an end id: the runner stopped there, one decode call.
    written = _write_call(tmp_path, ENDING, ids=[3, 6], generated_count=2, decode_ms=[0.5])
    result = read_generation(ENDING, *written)
    assert result.generated_ids == (3, 6) and result.timings.decode_ms == (0.5,)
    # N ids with no end id among them: generation ran its course.
    ran_on = _write_call(tmp_path, ENDING, ids=[2, 3, 4, 5])
    assert read_generation(ENDING, *ran_on).generated_ids == (2, 3, 4, 5)


@pytest.mark.parametrize(
    ("request_", "ids", "count", "message"),
    [
        # Fewer than N ids from a request with no end ids.
        (REQUEST, [3, 1], 2, r"^g\.json: generated_count is 2 of 4 asked"),
        # Stopped early without an end id, or went on past one.
        (ENDING, [3, 4], 2, r"^g\.generated\.bin: does not stop at its first end id"),
        (ENDING, [1, 2, 3, 4], 4, r"^g\.generated\.bin: does not stop at its first end id"),
    ],
)
def test_a_generation_that_does_not_end_as_asked_is_refused(
    tmp_path: Path, request_: GenerationRequest, ids: list[int], count: int, message: str
) -> None:
    written = _write_call(
        tmp_path, request_, ids=ids, generated_count=count, decode_ms=[0.5] * (count - 1)
    )
    with pytest.raises(RunnerError, match=message):
        read_generation(request_, *written)

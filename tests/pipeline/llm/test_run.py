"""`etdeploy run TINY_LM_FOLDER`: the tiny Llama built, generating on the device through
the runner, and held token by token to float eager and quantized eager.

One 8da4w and one float build per session (cached by content: every later run reads
them back). A correct build passes with its figures in --json; two planted regressions
fail with exit 1, naming the first position where the device departs: one 4-bit group's
scale altered in the .pte, and a program built from the differently trained twin (the
runner tests' own, tests/support/lm_programs.py: built once for both).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.pipeline.llm.conftest import LmRun, run_lm
from tests.support.adb_server import AdbTestbed, adb_testbed
from tests.support.lm_programs import MAX_CACHE_LEN, LmPrograms
from tests.support.planted_lm import alter_one_group_scale
from tests.support.tiny_lm import TinyLm

pytestmark = pytest.mark.slow


def test_a_correct_8da4w_build_passes_with_the_figures_users_quote(int4_run: LmRun) -> None:
    assert int4_run.done.returncode == 0, int4_run.done.stderr
    block = int4_run.block
    assert block["quantization"] == "8da4w g32" and block["group_size"] == 32
    assert block["passed"] and int4_run.document["status"] == "passed"
    # The device computes what the quantized eager program computes (bfloat16 group
    # scales in both: measured 1.0 and 2.6e-7; with float32 eager scales 0.997 and 2.4e-4)...
    quantized = int4_run.comparison("quantized eager")
    assert quantized["top1_agreement"] >= 0.999 and quantized["kld_mean"] < 1e-5
    # ...and departs from float eager by what 4 bits cost, which is more.
    floats = int4_run.comparison("float eager")
    assert floats["kld_mean"] > 10 * quantized["kld_mean"]
    assert floats["top1_agreement"] < quantized["top1_agreement"]
    ppl = int4_run.perplexity("float eager")
    assert ppl["ci_low"] <= ppl["nll_difference"] <= ppl["ci_high"]
    assert 0 < ppl["increase"] < 0.25 and ppl["tokens"] > 200
    speed = block["speed"]
    assert speed["time_to_first_token_ms"] > 0 and speed["decode_tokens_per_s"] > 0
    assert speed["prefill_tokens_per_s"] > 0 and speed["new_tokens"] == 16
    memory = block["memory"]
    # 2 layers x keys and values x 2 heads x 16 dims x 128 positions x 4 bytes
    assert memory["kv_cache_bytes"] == 2 * 2 * 2 * 16 * 128 * 4
    assert memory["planned_bytes"] >= memory["kv_cache_bytes"]
    assert int4_run.document["size"]["verdicts"]
    assert "PASS" in int4_run.done.stdout and "time to first token" in int4_run.done.stdout


def test_a_float_build_matches_float_eager(tiny_lm: TinyLm, tmp_path: Path) -> None:
    run = run_lm(tiny_lm.folder, tmp_path)
    assert run.done.returncode == 0, run.done.stderr
    floats = run.comparison("float eager")
    assert floats["top1_agreement"] == 1.0 and floats["kld_mean"] < 1e-6
    # Every greedy continuation the same, to its end (16 tokens, or sooner at </s>).
    assert floats.get("first_generation_divergence") is None
    assert all(s["device_text"] == s["float_text"] for s in run.block["samples"])
    assert abs(run.perplexity("float eager")["increase"]) < 1e-4


def test_quantized_embeddings_shrink_the_program_and_still_match_their_reference(
    tiny_lm: TinyLm, int4_run: LmRun, tmp_path: Path
) -> None:
    # The int8 table runs as quantized_decomposed::embedding_byte, a kernel our runner
    # links (ExecuTorch's Python runtime does not).
    run = run_lm(tiny_lm.folder, tmp_path, "--quantize", "8da4w", "--quantize-embeddings")
    assert run.done.returncode == 0, run.done.stderr
    assert run.block["quantization"] == "8da4w g32 +emb8"
    weights, before = (
        run.block["memory"]["weights_bytes"],
        int4_run.block["memory"]["weights_bytes"],
    )
    # 512 x 64 float32 embeddings (131 kB) become int8 (33 kB) and a scale per row.
    assert before - weights > 90_000
    quantized = run.comparison("quantized eager")
    assert quantized["top1_agreement"] >= 0.95 and quantized["kld_mean"] < 0.01


def test_one_altered_4bit_scale_fails_naming_where_the_device_departs(
    tiny_lm: TinyLm, int4_run: LmRun, tmp_path: Path
) -> None:
    broken = alter_one_group_scale(Path(int4_run.document["artifact"]["pte"]), tmp_path)
    run = run_lm(tiny_lm.folder, tmp_path, "--quantize", "8da4w", "--pte", broken)
    assert run.done.returncode == 1, run.done.stderr
    first = run.comparison("quantized eager")["first_divergence"]
    assert first["prompt"] == "prompts.txt:1" and first["position"] >= 0
    assert f"position {first['position']}" in run.document["verdict"]["reason"]
    assert "FAIL" in run.done.stdout


def test_a_program_of_another_model_fails(
    tiny_lm: TinyLm, lm_programs: LmPrograms, tmp_path: Path
) -> None:
    # The twin's float program (shared with the runner's tests) run as if it were MODEL's.
    other = lm_programs.other_s1
    run = run_lm(tiny_lm.folder, tmp_path, "--pte", other, "--max-seq-len", str(MAX_CACHE_LEN))
    assert run.done.returncode == 1, run.done.stderr
    floats = run.comparison("float eager")
    assert floats["top1_agreement"] < 0.9 and floats["kld_mean"] > 0.1
    assert floats["first_divergence"]["position"] < 5
    assert "first departs at prompts.txt:1 position" in run.document["verdict"]["reason"]


@pytest.fixture(scope="module")
def phone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AdbTestbed]:
    with adb_testbed(tmp_path_factory.mktemp("adb-lm"), ("p8",)) as testbed:
        yield testbed


def test_the_loopback_phone_generates_what_this_machine_generates(
    tiny_lm: TinyLm, int4_run: LmRun, phone: AdbTestbed, tmp_path: Path
) -> None:
    server = ("--adb-host", "127.0.0.1", "--adb-port", str(phone.server.port))
    run = run_lm(
        tiny_lm.folder, tmp_path, "--quantize", "8da4w", "--device", phone.serial("p8"), *server
    )
    assert run.done.returncode == 0, run.done.stderr
    assert run.document["device"]["transport"] == "adb"
    # A fresh phone: the program and every prompt's ids went over (the runner too,
    # unless preflight's --describe put it there first).
    deploy = run.document["deploy"]
    assert deploy["files_sent"] >= 1 + 6
    assert deploy["files_sent"] + deploy["files_skipped"] >= 2 + 6
    assert deploy["bytes_sent"] > run.document["artifact"]["size_bytes"]
    # The same program (built once) and the same runner code: the same tokens.
    assert run.document["artifact"]["sha256"] == int4_run.document["artifact"]["sha256"]
    here, there = run.comparison("quantized eager"), int4_run.comparison("quantized eager")
    assert here["top1_agreement"] == there["top1_agreement"]
    assert [s["device_text"] for s in run.block["samples"]] == [
        s["device_text"] for s in int4_run.block["samples"]
    ]

"""Decode tokens/s: etdeploy's runner (`--generate`) vs ExecuTorch's TextLLMRunner
(executorch.extension.llm.runner, the C++ runner behind Python bindings in the
1.5.1 wheel) on the same .pte; and what verifying costs over generating alone.

Programs: Llama-architecture models exported as the generation contract expects
(transformers' TorchExportableModuleForDecoderOnlyLM over a static cache, S = 1,
XNNPACK), float32 and 8da4w (4-bit weights in groups of 32). TextLLMRunner reads
the program's metadata methods (get_max_seq_len, get_vocab_size, use_kv_cache,
enable_dynamic_shape, get_bos_id, get_eos_ids: the names the wheel's 1.5.1
runner logs as it reads them, "Metadata: get_max_seq_len = 256" from
llm_runner_helper.cpp, seen 2026-12-05), so this benchmark's export adds them as
constant methods; both
runners load the same file. Two sizes: the tiny Llama the tests train on license
texts (2 layers, hidden 64: per-call overhead dominates) and a wider one of
random weights (8 layers, hidden 512: kernels dominate; speed does not depend on
the weights' values). Both use the license-trained tokenizer; only ids matter.

Decode rate: ours is the runner's own (N - 1 decode calls over their summed
time, after prefill); TextLLMRunner's is the one its Stats report (tokens
generated after the prompt's evaluation over the time since; millisecond stamps,
so 200 tokens are generated), warm (a first generate runs and is dropped), with
no token callback (so no text handed to Python per token).
Both use their default thread pool. Best of REPEATS each.

Verified run vs generation alone: one prompt through etdeploy.pipeline.generate
on the local device (push check, runner call, pull, read), with every position's
logits along the reference's greedy continuation and their comparison with the
reference's (top-1 agreement, mean KL divergence), against the same call without
logits; wall-clock, best of REPEATS. Perplexity over held-out text is a scoring
pass of its own and not part of this figure.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

MAX_CACHE_LEN = 256
PROMPT = "Any litigation relating to this License may be brought only in the courts of"
NEW_TOKENS = 200
REPEATS = 3
EOS_ID = 1  # the tiny Llama's </s>, which its training ends every paragraph with


def _export(folder: Path | None, pte: Path, *, int4: bool, wide: bool = False) -> Path:
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM
    from transformers.integrations.executorch import TorchExportableModuleForDecoderOnlyLM

    model: Any
    if wide:
        torch.manual_seed(0)
        config = LlamaConfig(
            vocab_size=512, hidden_size=512, intermediate_size=1376, num_hidden_layers=8,
            num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=MAX_CACHE_LEN,
            bos_token_id=0, eos_token_id=1,
        )  # fmt: skip
        model = LlamaForCausalLM(config)
    else:
        assert folder is not None
        model = AutoModelForCausalLM.from_pretrained(folder)
    model.eval()
    model.generation_config.cache_implementation = "static"
    model.generation_config.cache_config = {"batch_size": 1, "max_cache_len": MAX_CACHE_LEN}
    if int4:
        from torchao.quantization import Int8DynamicActivationIntxWeightConfig, quantize_
        from torchao.quantization.granularity import PerGroup

        int4_dtype = torch.int4  # type: ignore[attr-defined]
        quantize_(
            model,
            Int8DynamicActivationIntxWeightConfig(
                weight_dtype=int4_dtype, weight_granularity=PerGroup(32)
            ),
        )
    exported = TorchExportableModuleForDecoderOnlyLM(model).export(
        input_ids=torch.tensor([[0]]), cache_position=torch.tensor([0])
    )
    metadata = {
        "get_max_seq_len": MAX_CACHE_LEN, "get_max_context_len": MAX_CACHE_LEN,
        "get_vocab_size": 512, "use_kv_cache": True, "enable_dynamic_shape": False,
        "use_sdpa_with_kv_cache": False, "get_bos_id": 0, "get_eos_ids": [EOS_ID],
    }  # fmt: skip
    program = to_edge_transform_and_lower(
        exported, partitioner=[XnnpackPartitioner()], constant_methods=metadata
    )
    pte.write_bytes(program.to_executorch().buffer)
    return pte


def _ours(runner: Path, pte: Path, ids: list[int], directory: Path) -> tuple[float, list[int]]:
    """Our runner's decode tokens/s (best of REPEATS) and its greedy ids."""
    import subprocess

    from etdeploy.runner.generation import (
        GenerationFiles,
        GenerationRequest,
        generation_argv,
        generation_invocation,
        read_generation,
    )

    # Stopping where TextLLMRunner stops (the program's get_eos_ids): the same work.
    request = GenerationRequest(
        tuple(ids), len(ids), NEW_TOKENS, teacher_forced=False, eos_ids=(EOS_ID,)
    )
    (directory / "ids.bin").write_bytes(request.ids_bytes())
    files = GenerationFiles.under(str(directory / "g"), str(directory / "ids.bin"),
                                  teacher_forced=False)  # fmt: skip
    argv = generation_argv(runner, generation_invocation(str(pte), request, files))
    rates, generated = [], []
    for _ in range(REPEATS):
        subprocess.run(argv, check=True, capture_output=True)
        result = read_generation(request, Path(files.result_json), Path(files.generated))
        assert result.timings.decode_tokens_per_s is not None
        rates.append(result.timings.decode_tokens_per_s)
        generated = list(result.generated_ids)
    return max(rates), generated


def _theirs(pte: Path, tokenizer: Path, prompt: str, *, text: bool) -> tuple[float, int, str]:
    """TextLLMRunner's decode tokens/s (best of REPEATS, warm), tokens generated, and
    with `text` the text it generated (an untimed run with a token callback; random
    weights make pieces that are not UTF-8, which the binding cannot hand over)."""
    from executorch.extension.llm.runner import GenerationConfig, TextLLMRunner

    runner = TextLLMRunner(str(pte), str(tokenizer))
    config = GenerationConfig(echo=False, max_new_tokens=NEW_TOKENS, temperature=0.0)
    pieces: list[str] = []
    if text:
        runner.generate(prompt, config, token_callback=pieces.append)
    rates, count = [], 0
    for attempt in range(REPEATS + 1):
        stats: list[Any] = []
        runner.reset()
        # No token callback: no detokenized text handed to Python per token.
        runner.generate(prompt, config, stats_callback=stats.append)
        s = stats[-1]
        # Its own decode rate (stats.h's report): the tokens generated after the
        # prompt's evaluation over the time since.
        span_ms = s.inference_end_ms - s.prompt_eval_end_ms
        count = s.num_generated_tokens
        if attempt and span_ms > 0:  # the first is the warm-up
            rates.append(count / (span_ms / 1000))
    return max(rates), count, "".join(pieces)


def _best(action: Callable[[], Any]) -> float:
    times = []
    for _ in range(REPEATS):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return min(times)


def _verified_vs_alone(pte: Path, prompt_ids: list[int], root: Path) -> tuple[float, float, int]:
    """One prompt through pipeline.generate on this machine, wall-clock: generation
    alone, vs generation with every position's logits along the reference's greedy
    continuation (what the teacher-forced and free-running checks need) compared
    with the reference's (top-1 agreement, mean KL divergence). The reference here
    is an earlier run of the same program, standing for the eager one the LLM
    pipeline computes once per model and prompt (its cost is not counted)."""
    import numpy as np

    from etdeploy.devices.local import LocalDevice
    from etdeploy.pipeline.deploy import Target
    from etdeploy.pipeline.generate import GenerationSettings, generate_on_device
    from etdeploy.runner.generation import GenerationRequest
    from etdeploy.runner_build import runner_for_device

    device = LocalDevice(workdir=root / "device")
    info = device.info()
    target = Target(device, info, runner_for_device(info))
    settings = GenerationSettings()
    local = root / "pulled"
    local.mkdir(exist_ok=True)
    alone = GenerationRequest(tuple(prompt_ids), len(prompt_ids), NEW_TOKENS, teacher_forced=False)
    (first,) = generate_on_device(target, pte, [alone], settings, "bench", local).calls
    along = tuple(prompt_ids) + first.result.generated_ids
    verified = GenerationRequest(along, len(prompt_ids), NEW_TOKENS)
    (reference,) = generate_on_device(target, pte, [verified], settings, "bench", local).calls
    expected = reference.result.logits
    assert expected is not None
    reused = reference.result.timings.teacher_forced_reused

    def log_softmax(logits: Any) -> Any:
        shifted = logits - logits.max(axis=1, keepdims=True)
        return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))

    expected_log = log_softmax(expected.astype(np.float64))

    def generate_alone() -> None:
        generate_on_device(target, pte, [alone], settings, "bench", local)

    def generate_verified() -> None:
        (done,) = generate_on_device(target, pte, [verified], settings, "bench", local).calls
        table = done.result.logits
        assert table is not None
        agreement = float(np.mean(table.argmax(axis=1) == expected.argmax(axis=1)))
        device_log = log_softmax(table.astype(np.float64))
        kld = float(np.mean((np.exp(expected_log) * (expected_log - device_log)).sum(axis=1)))
        assert agreement == 1.0 and kld < 1e-9

    return _best(generate_verified), _best(generate_alone), reused or 0


def _kept_lms(kept: Path) -> Any:
    from tests.support.tiny_lm import TinyLm, build_tiny_lms

    root = kept / "lm"
    if (root / "prompts.txt").is_file():
        return TinyLm(root / "tiny-llama", root / "tiny-llama-other", root / "prompts.txt",
                      root / "held-out.txt")  # fmt: skip
    partial = kept / f"lm.{os.getpid()}"
    build_tiny_lms(partial)
    partial.rename(root)
    return _kept_lms(kept)


def _kept(pte: Path, folder: Path | None, *, int4: bool) -> Path:
    if not pte.is_file():
        partial = pte.with_name(f".{pte.name}.{os.getpid()}")
        _export(folder, partial, int4=int4, wide=folder is None)
        partial.rename(pte)
    return pte


def main() -> None:
    from transformers import AutoTokenizer

    from etdeploy.paths import cache_dir
    from etdeploy.runner_build import ensure_runner

    print(f"   load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    # The models and programs are kept between runs (training and lowering take
    # minutes); the name changes with anything that changes them.
    # -2: the tiny Llama learnt </s> at the end of each paragraph.
    kept = cache_dir("benchmarks") / f"llm-decode-{MAX_CACHE_LEN}-2"
    kept.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        started = time.perf_counter()
        lm = _kept_lms(kept)
        runner = ensure_runner().executable_path
        tokenizer_file = lm.folder / "tokenizer.json"
        tokenizer = AutoTokenizer.from_pretrained(lm.folder)
        prompt_ids = tokenizer(PROMPT)["input_ids"]
        programs = {
            "tiny fp32": _kept(kept / "tiny-fp32.pte", lm.folder, int4=False),
            "tiny 8da4w": _kept(kept / "tiny-8da4w.pte", lm.folder, int4=True),
            "wide fp32": _kept(kept / "wide-fp32.pte", None, int4=False),
            "wide 8da4w": _kept(kept / "wide-8da4w.pte", None, int4=True),
        }
        print(f"   models trained and exported (or found in {kept}) in "
              f"{time.perf_counter() - started:.0f} s; "
              f"prompt {len(prompt_ids)} ids, {NEW_TOKENS} new tokens, best of {REPEATS}")  # fmt: skip
        ratios = []
        for name, pte in programs.items():
            ours, our_ids = _ours(runner, pte, prompt_ids, root)
            trained = name.startswith("tiny")
            theirs, count, their_text = _theirs(pte, tokenizer_file, PROMPT, text=trained)
            ratios.append(ours / theirs)
            # The same work: both runners' greedy text, as far as the shorter goes.
            our_text = tokenizer.decode(our_ids)
            shared = min(len(our_text), len(their_text))
            same = "same text" if our_text[:shared] == their_text[:shared] else "TEXT DIFFERS"
            same = same if trained else "text not compared"
            print(f"   {name:11s} decode tok/s  etdeploy {ours:9.1f}   TextLLMRunner {theirs:9.1f} "
                  f"({count} tokens, {same})   ratio {ours / theirs:.2f}x")  # fmt: skip
        print(f"   etdeploy/TextLLMRunner decode rate: median {statistics.median(ratios):.2f}x "
              f"(target >= 0.9x)")  # fmt: skip
        for name in ("tiny fp32", "wide 8da4w"):
            verified_s, alone_s, reused = _verified_vs_alone(programs[name], prompt_ids, root)
            total = len(prompt_ids) + NEW_TOKENS
            print(f"   {name}: generation + logits of all {total} positions ({reused} kept from "
                  f"the generation) + comparison {verified_s:.3f} s; generation alone "
                  f"{alone_s:.3f} s; ratio {verified_s / alone_s:.2f}x (target <= 1.5x)")  # fmt: skip
    print(f"   load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

"""ExecuTorch programs of the tiny Llama (tests/support/tiny_lm.py), built once per
session, and what ExecuTorch's Python runtime generates with them.

Each program is exported the way the generation contract expects
(etdeploy/runner/generation.py): transformers' TorchExportableModuleForDecoderOnlyLM
over a static cache, `forward(input_ids int64[1, S], cache_position int64[S])`,
lowered to XNNPACK, with `etdeploy run FOLDER`'s default context (MAX_CACHE_LEN).

- `float_s1`: float32, one token per call (S fixed at 1): etdeploy's own build of the
  folder (etdeploy.pipeline.llm.lm_export.build_lm), the cache entry `etdeploy run
  FOLDER` reads back, so the session builds it once;
- `int4`: 8da4w (int8 dynamic activations, 4-bit weights in groups of 32), S = 1: the
  same, the entry of `etdeploy run FOLDER --quantize 8da4w`;
- `float_chunked`: float32, S dynamic up to CHUNK (prefill and teacher forcing in
  chunks), which etdeploy's build does not make: exported here;
- `other_s1`: float32, S = 1, of the differently trained twin (the wrong program).

The two this module exports are kept in the etdeploy cache (tests/support/kept.py) under
the digest of the folder, the options, this code and the versions of what exports them,
as etdeploy keeps its own builds: a warm run reads all four back (about 30 s saved).

The requests are the held-out prompts, tokenized on the host as etdeploy does: each
line's ids, the first half of them the prompt, the rest its real continuation,
which teacher forcing scores.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from etdeploy.runner.generation import GenerationRequest
from tests.support.tiny_lm import TinyLm

MAX_CACHE_LEN = 128  # etdeploy run's --max-seq-len default
CHUNK = 16
NEW_TOKENS = 12
GROUP_SIZE = 32


@dataclass(frozen=True)
class LmPrograms:
    float_s1: Path
    float_chunked: Path
    int4: Path
    other_s1: Path
    requests: tuple[GenerationRequest, ...]
    vocab_size: int


def export_program(folder: Path, pte: Path, *, chunk: int = 1) -> Path:
    """The model in `folder` as a .pte with a static cache of MAX_CACHE_LEN positions."""
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower
    from transformers import AutoModelForCausalLM
    from transformers.integrations.executorch import TorchExportableModuleForDecoderOnlyLM

    model: Any = AutoModelForCausalLM.from_pretrained(folder)
    model.eval()
    model.generation_config.cache_implementation = "static"
    model.generation_config.cache_config = {"batch_size": 1, "max_cache_len": MAX_CACHE_LEN}
    wrapper = TorchExportableModuleForDecoderOnlyLM(model)
    if chunk == 1:
        exported = wrapper.export(input_ids=torch.tensor([[0]]), cache_position=torch.tensor([0]))
    else:
        length = torch.export.Dim("length", min=1, max=chunk)
        exported = wrapper.export(
            input_ids=torch.tensor([[0, 0]]),
            cache_position=torch.tensor([0, 1]),
            dynamic_shapes={"input_ids": {1: length}, "cache_position": {0: length}},
        )
    program = to_edge_transform_and_lower(exported, partitioner=[XnnpackPartitioner()])
    pte.write_bytes(program.to_executorch().buffer)
    return pte


def kept_export(folder: Path, name: str, *, chunk: int = 1) -> Path:
    """export_program's .pte of `folder`, exported once per etdeploy cache."""
    from importlib.metadata import version

    from tests.support.kept import digest_of, files_of, kept

    key = digest_of([
        *files_of(folder), f"chunk={chunk} max_cache_len={MAX_CACHE_LEN}",
        Path(__file__).read_bytes(), *(version(p) for p in ("torch", "transformers", "executorch")),
    ])  # fmt: skip
    folder_made = kept(
        "lm-programs", key, lambda to: export_program(folder, to / name, chunk=chunk)
    )
    return folder_made / name


def etdeploy_build(folder: Path, *, int4: bool = False) -> Path:
    """etdeploy's build of `folder` at MAX_CACHE_LEN positions (cached by content)."""
    from etdeploy.pipeline.llm.folder import open_lm_folder
    from etdeploy.pipeline.llm.lm_export import LmBuildOptions, build_lm

    options = LmBuildOptions(
        max_seq_len=MAX_CACHE_LEN, quantize="8da4w" if int4 else None, group_size=GROUP_SIZE
    )
    return build_lm(open_lm_folder(folder), options).pte


def prompt_requests(folder: Path, prompts: Path) -> tuple[GenerationRequest, ...]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    requests = []
    for line in prompts.read_text(encoding="utf-8").splitlines():
        ids = tokenizer(line)["input_ids"]
        requests.append(GenerationRequest(tuple(ids), len(ids) // 2, NEW_TOKENS))
    return tuple(requests)


def runtime_generation(pte: Path, request: GenerationRequest) -> tuple[tuple[int, ...], Any]:
    """What ExecuTorch's Python runtime gives for `request`, one token per call: the
    greedy ids from the prompt, and every position's logits under teacher forcing."""
    import torch
    from executorch.runtime import Runtime

    method = Runtime.get().load_program(str(pte)).load_method("forward")

    def last_row(token: int, position: int) -> Any:
        logits = method.execute([torch.tensor([[token]]), torch.tensor([position])])[0]
        return logits.reshape(-1, logits.shape[-1])[-1].numpy().copy()

    row: Any = None
    for position, token in enumerate(request.token_ids[: request.prompt_len]):
        row = last_row(token, position)
    generated = [int(np.argmax(row))]
    for k in range(1, request.max_new_tokens):
        generated.append(int(np.argmax(last_row(generated[-1], request.prompt_len + k - 1))))
    table = np.stack([last_row(t, p) for p, t in enumerate(request.token_ids)])
    return tuple(generated), table


@pytest.fixture(scope="session")
def lm_programs(tiny_lm: TinyLm) -> LmPrograms:
    requests = prompt_requests(tiny_lm.folder, tiny_lm.prompts)
    return LmPrograms(
        float_s1=etdeploy_build(tiny_lm.folder),
        float_chunked=kept_export(tiny_lm.folder, "float-chunked.pte", chunk=CHUNK),
        int4=etdeploy_build(tiny_lm.folder, int4=True),
        other_s1=kept_export(tiny_lm.other_folder, "other-s1.pte"),
        requests=requests,
        vocab_size=512,
    )

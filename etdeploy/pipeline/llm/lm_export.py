"""Build a causal LM into a .pte: a static KV cache, quantization, XNNPACK.

The road: transformers' own export wrapper (transformers.integrations.executorch,
TorchExportableModuleForDecoderOnlyLM, transformers 5.25.0, read 2026-12-05) turns the
folder's model into `forward(input_ids [1, 1], cache_position [1]) -> logits [1, 1, V]`
with the KV cache as mutable buffers of --max-seq-len positions; torchao quantizes the
eager model first (its configs as ExecuTorch's LLM export applies them: 8da4w is
Int8DynamicActivationIntxWeightConfig with int4 weights in groups, torchao 0.18.0);
XnnpackPartitioner takes the linears. ExecuTorch's own LLM export
(executorch.extension.llm.export) was read and not chosen: it builds Llama from its own
module definitions and checkpoint format rather than from a Hugging Face folder, and its
sdpa_with_kv_cache/update_cache custom ops are not in our runner (see
etdeploy.runner.generation). optimum-executorch pins transformers 5.0.0rc1.

One token per call: the program's sequence length is 1, so prefill feeds the prompt one
token at a time (the figures say so). The quantized eager module is kept: it is the
reference the device must reproduce (etdeploy.pipeline.llm.lm_references).

Builds are cached by content: the folder's config and weights, the options, and the
versions of the libraries that make the program.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import etdeploy
from etdeploy.atomic import atomic_write, read_json_object, write_json
from etdeploy.build_options import LM_QUANTIZATIONS
from etdeploy.digests import file_sha256, sha256_file
from etdeploy.errors import UsageError
from etdeploy.paths import cache_dir
from etdeploy.pipeline.llm.folder import LmFolder

# --quantize for a language model: None (float), and LM_QUANTIZATIONS. int8 weight-only
# (torchao IntxWeightOnlyConfig, int8 per channel) is left out: executorch 1.5.1's
# XnnpackPartitioner lowers it without its scales. LinearConfig refuses a quantized
# weight with float activations, the linear decomposes to permute + mm, and MMConfig's
# source-partition walk (get_deps_from_src_partition's find_partition_args follows
# each argument's first input) reaches the int8 data itself, classes the mm as FP32
# and takes the dequantize into the partition: the program computes x @ qdata.T
# (exactly, on one Linear), off by 1/scale. Not the scale dtype (per-channel scales
# stay float32 in get_quant_params). backends/xnnpack/partition/config/
# gemm_configs.py, read and measured 2026-12-05; a run would only ever fail.
# XNNPACK lowers a 4-bit group only when its size is a multiple of 32 (an assertion in
# NodeVisitor._check_per_channel_group_params: executorch 1.5.1,
# backends/xnnpack/operators/node_visitor.py, read 2026-12-05); checked here so the
# user hears it in one line before the build, not as a traceback from the lowering.
XNNPACK_GROUP_MULTIPLE = 32
COMMON_GROUP_SIZES = (32, 64, 128, 256)
# Bump when what a build writes changes for the same inputs.
# 2: 8da4w's group scales made bfloat16 in the eager module (programs of 1 differ).
_BUILD_RECIPE = "etdeploy.pipeline.llm.lm_export/2"
# What makes an LM program: in its build key, and in the versions a result records.
LM_LIBRARIES = ("torch", "executorch", "transformers", "torchao")


@dataclass(frozen=True)
class LmBuildOptions:
    """What makes one LM program from one folder."""

    max_seq_len: int = 128
    quantize: str | None = None  # None (float32) or 8da4w
    group_size: int = 32  # 8da4w's weight group along each linear's input
    quantize_embeddings: bool = False  # int8 per-row embedding table

    @property
    def label(self) -> str:
        if self.quantize == "8da4w":
            text = f"8da4w g{self.group_size}"
        else:
            text = self.quantize or "float32"
        return text + (" +emb8" if self.quantize_embeddings else "")


def check_options(folder: LmFolder, options: LmBuildOptions) -> None:
    """Refuse what cannot build, from config.json alone (before anything slow)."""
    if options.quantize is not None and options.quantize not in LM_QUANTIZATIONS:
        raise UsageError(
            f"unknown quantization {options.quantize!r} for a language model",
            f"use {' or '.join(LM_QUANTIZATIONS)} (or none for float32)",
        )
    if options.max_seq_len < 2:
        raise UsageError(f"--max-seq-len must be at least 2, got {options.max_seq_len}")
    if options.quantize != "8da4w":
        return
    if options.group_size <= 0 or options.group_size % XNNPACK_GROUP_MULTIPLE:
        raise UsageError(
            f"--group-size {options.group_size} is not a multiple of "
            f"{XNNPACK_GROUP_MULTIPLE}, which XNNPACK requires of 4-bit groups",
            "use 32 (most accurate), 64 or 128 (smallest)",
        )
    for layer, size in folder.linear_input_sizes:
        if size % options.group_size:
            fits = [g for g in COMMON_GROUP_SIZES if size % g == 0]
            raise UsageError(
                f"--group-size {options.group_size} does not divide {layer}'s input size {size}",
                f"use a group size that divides every layer's input: {', '.join(map(str, fits))}"
                if fits
                else "this model's layers take no 4-bit group size; build it in float32",
            )


def load_causal_lm(folder: LmFolder) -> Any:
    """The float eager model (torch, transformers), in eval mode and float32."""
    import torch
    from transformers import AutoModelForCausalLM

    model: Any = AutoModelForCausalLM.from_pretrained(folder.path, dtype=torch.float32)
    return model.eval()


def quantized_model(folder: LmFolder, options: LmBuildOptions) -> Any:
    """The eager model quantized as the program will be (float when no quantization):
    the reference the device is held to."""
    model = load_causal_lm(folder)
    apply_quantization(model, options)
    return model


def apply_quantization(model: Any, options: LmBuildOptions) -> None:
    import torch
    from torchao.quantization import (
        Int8DynamicActivationIntxWeightConfig,
        IntxWeightOnlyConfig,
        quantize_,
    )
    from torchao.quantization.granularity import PerAxis, PerGroup

    if options.quantize_embeddings:
        quantize_(
            model,
            IntxWeightOnlyConfig(weight_dtype=torch.int8, granularity=PerAxis(0)),
            filter_fn=lambda module, _name: isinstance(module, torch.nn.Embedding),
        )
    if options.quantize == "8da4w":
        config: Any = Int8DynamicActivationIntxWeightConfig(
            weight_dtype=torch.int4,  # type: ignore[attr-defined]  # in torch 2.13, not its stubs
            weight_granularity=PerGroup(options.group_size),
            # XNNPACK stores 4-bit group scales as bfloat16 whatever the graph holds
            # (NodeVisitor.get_quant_params casts `per_channel_group` scales with
            # scale.to(torch.bfloat16): executorch 1.5.1,
            # backends/xnnpack/operators/node_visitor.py, read 2026-12-05). With
            # torchao's float32 scales the eager module is not the program: its logits
            # departed from the device's by ~0.008 of their range on the test model;
            # with bfloat16 scales by ~5e-7. The reference and the program are this
            # one module, so both get them.
            weight_scale_dtype=torch.bfloat16,
        )
        quantize_(model, config)


@dataclass(frozen=True)
class LmProgram:
    """A built LM program and what it was built from."""

    pte: Path
    sha256: str
    size_bytes: int
    options: LmBuildOptions
    cached: bool
    # The KV cache: the mutable buffers' bytes (keys and values of every layer).
    kv_cache_bytes: int
    vocab_size: int
    # The library versions it was built with, when known from elsewhere than this
    # machine (a job bundle's); None: this machine's.
    built_with: tuple[tuple[str, str | None], ...] | None = None


def built_with() -> dict[str, str | None]:
    """The versions of what makes an LM program, here (None: not installed)."""

    def installed(name: str) -> str | None:
        try:
            return version(name)
        except PackageNotFoundError:
            return None

    return {"etdeploy": etdeploy.__version__, **{n: installed(n) for n in LM_LIBRARIES}}


def build_key(folder: LmFolder, options: LmBuildOptions) -> str:
    """The build's content key: what goes in and what makes it."""
    digest = hashlib.sha256(_BUILD_RECIPE.encode())
    for path in sorted((folder.path / "config.json", *folder.weights)):
        # Recorded digests: an unchanged multi-GB checkpoint is not read again.
        digest.update(path.name.encode() + file_sha256(path).encode())
    libraries = {name: version(name) for name in LM_LIBRARIES}
    digest.update(json.dumps([asdict(options), libraries], sort_keys=True).encode())
    return digest.hexdigest()[:24]


def build_lm(folder: LmFolder, options: LmBuildOptions, *, use_cache: bool = True) -> LmProgram:
    """The folder built into a .pte (or the cached one of the same content)."""
    entry = cache_dir("llm-builds") / build_key(folder, options)
    pte, about = entry / "model.pte", entry / "build.json"
    known = read_json_object(about) if use_cache and pte.is_file() else None
    if known is not None and known.get("sha256") == sha256_file(pte):
        return LmProgram(
            pte, known["sha256"], pte.stat().st_size, options, True,
            int(known["kv_cache_bytes"]), int(known["vocab_size"]),
        )  # fmt: skip
    entry.mkdir(parents=True, exist_ok=True)
    buffer, kv_bytes = _lowered(folder, options)
    atomic_write(pte, buffer)
    sha = sha256_file(pte)
    record = {"sha256": sha, "kv_cache_bytes": kv_bytes, "vocab_size": folder.vocab_size}
    write_json({**record, "options": asdict(options), "folder": str(folder.path)}, about)
    return LmProgram(pte, sha, len(buffer), options, False, kv_bytes, folder.vocab_size)


def lm_program(
    folder: LmFolder, options: LmBuildOptions, pte: Path | None, use_cache: bool
) -> LmProgram:
    """The program a run holds to the folder: --pte's, or the folder built (cached)."""
    if pte is not None:
        return given_program(pte, folder, options)
    return build_lm(folder, options, use_cache=use_cache)


def given_program(pte: Path, folder: LmFolder, options: LmBuildOptions) -> LmProgram:
    """A .pte built elsewhere (--pte), run against the folder's references; its KV cache
    as the folder's config gives it at --max-seq-len."""
    return LmProgram(
        pte, file_sha256(pte), pte.stat().st_size, options, True,
        folder.kv_bytes_per_position * options.max_seq_len, folder.vocab_size,
    )  # fmt: skip


def _lowered(folder: LmFolder, options: LmBuildOptions) -> tuple[bytes, int]:
    """The program's bytes and its KV cache's size."""
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower
    from transformers.integrations.executorch import TorchExportableModuleForDecoderOnlyLM

    model = quantized_model(folder, options)
    model.generation_config.cache_implementation = "static"
    model.generation_config.cache_config = {"batch_size": 1, "max_cache_len": options.max_seq_len}
    wrapper = TorchExportableModuleForDecoderOnlyLM(model)
    kv_bytes = sum(
        buffer.numel() * buffer.element_size()
        for name, buffer in wrapper.named_buffers()
        if "key_cache" in name or "value_cache" in name
    )
    with torch.no_grad():
        exported = wrapper.export(
            input_ids=torch.tensor([[0]], dtype=torch.long),
            cache_position=torch.tensor([0], dtype=torch.long),
        )
    edge = to_edge_transform_and_lower(exported, partitioner=[XnnpackPartitioner()])
    if options.quantize_embeddings:
        # XNNPACK takes no embedding: torchao's dequantize + embedding pair becomes
        # quantized_decomposed::embedding_byte, a kernel of the quantized library our
        # runner links (executorch.exir.passes.quant_fusion_pass, executorch 1.5.1, the
        # pass its own tests apply to torchao embeddings; read 2026-12-05).
        from executorch.exir.passes.quant_fusion_pass import quant_fusion_and_const_prop_pass

        quant_fusion_and_const_prop_pass(edge.exported_program())
    return bytes(edge.to_executorch().buffer), kv_bytes

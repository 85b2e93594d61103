"""A language model as a job bundle: `etdeploy bundle FOLDER -o DIR` where torch is,
`etdeploy run --bundle DIR` where it is not.

The bundle holds what `etdeploy run FOLDER` computes before the device runs: the
program, the runners, the prompts' ids, and both references (float and quantized
eager: every position's logits and the greedy continuation of each prompt), plus each
token's text, so the report can say which tokens parted without the tokenizer. Its
layout beside the ordinary bundle's (etdeploy.bundle.job_bundle):

    JOB/program/model.pte               the program (its .pte.json an empty record)
    JOB/runners/ABI-KIND/               a runner bundle per ABI
    JOB/language_model/case.json        LmCase, below: prompts and ids, options, gates...
    JOB/language_model/float.npz        l<P>: prompt P's logits (T x V), g<P>: its ids
    JOB/language_model/quantized.npz    the same from the quantized eager model
    JOB/language_model/tokens.json      each id's text, decoded alone

A text is its tokens' texts joined: what the tokenizer says for whole words, a
replacement character where a token is part of a UTF-8 character.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

import etdeploy
from etdeploy.atomic import read_json_object
from etdeploy.bundle.job_bundle import (
    BUNDLE_FILE,
    PROGRAM_DIR,
    BundleManifest,
    References,
    bundle_runners,
)
from etdeploy.errors import UsageError
from etdeploy.jsonvalue import (
    JsonObject,
    as_object,
    read_array,
    read_float,
    read_int,
    read_object,
    read_str,
)
from etdeploy.pipeline.bundle_writer import MadeBundle, bundle_folder, settings_json
from etdeploy.pipeline.llm.lm_export import LmBuildOptions, LmProgram, build_lm, built_with
from etdeploy.pipeline.llm.lm_job import LmJob
from etdeploy.pipeline.llm.lm_references import eager_references
from etdeploy.pipeline.llm.prompts import Prompt, tokenizer_text
from etdeploy.pipeline.llm.run import check_lm_job, generate_and_compare
from etdeploy.pipeline.llm.verify_tokens import PromptRun
from etdeploy.pipeline.plan import lm_request_of
from etdeploy.results.result_lm import LmGates

if TYPE_CHECKING:
    from etdeploy.bundle.job_bundle import JobBundle
    from etdeploy.devices.base import Device
    from etdeploy.pipeline.bundle_writer import MadeBundle, Writer
    from etdeploy.pipeline.job import RunContext, RunJob
    from etdeploy.pipeline.plan import LmRequest
    from etdeploy.results.result import RunResult
    from etdeploy.runner_build import RunnerBundle

LM_DIR = "language_model"
LM_SCHEMA = "etdeploy.lm_bundle/1"
_HINT = "make it again with `etdeploy bundle FOLDER -o DIR`"


@dataclass(frozen=True)
class LmCase:
    """A language model's job bundle case (case.json, LM_SCHEMA): the checked job and
    what its program is, beside the program file the bundle carries."""

    job: LmJob
    vocab_size: int
    kv_cache_bytes: int
    # The library versions the program was built with (etdeploy.pipeline.llm.lm_export.built_with).
    built_with: tuple[tuple[str, str | None], ...]

    def to_json(self) -> JsonObject:
        job = self.job
        return {
            "schema": LM_SCHEMA,
            "architecture": job.architecture,
            "options": {
                "max_seq_len": job.options.max_seq_len,
                "quantize": job.options.quantize,
                "group_size": job.options.group_size,
                "quantize_embeddings": job.options.quantize_embeddings,
            },
            "prompts": [
                {"name": p.name, "text": p.text, "token_ids": list(p.token_ids)}
                for p in job.prompts
            ],
            "prompt_source": job.prompt_source,
            "gates": {
                "min_token_agreement": job.gates.min_token_agreement,
                "max_kld": job.gates.max_kld,
                "max_ppl_increase": job.gates.max_ppl_increase,
            },
            "max_new_tokens": job.max_new_tokens,
            "eos_ids": list(job.eos_ids),
            "vocab_size": self.vocab_size,
            "kv_cache_bytes": self.kv_cache_bytes,
            "built_with": dict(self.built_with),
        }

    @classmethod
    def from_json(cls, raw: JsonObject | None, where: str) -> LmCase:
        """case.json read whole: a missing key, or one of the wrong kind, is a UsageError
        naming it (exit 2)."""
        if raw is None or raw.get("schema") != LM_SCHEMA:
            raise UsageError(f"{where} is not a language model's case ({LM_SCHEMA})", _HINT)
        said = read_object(raw, "options", where)
        gates = read_object(raw, "gates", where)
        prompts = [as_object(item, f"{where}: prompts") for item in read_array(raw, "prompts")]
        versions = read_object(raw, "built_with", where)
        required = (
            [(raw, k) for k in _CASE_KEYS]
            + [(said, k) for k in ("max_seq_len", "group_size")]
            + [(gates, k) for k in ("min_token_agreement", "max_kld", "max_ppl_increase")]
            + [(p, k) for p in prompts for k in ("name", "text")]
        )
        # Every key present: the readers' defaults below are then never taken.
        missing = next((key for data, key in required if data.get(key) is None), None)
        if missing is not None:
            raise UsageError(f"{where}: {missing} is missing", _HINT)
        options = LmBuildOptions(
            max_seq_len=read_int(said, "max_seq_len", 0, where),
            quantize=read_str(said, "quantize", None, where),
            group_size=read_int(said, "group_size", 0, where),
            quantize_embeddings=bool(said.get("quantize_embeddings")),
        )
        job = LmJob(
            folder=None,
            options=options,
            prompts=tuple(
                Prompt(
                    read_str(p, "name", "", where),
                    read_str(p, "text", "", where),
                    tuple(t for t in read_array(p, "token_ids", where) if type(t) is int),
                )
                for p in prompts
            ),
            prompt_source=read_str(raw, "prompt_source", "", where),
            gates=LmGates(
                min_token_agreement=read_float(gates, "min_token_agreement", 0.0, where),
                max_kld=read_float(gates, "max_kld", 0.0, where),
                max_ppl_increase=read_float(gates, "max_ppl_increase", 0.0, where),
            ),
            max_new_tokens=read_int(raw, "max_new_tokens", 0, where),
            eos_ids=tuple(t for t in read_array(raw, "eos_ids", where) if type(t) is int),
            architecture=read_str(raw, "architecture", "", where),
        )
        return cls(
            job,
            vocab_size=read_int(raw, "vocab_size", 0, where),
            kv_cache_bytes=read_int(raw, "kv_cache_bytes", 0, where),
            built_with=tuple((k, v if isinstance(v, str) else None) for k, v in versions.items()),
        )


# What case.json must say at its top level (the rest is read where it is nested).
_CASE_KEYS = (
    "prompt_source",
    "max_new_tokens",
    "architecture",
    "kv_cache_bytes",
    "vocab_size",
)


def make_lm_bundle(
    job: RunJob,
    out: Path,
    runners: Sequence[RunnerBundle],
    folder: Path,
    say: Callable[[str], None],
) -> MadeBundle:
    """The folder's program built, its references computed, written to `out` whole
    (a temporary folder renamed into place)."""
    checked = check_lm_job(lm_request_of(job), folder)
    assert checked.folder is not None
    say(f"building {checked.folder.path.name} ({checked.options.label})")
    program = build_lm(checked.folder, checked.options, use_cache=job.use_cache)
    say("computing float and quantized eager")
    floats, quantized = eager_references(checked)
    text = tokenizer_text(checked.folder)
    case = LmCase(checked, program.vocab_size, program.kv_cache_bytes, tuple(built_with().items()))
    out = Path(out)
    with bundle_folder(out) as writer:
        pte = writer.copy(program.pte, f"{PROGRAM_DIR}/model.pte")
        program_manifest = writer.text(f"{PROGRAM_DIR}/model.pte.json", "{}")
        entries = tuple(writer.runner(bundle) for bundle in runners)
        case_file = writer.text(f"{LM_DIR}/case.json", json.dumps(case.to_json()))
        tokens = [text([i]) for i in range(program.vocab_size)]
        writer.text(f"{LM_DIR}/tokens.json", json.dumps(tokens))
        references = References(
            kind="eager",
            float=_runs(writer, f"{LM_DIR}/float.npz", floats),
            quantized=_runs(writer, f"{LM_DIR}/quantized.npz", quantized),
            quantized_source="the quantized eager model",
        )
        manifest = BundleManifest(
            model=job.model or str(folder), pte=pte, program_manifest=program_manifest,
            data=None, runners=entries, samples=tuple(p.name for p in checked.prompts),
            on_noise=False, references=references, settings=settings_json(job),
            language_model=case_file, files=writer.files, etdeploy=etdeploy.__version__,
            created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        )  # fmt: skip
        writer.text(BUNDLE_FILE, json.dumps(manifest.to_json(), indent=2), listed=False)
    return MadeBundle(out, manifest, tuple(runners))


def _runs(writer: Writer, relative: str, runs: Sequence[PromptRun]) -> str:
    arrays: dict[str, np.ndarray] = {}
    for index, run in enumerate(runs):
        arrays[f"l{index}"] = np.asarray(run.logits, dtype=np.float32)
        arrays[f"g{index}"] = np.asarray(run.generated, dtype=np.int64)
    target = writer.root / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, "wb") as handle:
        np.savez(handle, **arrays)  # type: ignore[arg-type]  # str keys, never allow_pickle
    return writer.listed(relative)


def run_lm_bundle(
    bundle: JobBundle, request: LmRequest, device: Device, context: RunContext, job_id: str
) -> RunResult:
    """`etdeploy run --bundle DIR` of a language model (the bundle opened and checked
    at the dispatch): no torch, no tokenizer library; the references and the tokens'
    texts are the bundle's."""
    m = bundle.manifest
    assert m.language_model is not None
    where = f"{bundle.path.name}/{m.language_model}"
    case = LmCase.from_json(read_json_object(bundle.file(m.language_model)), where)
    checked = case.job
    program = LmProgram(
        bundle.file(m.pte), m.files[m.pte].sha256, m.files[m.pte].size, checked.options,
        True, case.kv_cache_bytes, case.vocab_size, case.built_with,
    )  # fmt: skip
    tokens = _read_tokens(bundle)
    floats = _read_runs(bundle, m.references.float, checked.prompts)
    quantized = _read_runs(bundle, m.references.quantized or m.references.float, checked.prompts)

    def text(ids: Sequence[int]) -> str:
        return "".join(tokens[i] if 0 <= i < len(tokens) else "" for i in ids)

    return generate_and_compare(
        request, device, context, job_id, checked, program, bundle_runners(bundle),
        lambda: (floats, quantized), text,
    )  # fmt: skip


def _read_tokens(bundle: JobBundle) -> list[str]:
    """Each id's text, as the bundle was made with them."""
    try:
        tokens = json.loads(bundle.file(f"{LM_DIR}/tokens.json").read_text("utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(
            f"{bundle.path.name}: cannot read its tokens' texts: {exc}", _HINT
        ) from None
    return [str(t) for t in tokens]


def _read_runs(
    bundle: JobBundle, relative: str, prompts: Sequence[Prompt]
) -> tuple[PromptRun, ...]:
    try:
        with np.load(bundle.file(relative), allow_pickle=False) as archive:
            return tuple(
                PromptRun(
                    p.name, p.token_ids, archive[f"l{i}"], tuple(int(t) for t in archive[f"g{i}"])
                )
                for i, p in enumerate(prompts)
            )
    except (OSError, ValueError, KeyError) as exc:
        raise UsageError(f"{bundle.path.name}: cannot read {relative}: {exc}", _HINT) from None

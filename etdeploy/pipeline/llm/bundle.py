"""A language model as a job bundle: `etdeploy bundle FOLDER -o DIR` where torch is,
`etdeploy run --bundle DIR` where it is not.

The bundle holds what `etdeploy run FOLDER` computes before the device runs: the
program, the runners, the prompts' ids, and both references (float and quantized
eager: every position's logits and the greedy continuation of each prompt), plus each
token's text, so the report can say which tokens parted without the tokenizer. Its
layout beside the ordinary bundle's (etdeploy.bundle.bundle_manifest):

    JOB/program/model.pte               the program (its .pte.json an empty record)
    JOB/runners/ABI-KIND/               a runner bundle per ABI
    JOB/language_model/case.json        LM_SCHEMA: prompts and ids, options, gates...
    JOB/language_model/float.npz        l<P>: prompt P's logits (T x V), g<P>: its ids
    JOB/language_model/quantized.npz    the same from the quantized eager model
    JOB/language_model/tokens.json      each id's text, decoded alone

A text is its tokens' texts joined: what the tokenizer says for whole words, a
replacement character where a token is part of a UTF-8 character.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import numpy as np

from etdeploy.bundle.bundle_manifest import (
    BUNDLE_FILE,
    PROGRAM_DIR,
    BundleManifest,
    References,
)
from etdeploy.errors import UsageError
from etdeploy.pipeline.llm.lm_export import LmBuildOptions, LmProgram
from etdeploy.pipeline.llm.prompts import Prompt
from etdeploy.pipeline.llm.verify_tokens import PromptRun
from etdeploy.results.result_lm import LmGates

if TYPE_CHECKING:
    from etdeploy.bundle.load import JobBundle
    from etdeploy.devices.base import Device
    from etdeploy.pipeline.bundle_writer import MadeBundle
    from etdeploy.pipeline.job import RunContext, RunJob
    from etdeploy.pipeline.llm.lm_job import LmJob
    from etdeploy.results.result import RunResult
    from etdeploy.runner_build import RunnerBundle

T = TypeVar("T")
LM_DIR = "language_model"
LM_SCHEMA = "etdeploy.lm_bundle/1"
_HINT = "make it again with `etdeploy bundle FOLDER -o DIR`"


def make_lm_bundle(
    job: RunJob,
    out: Path,
    runners: Sequence[RunnerBundle],
    folder: Path,
    say: Callable[[str], None],
) -> MadeBundle:
    """The folder's program built, its references computed, written to `out` whole
    (a temporary folder renamed into place)."""
    import etdeploy
    from etdeploy.pipeline.bundle_writer import MadeBundle, bundle_folder, settings_json
    from etdeploy.pipeline.llm.lm_export import build_lm
    from etdeploy.pipeline.llm.run import check_lm_job, eager_references, tokenizer_text

    checked = check_lm_job(job, folder)
    assert checked.folder is not None
    say(f"building {checked.folder.path.name} ({checked.options.label})")
    program = build_lm(checked.folder, checked.options, use_cache=job.use_cache)
    say("computing float and quantized eager")
    floats, quantized = eager_references(checked)
    text = tokenizer_text(checked.folder)
    out = Path(out)
    with bundle_folder(out) as writer:
        pte = writer.copy(program.pte, f"{PROGRAM_DIR}/model.pte")
        program_manifest = writer.text(f"{PROGRAM_DIR}/model.pte.json", "{}")
        entries = tuple(writer.runner(bundle) for bundle in runners)
        case = writer.text(f"{LM_DIR}/case.json", json.dumps(_case_json(checked, program)))
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
            language_model=case, files=writer.files, etdeploy=etdeploy.__version__,
            created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        )  # fmt: skip
        writer.text(BUNDLE_FILE, json.dumps(manifest.to_json(), indent=2), listed=False)
    return MadeBundle(out, manifest, tuple(runners))


def _case_json(checked: LmJob, program: LmProgram) -> dict[str, object]:
    from etdeploy.pipeline.llm.lm_result import built_with

    return {
        "schema": LM_SCHEMA,
        "architecture": checked.architecture,
        "options": {
            "max_seq_len": checked.options.max_seq_len,
            "quantize": checked.options.quantize,
            "group_size": checked.options.group_size,
            "quantize_embeddings": checked.options.quantize_embeddings,
        },
        "prompts": [
            {"name": p.name, "text": p.text, "token_ids": list(p.token_ids)}
            for p in checked.prompts
        ],
        "prompt_source": checked.prompt_source,
        "gates": {
            "min_token_agreement": checked.gates.min_token_agreement,
            "max_kld": checked.gates.max_kld,
            "max_ppl_increase": checked.gates.max_ppl_increase,
        },
        "max_new_tokens": checked.max_new_tokens,
        "eos_ids": list(checked.eos_ids),
        "vocab_size": program.vocab_size,
        "kv_cache_bytes": program.kv_cache_bytes,
        "built_with": built_with(),
    }


def _runs(writer: object, relative: str, runs: Sequence[PromptRun]) -> str:
    from etdeploy.pipeline.bundle_writer import Writer

    assert isinstance(writer, Writer)
    arrays: dict[str, np.ndarray] = {}
    for index, run in enumerate(runs):
        arrays[f"l{index}"] = np.asarray(run.logits, dtype=np.float32)
        arrays[f"g{index}"] = np.asarray(run.generated, dtype=np.int64)
    target = writer.root / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, "wb") as handle:
        np.savez(handle, **arrays)  # type: ignore[arg-type]  # str keys, never allow_pickle
    return writer.listed(relative)


def is_lm_bundle(path: Path) -> bool:
    """A job bundle of a language model (its bundle.json names a language_model case)."""
    from etdeploy.bundle.bundle_manifest import read_bundle_manifest

    return read_bundle_manifest(path).language_model is not None


def run_lm_bundle(job: RunJob, device: Device, context: RunContext, job_id: str) -> RunResult:
    """`etdeploy run --bundle DIR` of a language model: no torch, no tokenizer library;
    the references and the tokens' texts are the bundle's."""
    from etdeploy.bundle.load import bundle_runners, open_bundle
    from etdeploy.pipeline.llm.run import generate_and_compare

    assert job.bundle is not None
    bundle = open_bundle(job.bundle)
    checked, program, tokens = _read_case(bundle)
    refs = bundle.manifest.references
    floats = _read_runs(bundle, refs.float, checked.prompts)
    quantized = _read_runs(bundle, refs.quantized or refs.float, checked.prompts)

    def text(ids: Sequence[int]) -> str:
        return "".join(tokens[i] if 0 <= i < len(tokens) else "" for i in ids)

    return generate_and_compare(
        job, device, context, job_id, checked, program, bundle_runners(bundle),
        lambda: (floats, quantized), text,
    )  # fmt: skip


def _read_case(bundle: JobBundle) -> tuple[LmJob, LmProgram, list[str]]:
    from etdeploy.atomic import read_json_object
    from etdeploy.jsonvalue import read_array, read_object
    from etdeploy.pipeline.llm.lm_job import LmJob

    m = bundle.manifest
    assert m.language_model is not None
    where = f"{bundle.path.name}/{m.language_model}"
    raw = read_json_object(bundle.file(m.language_model))
    if raw is None or raw.get("schema") != LM_SCHEMA:
        raise UsageError(f"{where} is not a language model's case ({LM_SCHEMA})", _HINT)
    said = read_object(raw, "options", where)
    quantize = said.get("quantize")
    options = LmBuildOptions(
        max_seq_len=_int(said, "max_seq_len", where),
        quantize=quantize if isinstance(quantize, str) else None,
        group_size=_int(said, "group_size", where),
        quantize_embeddings=bool(said.get("quantize_embeddings")),
    )
    prompts = []
    for item in read_array(raw, "prompts", where):
        entry = item if isinstance(item, dict) else {}
        ids = tuple(int(t) for t in read_array(entry, "token_ids", where) if isinstance(t, int))
        prompts.append(Prompt(_str(entry, "name", where), _str(entry, "text", where), ids))
    gates_raw = read_object(raw, "gates", where)
    gates = LmGates(
        min_token_agreement=_float(gates_raw, "min_token_agreement", where),
        max_kld=_float(gates_raw, "max_kld", where),
        max_ppl_increase=_float(gates_raw, "max_ppl_increase", where),
    )
    eos = tuple(int(t) for t in read_array(raw, "eos_ids", where) if isinstance(t, int))
    checked = LmJob(
        None, options, tuple(prompts), _str(raw, "prompt_source", where), gates,
        _int(raw, "max_new_tokens", where), eos, _str(raw, "architecture", where),
    )  # fmt: skip
    pte = bundle.file(m.pte)
    versions = read_object(raw, "built_with", where)
    program = LmProgram(
        pte, m.files[m.pte].sha256, m.files[m.pte].size, options, True,
        _int(raw, "kv_cache_bytes", where), _int(raw, "vocab_size", where),
        tuple((k, v if isinstance(v, str) else None) for k, v in versions.items()),
    )  # fmt: skip
    try:
        tokens = json.loads(bundle.file(f"{LM_DIR}/tokens.json").read_text("utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(
            f"{bundle.path.name}: cannot read its tokens' texts: {exc}", _HINT
        ) from None
    return checked, program, [str(t) for t in tokens]


def _ids(array: np.ndarray) -> tuple[int, ...]:
    return tuple(int(t) for t in array)


def _int(data: Mapping[str, object], key: str, where: str) -> int:
    from etdeploy.jsonvalue import read_int

    return _present(read_int(data, key, None, where), key, where)


def _str(data: Mapping[str, object], key: str, where: str) -> str:
    from etdeploy.jsonvalue import read_str

    return _present(read_str(data, key, None, where), key, where)


def _float(data: Mapping[str, object], key: str, where: str) -> float:
    from etdeploy.jsonvalue import read_float

    return _present(read_float(data, key, None, where), key, where)


def _present(value: T | None, key: str, where: str) -> T:
    if value is None:
        raise UsageError(f"{where}: {key} is missing", _HINT)
    return value


def _read_runs(
    bundle: JobBundle, relative: str, prompts: Sequence[Prompt]
) -> tuple[PromptRun, ...]:
    try:
        with np.load(bundle.file(relative), allow_pickle=False) as archive:
            return tuple(
                PromptRun(p.name, p.token_ids, archive[f"l{i}"], _ids(archive[f"g{i}"]))
                for i, p in enumerate(prompts)
            )
    except (OSError, ValueError, KeyError) as exc:
        raise UsageError(f"{bundle.path.name}: cannot read {relative}: {exc}", _HINT) from None

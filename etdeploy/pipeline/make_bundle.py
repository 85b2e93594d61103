"""`etdeploy bundle`: a job made once where torch is, written as a folder a device
host runs without it.

The job's own stages do the work (build, stage, and with --host-check the host
runtime), so a bundle holds what `etdeploy run MODEL` would have computed: the same
program, samples and references. The runner bundles come from runner_build, one per
ABI asked for (runner_build.ensure_runner: the host build, the arm64 bundle, an NDK
build...), copied as they are. Everything is written under a temporary name beside
the target and renamed into place, so an interrupted bundle leaves no half folder.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import etdeploy
from etdeploy.bundle.job_bundle import (
    BUNDLE_FILE,
    INPUTS_FILE,
    LABELS_FILE,
    PROGRAM_DIR,
    REFERENCES_DIR,
    BundleManifest,
    References,
    is_bundle,
)
from etdeploy.errors import UsageError
from etdeploy.extras import require_build_extra
from etdeploy.model.loader import CausalLmReturned
from etdeploy.pipeline.build import build_program
from etdeploy.pipeline.bundle_writer import MadeBundle, bundle_folder, settings_json
from etdeploy.pipeline.job import RunJob
from etdeploy.pipeline.llm.bundle import make_lm_bundle
from etdeploy.pipeline.llm.factory import language_model_folder, save_factory_lm
from etdeploy.pipeline.plan import plan_of
from etdeploy.pipeline.references import host_runtime_outputs
from etdeploy.pipeline.stage import stage
from etdeploy.runner_build import RunnerBundle, ensure_runner

Say = Callable[[str], None]


def make_bundle(
    job: RunJob,
    out: Path,
    runners: Sequence[RunnerBundle] | None = None,
    status: Say | None = None,
) -> MadeBundle:
    """Build and stage `job` and write it to `out` with `runners` (default: the host
    build; `runners_for(abis)` gives runner_build's bundle for each ABI)."""
    say = status or (lambda _text: None)
    _check_target(out)
    require_build_extra("etdeploy bundle (it builds the program and computes its references)")
    lm_folder = _language_model_folder(job)
    if lm_folder is not None:  # a causal LM: its program, prompts and references
        return make_lm_bundle(job, out, runners or runners_for(("host",), say), lm_folder, say)
    if job.localize:
        raise UsageError(
            "--localize needs the model where it runs; a bundle carries no model",
            "localise with `etdeploy run MODEL --localize` where torch is installed",
        )
    plan = plan_of(job)
    say(f"building {job.label}")
    try:
        program = build_program(plan.build, say)
    except CausalLmReturned as returned:  # the factory made a causal LM: saved, its road
        folder = save_factory_lm(returned.ref, returned.spec)
        return make_lm_bundle(job, out, runners or runners_for(("host",), say), folder, say)
    say("staging inputs and the references")
    staged = stage(plan.stage, program)
    host = None
    if job.host_check:
        say("running the program in executorch's Python runtime")
        host = host_runtime_outputs(program.pte, program.method, staged.samples, program.data_path)
    if runners is None:
        runners = runners_for(("host",), say)
    out = Path(out)
    with bundle_folder(out) as writer:
        pte = writer.copy(program.pte, f"{PROGRAM_DIR}/{program.pte.name}")
        program_manifest = writer.text(
            f"{PROGRAM_DIR}/{program.pte.name}.json",
            json.dumps(program.manifest.to_json() if program.manifest else {}, indent=2),
        )
        data = (
            writer.copy(program.data.path, f"{PROGRAM_DIR}/{program.data.path.name}")
            if program.data is not None
            else None
        )
        entries = tuple(writer.runner(bundle) for bundle in runners)
        writer.arrays(INPUTS_FILE, staged.samples, "i")
        references = References(
            kind=staged.reference_kind,
            float=writer.arrays(f"{REFERENCES_DIR}/float.npz", staged.references, "o"),
            quantized=writer.arrays(f"{REFERENCES_DIR}/quantized.npz", staged.quantized, "o")
            if staged.quantized is not None
            else None,
            host=writer.arrays(f"{REFERENCES_DIR}/host.npz", host, "o") if host else None,
            quantized_source=staged.quantized_source,
        )
        labels = writer.labels(LABELS_FILE, staged) if staged.labels is not None else None
        manifest = BundleManifest(
            model=job.model or job.label, pte=pte, program_manifest=program_manifest, data=data,
            runners=entries, samples=staged.sample_names, on_noise=staged.on_noise,
            references=references, settings=settings_json(job), labels=labels,
            program_warnings=program.warnings, staged_warnings=staged.warnings,
            files=writer.files, etdeploy=etdeploy.__version__,
            created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        )  # fmt: skip
        writer.text(BUNDLE_FILE, json.dumps(manifest.to_json(), indent=2), listed=False)
    return MadeBundle(out, manifest, tuple(runners))


def _language_model_folder(job: RunJob) -> Path | None:
    return language_model_folder(job.model, use_cache=job.use_cache)


def _check_target(out: Path) -> None:
    """`out` may be new, an empty folder, or a job bundle (replaced whole)."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"{out} is a file; -o names the bundle's folder", "give -o a folder")
    if out.is_dir() and any(out.iterdir()) and not is_bundle(out):
        raise UsageError(
            f"{out} holds other files and is not a job bundle: not overwriting it",
            "give -o a new folder (or an old bundle, which is replaced)",
        )


def runners_for(abis: Sequence[str], say: Say | None = None) -> list[RunnerBundle]:
    """runner_build's bundle for each ABI (built if its cache lacks it), each distinct
    bundle once."""
    say = say or (lambda _text: None)
    found: dict[str, RunnerBundle] = {}
    for abi in dict.fromkeys(abis or ("host",)):
        say(f"preparing the runner for {abi}")
        bundle = ensure_runner(abi, progress=say)
        found.setdefault(bundle.key or str(bundle.directory), bundle)
    return list(found.values())

"""`etdeploy run`: resolve -> build -> stage -> deploy -> execute -> verify.

Each stage is a function from data to data, readable top to bottom below; all of
them add to one result document (schema `etdeploy.result/1`), the single source
of every report format. Nothing here prints: progress goes through a callback,
failures raise EtdeployError kinds.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from etdeploy.errors import (
    EXIT_CHECK_FAILED,
    EXIT_OK,
    EtdeployError,
    InfraError,
    InputError,
    RunnerError,
    UsageError,
)

RESULT_SCHEMA = "etdeploy.result/1"

# Called with a short description of what the pipeline is doing now.
StatusCallback = Callable[[str], None]


# -- resolve: the frozen job ----------------------------------------------------------


@dataclass(frozen=True)
class RunJob:
    """Everything one run needs to know; the CLI and farm build it from flags and
    etdeploy.toml. `model` may be None only with both `pte` and `reference`."""

    model: str | None
    device: str = "local"
    backend: str = "xnnpack"
    quantize: str | None = None
    calibration: tuple[str, ...] = ()
    dynamic: tuple[str, ...] = ()
    pte: Path | None = None
    inputs: tuple[str, ...] = ()
    # >0: that many noise samples (--random); the verdict is labelled as such.
    random_inputs: int = 0
    reference: Path | None = None
    # Also run the .pte in executorch's Python runtime on this machine, to tell a
    # lowering that changed the numerics from a device that differs from the host.
    host_check: bool = False
    iterations: int = 10
    warmup: int = 3
    deadline_s: float = 120.0
    # A runner silent for this long is hung, even before the deadline.
    idle_timeout_s: float | None = None
    atol: float | None = None
    rtol: float | None = None
    runner: Path | None = None
    cpu_threads: int | None = None
    preprocess: str | None = None
    keep: bool = False
    use_cache: bool = True
    # Record an ETDump of the timed executions and name the slowest operators.
    profile: bool = False

    def __post_init__(self) -> None:
        if self.model is None and (self.pte is None or self.reference is None):
            raise UsageError(
                "no model given",
                "name MODEL (the eager reference), or give both --pte and --reference",
            )
        if self.random_inputs and self.inputs:
            raise UsageError(
                "--random and --inputs both given", "verify on real inputs or on noise, not both"
            )
        if self.iterations < 1:
            raise UsageError(f"--iterations must be at least 1, got {self.iterations}")
        if self.warmup < 0:
            raise UsageError(f"--warmup must be 0 or more, got {self.warmup}")
        if self.deadline_s <= 0:
            raise UsageError(
                f"--deadline must be positive, got {self.deadline_s}",
                "seconds, e.g. --deadline 120",
            )
        if self.idle_timeout_s is not None and self.idle_timeout_s <= 0:
            raise UsageError(
                f"--idle-timeout must be positive, got {self.idle_timeout_s}",
                "seconds of runner silence before it counts as hung, e.g. --idle-timeout 30",
            )

    @property
    def label(self) -> str:
        return self.model or (self.pte.name if self.pte else "?")


def new_job_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]


# -- build -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Program:
    """The .pte to run and what is known of its first method."""

    pte: Path
    sha256: str
    size_bytes: int
    manifest: dict[str, Any] | None
    method: str
    inputs: list[dict[str, Any]]  # kind, dtype, shape, name, dynamic
    outputs: list[dict[str, Any]]  # kind, dtype, shape, name
    warnings: list[str] = field(default_factory=list)

    # What only a build manifest knows; None for a .pte built elsewhere.
    @property
    def backend(self) -> str | None:
        return (self.manifest or {}).get("backend")

    @property
    def quantization(self) -> str | None:
        quant = (self.manifest or {}).get("quantization")
        return quant.get("mode") if isinstance(quant, dict) else None

    @property
    def delegation(self) -> dict[str, Any] | None:
        return (self.manifest or {}).get("delegation")

    @property
    def tensor_outputs(self) -> list[int]:
        return [i for i, meta in enumerate(self.outputs) if meta["kind"] == "tensor"]


def build_program(job: RunJob) -> Program:
    """Build MODEL (cached), or take --pte. IO dtypes and shapes come from the
    .pte itself; names, dynamic dims and delegation from its manifest if any."""
    from etdeploy.builder.manifest import read_manifest
    from etdeploy.devices.base import sha256_file

    warnings: list[str] = []
    if job.pte is not None:
        pte = job.pte
        if pte.is_dir() or not pte.exists():
            raise InputError(f"no such .pte: {pte}", "check the path given with --pte")
        manifest = read_manifest(pte)
        digest = sha256_file(pte)
        if manifest is not None and manifest.get("sha256") != digest:
            warnings.append(f"{pte.name}.json describes another file (sha256 differs); ignoring it")
            manifest = None
        if manifest is None and job.model is not None:
            # A .pte built elsewhere: the model still knows its inputs' and outputs' names.
            manifest = _names_from_model(job.model)
    else:
        from etdeploy.builder import BuildOptions, build

        assert job.model is not None
        built = build(
            job.model,
            BuildOptions(
                backend=job.backend,
                quantize=job.quantize,
                calibration=job.calibration,
                dynamic=job.dynamic,
                use_cache=job.use_cache,
            ),
        )
        pte, manifest, digest = built.pte, built.manifest, built.manifest["sha256"]
        warnings.extend(built.warnings)
    return describe_program(pte, digest, manifest, warnings)


def _names_from_model(model: str) -> dict[str, Any]:
    from etdeploy.model.loader import load_model, parse_model_ref

    spec = load_model(parse_model_ref(model))
    return {
        "methods": [{
            "inputs": [{"name": n} for n in spec.input_names or []],
            "outputs": [{"name": n} for n in spec.output_names or []],
        }],
        "samples": [str(p) for p in spec.samples],
        "partial": True,  # names and samples only: not a build manifest
    }  # fmt: skip


# ExecuTorch's ScalarType names (schema/scalar_type.fbs) -> numpy's.
_SCALAR_TO_NUMPY = {
    "byte": "uint8", "char": "int8", "short": "int16", "int": "int32", "long": "int64",
    "half": "float16", "float": "float32", "double": "float64", "bool": "bool",
}  # fmt: skip


def describe_program(
    pte: Path, digest: str, manifest: dict[str, Any] | None, warnings: list[str]
) -> Program:
    from etdeploy.sizecheck.pte import read_pte

    try:
        parsed = read_pte(pte)
    except EtdeployError as exc:
        raise InputError(
            f"{pte} is not a usable .pte: {exc.message}",
            "give a program written by `etdeploy build` or executorch's to_executorch()",
        ) from exc
    if not parsed.methods:
        raise InputError(f"{pte} has no methods", "rebuild it with `etdeploy build`")
    method = parsed.methods[0]
    listed = (manifest or {}).get("methods", [{}])[0]

    def values(
        items: Sequence[Any], named: list[dict[str, Any]], prefix: str
    ) -> list[dict[str, Any]]:
        out = []
        for i, value in enumerate(items):
            meta = named[i] if i < len(named) else {}
            entry: dict[str, Any] = {
                "kind": value.kind,
                "name": meta.get("name") or f"{prefix}_{i}",
            }
            if value.tensor is not None:
                dtype = _SCALAR_TO_NUMPY.get(value.tensor.dtype, value.tensor.dtype)
                entry.update(dtype=dtype, shape=list(value.tensor.sizes))
                entry["dynamic"] = meta.get("dynamic") or {}
            out.append(entry)
        return out

    return Program(
        pte=pte,
        sha256=digest,
        size_bytes=pte.stat().st_size,
        manifest=manifest,
        method=method.name,
        inputs=values(method.inputs, listed.get("inputs", []), "input"),
        outputs=values(method.outputs, listed.get("outputs", []), "output"),
        warnings=warnings,
    )


# -- stage: real inputs and the reference -------------------------------------------------


@dataclass
class Staged:
    sample_names: list[str]
    samples: list[tuple[np.ndarray, ...]]
    # references[s][k]: the expected value of the k-th tensor output of sample s.
    references: list[list[np.ndarray]]
    reference_kind: str  # eager | file
    on_noise: bool
    warnings: list[str] = field(default_factory=list)


def stage(job: RunJob, program: Program) -> Staged:
    """Real inputs -> arrays checked against the method, then the reference."""
    from etdeploy.inputs import Sample, check_against, load_samples, parse_preprocess

    warnings: list[str] = []
    if any(meta["kind"] != "tensor" for meta in program.inputs):
        raise InputError(
            f"{program.method} takes non-tensor inputs, which the runner cannot be given",
            "export a wrapper whose inputs are all tensors",
        )
    if job.random_inputs:
        rng = np.random.default_rng(0)
        samples = [
            Sample(
                f"random{i}",
                tuple(_noise(rng, meta["dtype"], meta["shape"]) for meta in program.inputs),
            )
            for i in range(job.random_inputs)
        ]
    else:
        paths = list(job.inputs) or default_sample_paths(program)
        if not paths:
            raise InputError(
                "no inputs to verify with",
                "give --inputs FILE|DIR|GLOB of real samples, or --random N to verify on noise",
            )
        samples = load_samples(paths, program.inputs, parse_preprocess(job.preprocess))
    for sample in samples:
        check_against(sample, program.inputs)
    arrays = [s.arrays for s in samples]
    sample_names = [s.name for s in samples]
    if job.reference is not None:
        references = load_reference_file(job.reference, len(samples), len(program.tensor_outputs))
        kind = "file"
    else:
        assert job.model is not None
        references, example_hits = eager_reference(job.model, arrays, use_cache=job.use_cache)
        kind = "eager"
        reused = [sample_names[i] for i, hit in enumerate(example_hits) if hit]
        if reused:
            warnings.append(
                f"sample(s) {', '.join(reused)} are the model's example inputs: those fix shapes "
                "for export, they are not a test set; verify on held-out data"
            )
    if job.random_inputs:
        warnings.append(
            "verifying on random inputs (--random): noise exercises the middle of a network's "
            "range and can pass a lowering that breaks real data"
        )
    return Staged(sample_names, arrays, references, kind, bool(job.random_inputs), warnings)


def default_sample_paths(program: Program) -> list[str]:
    """The real samples the model ships: recorded in the manifest at build time,
    or, for a --pte built elsewhere, named by the model's factory."""
    return [str(p) for p in (program.manifest or {}).get("samples", [])]


def _noise(rng: np.random.Generator, dtype: str, shape: Sequence[int]) -> np.ndarray:
    if dtype.startswith("float"):
        return rng.standard_normal(shape).astype(dtype)
    if dtype == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    return rng.integers(0, 10, size=shape).astype(dtype)


def reference_key(model_fingerprint: str, samples: Sequence[tuple[np.ndarray, ...]]) -> str:
    digest = hashlib.sha256(model_fingerprint.encode())
    for sample in samples:
        for array in sample:
            digest.update(f"{array.dtype}{array.shape}".encode())
            digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()


def eager_reference(
    model: str, samples: Sequence[tuple[np.ndarray, ...]], *, use_cache: bool = True
) -> tuple[list[list[np.ndarray]], list[bool]]:
    """The samples through the eager model, cached per (model, inputs).

    The eager model is the float one, so a quantized build is judged against what
    it approximates. Also says, per sample, whether it is one of the model's
    example inputs (which the caller warns about).
    """
    from etdeploy.model.loader import parse_model_ref
    from etdeploy.paths import cache_dir

    ref = parse_model_ref(model)
    path = cache_dir("references") / f"{reference_key(ref.fingerprint(), samples)[:32]}.npz"
    if use_cache and path.is_file():
        try:
            return _read_reference_cache(path)
        except (OSError, ValueError, KeyError):
            path.unlink(missing_ok=True)  # damaged: recompute below
    outputs, hits = _run_eager(ref, samples)
    arrays: dict[str, np.ndarray] = {
        "count": np.array(len(outputs)),
        "example_hits": np.array(hits, dtype=bool),
    }
    for s, row in enumerate(outputs):
        arrays[f"s{s}_n"] = np.array(len(row))
        for k, value in enumerate(row):
            arrays[f"s{s}_o{k}"] = value
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp.npz")
    np.savez(tmp, **arrays)
    os.replace(tmp, path)
    return outputs, hits


def _read_reference_cache(path: Path) -> tuple[list[list[np.ndarray]], list[bool]]:
    with np.load(path, allow_pickle=False) as archive:
        count = int(archive["count"])
        outputs = [
            [archive[f"s{s}_o{k}"] for k in range(int(archive[f"s{s}_n"]))] for s in range(count)
        ]
        return outputs, [bool(x) for x in archive["example_hits"]]


def _run_eager(
    ref: Any, samples: Sequence[tuple[np.ndarray, ...]]
) -> tuple[list[list[np.ndarray]], list[bool]]:
    import torch

    from etdeploy.model.loader import load_model

    spec = load_model(ref)
    module = spec.module
    if isinstance(module, torch.export.ExportedProgram):
        module = module.module()
    examples = tuple(
        np.asarray(t.detach().contiguous().numpy())
        for t in spec.example_inputs
        if isinstance(t, torch.Tensor)
    )
    outputs: list[list[np.ndarray]] = []
    hits: list[bool] = []
    with torch.no_grad():
        for sample in samples:
            result = module(*(torch.from_numpy(np.ascontiguousarray(a)) for a in sample))
            outputs.append([t.detach().contiguous().numpy() for t in _flatten_tensors(result)])
            hits.append(
                len(examples) == len(sample)
                and all(
                    e.shape == a.shape and np.array_equal(e, a)
                    for e, a in zip(examples, sample, strict=True)
                )
            )
    return outputs, hits


def _flatten_tensors(value: Any) -> list[Any]:
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in _flatten_tensors(item)]
    if isinstance(value, dict):
        return [t for item in value.values() for t in _flatten_tensors(item)]
    return []  # scalars: the .pte returns them as non-tensor values, not files


def load_reference_file(path: Path, samples: int, outputs: int) -> list[list[np.ndarray]]:
    """--reference outputs.npz: arrays s<S>_o<K> (or o<K> when there is one sample)."""
    if not path.is_file():
        raise InputError(f"reference not found: {path}", "give an .npz of expected outputs")
    try:
        archive = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise InputError(
            f"cannot read {path}: {exc}", "give an .npz written by numpy.savez"
        ) from exc
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise InputError(
            f"{path.name} holds one array; --reference takes an .npz of expected outputs",
            "numpy.savez('expected.npz', s0_o0=..., s0_o1=...) with one array per sample and output",
        )
    with archive:
        keys = set(archive.keys())
        table = []
        for s in range(samples):
            row = []
            for k in range(outputs):
                key = f"s{s}_o{k}" if f"s{s}_o{k}" in keys else f"o{k}"
                if key not in keys or (key == f"o{k}" and samples > 1):
                    raise InputError(
                        f"{path.name} has no expected value for sample {s}, output {k}",
                        "name its arrays s<sample>_o<output>, e.g. s0_o0",
                    )
                row.append(archive[key])
            table.append(row)
    return table


def host_runtime_outputs(program: Program, staged: Staged) -> list[list[np.ndarray]]:
    """The .pte through executorch's Python runtime on this machine: the second
    reference that separates "the lowering changed the numbers" from "the device
    differs from this host"."""
    import torch
    from executorch.runtime import Runtime

    try:
        method = Runtime.get().load_program(program.pte).load_method(program.method)
    except Exception as exc:  # the runtime raises RuntimeError with its own text
        raise InfraError(
            f"executorch's Python runtime cannot load {program.pte.name}: {exc}",
            "run without --host-check, or build for a backend this host links (xnnpack, portable)",
            device="host",
        ) from exc
    rows = []
    for sample in staged.samples:
        result = method.execute([torch.from_numpy(np.ascontiguousarray(a)) for a in sample])
        rows.append(
            [t.detach().contiguous().numpy() for t in result if isinstance(t, torch.Tensor)]
        )
    return rows


# -- deploy ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Deployed:
    runner: str  # the executable on the device
    pte: str
    inputs: list[list[str]]  # per sample, per method input
    job_dir: str
    bytes_sent: int
    files_sent: int
    files_skipped: int
    seconds: float


def deploy(
    device: Any,
    bundle: Any,
    program: Program,
    staged: Staged,
    job_id: str,
    progress: Any = None,
) -> Deployed:
    """The runner bundle, the .pte and the inputs, each under a content-addressed
    name in the device's work dir, so an unchanged file is never sent twice; the
    job's own directory holds only what this run writes."""
    from etdeploy.devices.base import job_dir

    started = time.perf_counter()
    base = device.workdir.rstrip("/")
    runner_dir = f"{base}/runners/{bundle.abi}-{(bundle.key or 'external')[:16]}"
    inputs_dir = f"{base}/inputs"
    jdir = job_dir(device, job_id)
    for directory in (runner_dir, f"{base}/programs", inputs_dir, jdir):
        device.makedirs(directory)
    pushes: list[Any] = []
    for path in bundle.files:
        mode = 0o755 if path.name == bundle.executable else 0o644
        pushes.append(device.push(path, f"{runner_dir}/{path.name}", progress=progress, mode=mode))
    remote_pte = f"{base}/programs/{program.sha256[:24]}.pte"
    pushes.append(device.push(program.pte, remote_pte, progress=progress))
    remote_inputs: list[list[str]] = []
    for sample in staged.samples:
        row = []
        for array in sample:
            local = staged_input_file(array)
            remote = f"{inputs_dir}/{local.name}"
            pushes.append(device.push(local, remote, progress=progress))
            row.append(remote)
        remote_inputs.append(row)
    return Deployed(
        runner=f"{runner_dir}/{bundle.executable}",
        pte=remote_pte,
        inputs=remote_inputs,
        job_dir=jdir,
        bytes_sent=sum(p.bytes_sent for p in pushes),
        files_sent=sum(not p.skipped for p in pushes),
        files_skipped=sum(p.skipped for p in pushes),
        seconds=time.perf_counter() - started,
    )


def staged_input_file(array: np.ndarray) -> Path:
    """The raw runner file for `array`, named by its content (cached locally too,
    so a transport's hash cache sees the same file each run)."""
    from etdeploy.inputs import raw_bytes
    from etdeploy.paths import cache_dir

    data = raw_bytes(array)
    name = hashlib.sha256(data).hexdigest()[:32] + ".bin"
    path = cache_dir("staged-inputs") / name
    if not path.is_file():
        tmp = path.with_name(f".{name}.{os.getpid()}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)
    return path


# -- execute ---------------------------------------------------------------------------------


@dataclass
class Executed:
    outputs: list[list[np.ndarray]]  # per sample, per tensor output
    load_ms: float | None
    iterations_ms: list[float]
    peak_rss_bytes: int | None
    runner_version: str | None
    logs: list[str]
    etdump: Path | None = None


def execute(
    device: Any,
    bundle: Any,
    deployed: Deployed,
    program: Program,
    staged: Staged,
    job: RunJob,
    local_dir: Path,
) -> Executed:
    """The runner once per sample: warm-up and N timed iterations on the first,
    one execution on each of the rest. Outputs and timings come back; a runner
    that fails, crashes or passes the deadline raises RunnerFailure with its log."""
    from etdeploy import runner as contract
    from etdeploy.inputs import read_raw

    upstream = bundle.flavor == "upstream"
    result = Executed([], None, [], None, None, [])
    for s, inputs in enumerate(deployed.inputs):
        timed = s == 0
        out_base = f"{deployed.job_dir}/s{s}-out"
        invocation = contract.RunnerInvocation(
            model_path=deployed.pte,
            input_paths=tuple(inputs),
            output_base=out_base,
            num_executions=job.iterations if timed else 1,
            warmup=job.warmup if timed else 0,
            method=program.method,
            cpu_threads=job.cpu_threads,
            etdump_path=f"{deployed.job_dir}/run.etdump" if (timed and job.profile) else None,
            result_json_path=None if upstream else f"{deployed.job_dir}/s{s}-result.json",
            flavor=bundle.flavor,
            input_shapes=_shapes_if_dynamic(program, staged.samples[s]),
        )
        argv = contract.runner_argv(deployed.runner, invocation)
        out = device.run(
            argv, deadline_s=job.deadline_s, cwd=deployed.job_dir, idle_timeout_s=job.idle_timeout_s
        )
        result.logs.append(_log_text(out))
        if out.timed_out or out.exit_code != 0:
            raise contract.runner_failure(
                None if out.timed_out else out.exit_code,
                out.stdout,
                out.stderr,
                device_log=out.device_log,
                timed_out=out.timed_out,
                command=out.command,
                device=device.name,
            )
        if upstream:
            report = contract.result_from_log(
                f"{out.stdout}\n{out.stderr}\n{out.device_log}", invocation
            )
            shapes = [
                (index, program.outputs[index]["dtype"], list(staged.references[s][k].shape))
                for k, index in enumerate(program.tensor_outputs)
            ]
        else:
            assert invocation.result_json_path is not None
            local_json = device.pull(invocation.result_json_path, local_dir / f"s{s}-result.json")
            report = contract.parse_result_json(local_json.read_bytes())
            shapes = [
                (o.index, o.dtype or "", list(o.shape or ())) for o in report.tensor_outputs()
            ]
        row = []
        for index, dtype, shape in shapes:
            (remote_output,) = contract.output_files(out_base, [index])
            local = device.pull(remote_output, local_dir / f"s{s}-out-{index}.bin")
            try:
                row.append(read_raw(local, dtype, shape))
            except InputError as exc:
                # The runner wrote it: a wrong size is the runner's fault, not the user's input.
                raise RunnerError(
                    f"output {index} of sample {staged.sample_names[s]}: {exc.message}",
                    "the runner and the program disagree on the output; with upstream's runner "
                    "shapes come from the reference, so check that it matches the program",
                    device=device.name,
                    command=out.command,
                    log=result.logs[-1],
                ) from exc
        result.outputs.append(row)
        if timed:
            result.load_ms = report.load_ms
            result.iterations_ms = list(report.iterations_ms)
            result.peak_rss_bytes = report.peak_rss_bytes
            result.runner_version = report.runner_version
            if invocation.etdump_path is not None:
                result.etdump = device.pull(invocation.etdump_path, local_dir / "run.etdump")
    return result


def _shapes_if_dynamic(
    program: Program, sample: tuple[np.ndarray, ...]
) -> tuple[tuple[int, ...], ...] | None:
    """The sample's shapes when any differs from the program's (a dynamic dim)."""
    shapes = tuple(tuple(int(d) for d in array.shape) for array in sample)
    planned = tuple(tuple(meta["shape"]) for meta in program.inputs)
    return None if shapes == planned else shapes


def _log_text(out: Any) -> str:
    parts = [f"$ {out.command}", out.stdout.rstrip(), out.stderr.rstrip()]
    if out.device_log.strip():
        parts += ["--- device log", out.device_log.rstrip()]
    return clip_log("\n".join(p for p in parts if p))


LOG_HEAD_LINES = 40
LOG_TAIL_LINES = 200


def clip_log(text: str) -> str:
    """The head and tail of a log: a runner prints a line per iteration, and a
    hung one killed after a million iterations must not put them all in a report."""
    lines = text.splitlines()
    if len(lines) <= LOG_HEAD_LINES + LOG_TAIL_LINES:
        return text
    omitted = len(lines) - LOG_HEAD_LINES - LOG_TAIL_LINES
    return "\n".join(
        [*lines[:LOG_HEAD_LINES], f"[... {omitted} lines omitted ...]", *lines[-LOG_TAIL_LINES:]]
    )


# -- verify and the result document ------------------------------------------------------------


def latency_summary(times_ms: Sequence[float]) -> dict[str, float | int]:
    """min, median, p90, max and a 10%-trimmed mean; the spread as stdev."""
    if not times_ms:
        return {"n": 0}
    ordered = sorted(times_ms)
    cut = len(ordered) // 10
    trimmed = ordered[cut : len(ordered) - cut] or ordered
    return {
        "n": len(ordered),
        "min": ordered[0],
        "median": statistics.median(ordered),
        "p90": ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))],
        "max": ordered[-1],
        "trimmed_mean": statistics.fmean(trimmed),
        "stdev": statistics.pstdev(ordered),
    }


def tolerance_for(job: RunJob, program: Program) -> Any:
    from etdeploy.verify import FP32_ATOL, FP32_RTOL, Tolerance

    return Tolerance(
        atol=FP32_ATOL if job.atol is None else job.atol,
        rtol=FP32_RTOL if job.rtol is None else job.rtol,
        # A .pte built elsewhere has no manifest: then --quantize says what it is.
        quantized=(program.quantization or job.quantize) is not None,
    )


@dataclass
class RunContext:
    """What the CLI or farm hands the pipeline besides the job."""

    status: StatusCallback | None = None
    progress: Any = None  # ProgressCallback for transfers
    size_config: Any = None  # etdeploy.config.Config for the size verdict


def run_job(
    job: RunJob, device: Any, context: RunContext | None = None, *, job_id: str | None = None
) -> dict[str, Any]:
    """The whole loop for one job on one device; returns the etdeploy.result/1 document.

    Bad input and infrastructure failures raise; a numeric mismatch does not (it
    is a result, with status "failed").
    """
    import etdeploy
    from etdeploy.verify import verify

    context = context or RunContext()
    say = context.status or (lambda _text: None)
    started = time.time()
    job_id = job_id or new_job_id()

    say(f"building {job.label}")
    program = build_program(job)
    say("staging inputs and the reference")
    staged = stage(job, program)
    host_outputs = host_runtime_outputs(program, staged) if job.host_check else None
    info = device.info()
    say(f"preparing the runner for {info.name} ({info.os} {info.abi})")
    bundle = runner_for(job, device, info, say)

    say(f"waiting for {info.name}")
    waited_from = time.time()
    with device.lock(), tempfile.TemporaryDirectory(prefix="etdeploy-run-") as tmp:
        held_from = time.time()
        say(f"deploying to {info.name}")
        from etdeploy.devices.base import job_dir

        try:
            deployed = deploy(device, bundle, program, staged, job_id, context.progress)
            say(f"running on {info.name}")
            executed = execute(device, bundle, deployed, program, staged, job, Path(tmp))
        finally:
            if not job.keep:
                _remove_quietly(device, job_dir(device, job_id))
        etdump = _keep_etdump(executed.etdump, job_id)
        held_to = time.time()
    profile = None
    profile_warnings: list[str] = []
    if etdump is not None:
        say("reading the profile")
        try:
            profile = profile_of(etdump, program)
        except EtdeployError as exc:
            # The run itself succeeded: keep its verdict, say why there is no profile.
            profile_warnings.append(f"no profile: {exc.message}")

    tolerance = tolerance_for(job, program)
    output_names = [program.outputs[i]["name"] for i in program.tensor_outputs]
    verdict = verify(
        executed.outputs, staged.references, staged.sample_names, output_names, tolerance,
        on_noise=staged.on_noise,
    )  # fmt: skip
    host = None
    if host_outputs is not None:
        host = {
            "device_vs_host": verify(executed.outputs, host_outputs, staged.sample_names,
                                     output_names, tolerance).to_json(),
            "host_vs_reference": verify(host_outputs, staged.references, staged.sample_names,
                                        output_names, tolerance).to_json(),
        }  # fmt: skip
    size = _size_verdict(program.pte, context.size_config)
    warnings = [*program.warnings, *staged.warnings, *profile_warnings]
    if program.quantization and job.atol is not None:
        warnings.append("--atol is not used for a quantized build; it is judged by SQNR and top-1")
    # A check failed when the numbers diverge or the file will not ship.
    passed = verdict.passed and size["passed"]
    return {
        "schema": RESULT_SCHEMA,
        "etdeploy": etdeploy.__version__,
        "status": "passed" if passed else "failed",
        "exit_code": EXIT_OK if passed else EXIT_CHECK_FAILED,
        "job": {
            "id": job_id,
            "model": job.model,
            "backend": program.backend or job.backend,
            "quantization": program.quantization,
            "method": program.method,
            "iterations": job.iterations,
            "warmup": job.warmup,
        },
        "device": {
            "name": info.name,
            "transport": info.transport,
            "serial": info.serial,
            "os": info.os,
            "os_version": info.os_version,
            "abi": info.abi,
            "model": info.model,
            "soc": info.soc,
        },
        "artifact": {
            "pte": str(program.pte),
            "sha256": program.sha256,
            "size_bytes": program.size_bytes,
            "backend": program.backend,
            "quantization": program.quantization,
            "delegation": program.delegation,
            "built_with": (program.manifest or {}).get("versions"),
        },
        "runner": {
            "flavor": bundle.flavor,
            "abi": bundle.abi,
            "version": executed.runner_version,
            "path": str(bundle.executable_path),
        },
        "inputs": {
            "names": [m["name"] for m in program.inputs],
            "samples": staged.sample_names,
            "on_noise": staged.on_noise,
            "reference": staged.reference_kind,
        },
        # One job per device: when this one held it (wall clock, for a farm's timeline).
        "device_lock": {
            "waited_s": round(held_from - waited_from, 3),
            "held_from": held_from,
            "held_to": held_to,
        },
        "deploy": {
            "bytes_sent": deployed.bytes_sent,
            "files_sent": deployed.files_sent,
            "files_skipped": deployed.files_skipped,
            "seconds": round(deployed.seconds, 3),
        },
        "latency_ms": {
            "load": executed.load_ms,
            **latency_summary(executed.iterations_ms),
            "iterations": executed.iterations_ms,
        },
        "memory": {
            "planned_bytes": _planned_bytes(program),
            "peak_rss_bytes": executed.peak_rss_bytes,
        },
        "verdict": verdict.to_json(),
        "host_check": host,
        "size": size,
        "etdump": str(etdump) if etdump else None,
        "profile": profile,
        "warnings": warnings,
        "error": None,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "seconds": round(time.time() - started, 3),
        "logs": executed.logs,
    }


def error_result(
    job: RunJob, device_name: str, exc: EtdeployError, started: float, job_id: str | None = None
) -> dict[str, Any]:
    """The result document of a run that raised: status "error", the error kept
    whole (kind, device, command, log) so a report can tell a broken phone from
    a broken model."""
    import etdeploy

    return {
        "schema": RESULT_SCHEMA,
        "etdeploy": etdeploy.__version__,
        "status": "error",
        "exit_code": exc.exit_code,
        "job": {
            "id": job_id,
            "model": job.model,
            "backend": job.backend,
            "quantization": job.quantize,
            "iterations": job.iterations,
            "warmup": job.warmup,
        },
        "device": {"name": device_name},
        "error": {
            "kind": type(exc).__name__,
            "message": str(exc),
            "hint": exc.hint,
            "infrastructure": isinstance(exc, InfraError),
            "retryable": bool(getattr(exc, "retryable", False)),
            "device": getattr(exc, "device", None),
            "command": getattr(exc, "command", None),
        },
        "warnings": [],
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "seconds": round(time.time() - started, 3),
        "logs": [clip_log(exc.log)] if exc.log else [],
    }


def as_error(exc: BaseException) -> EtdeployError:
    """Any exception as the EtdeployError its result document records."""
    if isinstance(exc, EtdeployError):
        return exc
    if isinstance(exc, KeyboardInterrupt):
        return InfraError("interrupted before the run finished", "run it again to completion")
    return InfraError(
        f"internal error: {type(exc).__name__}: {exc}",
        "rerun with --verbose and report the traceback",
    )


def runner_for(job: RunJob, device: Any, info: Any, say: StatusCallback) -> Any:
    """--runner, else the device's configured runner, else the one etdeploy builds
    for it (runner_build.runner_choice: host, NDK or self-contained arm64)."""
    from etdeploy.devices.registry import check_runner_abi
    from etdeploy.runner_build import runner_for_device, runner_from_path

    explicit = job.runner or getattr(device, "runner_path", None)
    if explicit is not None:
        bundle = runner_from_path(Path(explicit))
    else:
        bundle = runner_for_device(info, progress=say)
    check_runner_abi(info, bundle.abi)
    return bundle


def _remove_quietly(device: Any, path: str) -> None:
    # Cleanup must not hide the error that got us here; a failed removal is
    # visible on the next run as a stale dir, which the next job does not read.
    with contextlib.suppress(EtdeployError):
        device.remove(path, recursive=True)


def _keep_etdump(path: Path | None, job_id: str) -> Path | None:
    if path is None:
        return None
    from etdeploy.paths import cache_dir

    kept = cache_dir("etdumps") / f"{job_id}.etdump"
    # The temporary dir may be on another filesystem (a tmpfs /tmp): copy, not rename.
    shutil.move(path, kept)
    return kept


def profile_of(etdump: Path, program: Program) -> dict[str, Any]:
    from etdeploy.builder import etrecord_path
    from etdeploy.profile import summarize_etdump

    record = etrecord_path(program.pte)
    return summarize_etdump(etdump, record if record.is_file() else None)


def _planned_bytes(program: Program) -> int | None:
    if program.manifest is None:
        return None
    return program.manifest["methods"][0].get("planned_bytes")


def _size_verdict(pte: Path, config: Any) -> dict[str, Any]:
    """The store-size verdict for the delivery set in etdeploy.toml (sizecheck)."""
    from etdeploy.sizecheck import summary_for_result

    return summary_for_result(pte, config)


def write_result_json(result: dict[str, Any], path: Path) -> None:
    """Temporary name, fsync, then rename: a killed run never leaves half a result."""
    from etdeploy.atomic import write_json

    try:
        write_json(result, path)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror}", "check the --json path") from None

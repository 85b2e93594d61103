"""The typed result of one run: what every stage adds to and every report reads.

`RunResult` is the `etdeploy.result/1` document as frozen records. The pipeline
builds it (etdeploy.pipeline.run), `to_json` writes the document that
report.schema validates, and `RunResult.from_json` reads one back for the farm,
JUnit, HTML and baseline writers. Field names are the document's keys.

Optional blocks are left out of the document when absent: an error result has
no artifact, runner or verdict, and a run without --host-check has no host check.

Kept free of heavy imports (no numpy): the CLI imports the report package on
every start.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

from etdeploy.report.record import JsonObject, Record, omitted_if_none

RESULT_SCHEMA_ID = "etdeploy.result/1"

Status = Literal["passed", "failed", "error"]


@dataclass(frozen=True)
class JobInfo(Record):
    """What was asked for. backend and quantization are what was requested; the
    artifact says what was built."""

    id: str | None
    model: str | None
    backend: str | None = None
    quantization: str | None = None
    method: str | None = omitted_if_none()
    iterations: int | None = None
    warmup: int | None = None


@dataclass(frozen=True)
class DeviceSummary(Record):
    """The device as it described itself; only the name when it never answered."""

    name: str
    transport: str | None = omitted_if_none()
    serial: str | None = omitted_if_none()
    os: str | None = omitted_if_none()
    os_version: str | None = omitted_if_none()
    abi: str | None = omitted_if_none()
    model: str | None = omitted_if_none()
    soc: str | None = omitted_if_none()


@dataclass(frozen=True)
class OpDelegation(Record):
    delegated: int
    non_delegated: int


@dataclass(frozen=True)
class Delegation(Record):
    """How much of the graph the backend claimed (from the build manifest)."""

    delegated_nodes: int
    non_delegated_nodes: int
    share: float
    delegated_subgraphs: int | None = omitted_if_none()
    by_op: dict[str, OpDelegation] = field(default_factory=dict)


@dataclass(frozen=True)
class DataFileInfo(Record):
    """A program's external data (.ptd): its weights, kept beside the .pte."""

    path: str
    sha256: str
    size_bytes: int


@dataclass(frozen=True)
class Artifact(Record):
    """The program that ran."""

    sha256: str
    size_bytes: int
    backend: str | None
    quantization: str | None
    pte: str | None = omitted_if_none()
    delegation: Delegation | None = None
    # etdeploy/torch/executorch versions it was built with; None for a foreign .pte.
    built_with: dict[str, str | None] | None = None
    # Its external data (--external-weights, or --data); absent when the .pte holds its weights.
    data: DataFileInfo | None = omitted_if_none()


@dataclass(frozen=True)
class RunnerInfo(Record):
    flavor: str  # etdeploy | upstream
    abi: str | None = omitted_if_none()
    # Which build ran: host | android-ndk | arm64-glibc | external (runner_build).
    kind: str | None = omitted_if_none()
    version: str | None = None
    path: str | None = omitted_if_none()


@dataclass(frozen=True)
class InputsInfo(Record):
    names: tuple[str, ...]
    samples: tuple[str, ...]
    on_noise: bool = False
    reference: str | None = omitted_if_none()  # eager | file


@dataclass(frozen=True)
class DeviceLock(Record):
    """When this job held its device (wall clock, for a farm's timeline)."""

    waited_s: float
    held_from: float
    held_to: float


@dataclass(frozen=True)
class PreflightRunner(Record):
    """What the runner said of itself (`etdeploy_runner --describe`)."""

    runner_version: str | None
    executorch_version: str | None
    kind: str | None
    abi: str | None
    kernel_libraries: tuple[str, ...] = ()
    kernels: int = 0
    backends: tuple[str, ...] = ()


@dataclass(frozen=True)
class PreflightProgram(Record):
    """What the program needs, read from it without torch."""

    pte: str
    operators: tuple[str, ...] = ()
    backends: tuple[str, ...] = ()
    file_identifier: str | None = None
    schema_version: int | None = None
    executorch_version: str | None = None
    selective_build_ops: str | None = None


@dataclass(frozen=True)
class KernelLibrary(Record):
    library: str
    component: str | None = None
    linkable: bool = False


@dataclass(frozen=True)
class MissingOperatorInfo(Record):
    name: str
    methods: tuple[str, ...] = ()
    # The calls' tensor dtypes/dim orders no kernel serves, and what the runner's take.
    tensors: tuple[tuple[str, ...], ...] = ()
    available: tuple[tuple[str, ...], ...] = ()
    providers: tuple[KernelLibrary, ...] = ()


@dataclass(frozen=True)
class MissingBackendInfo(Record):
    name: str
    methods: tuple[str, ...] = ()
    option: str | None = None
    in_wheel: bool = False


@dataclass(frozen=True)
class VersionPairing(Record):
    """The program's ExecuTorch against the runtime's, by ExecuTorch's policy."""

    status: str  # ok | warn | unknown
    text: str
    program: str | None = None
    runtime: str | None = None
    policy: str | None = None
    policy_read: str | None = None


@dataclass(frozen=True)
class Preflight(Record):
    """Could the device's runner run the program, asked before anything was pushed."""

    status: str  # passed | failed | skipped
    reason: str
    device: str
    source: str | None = None  # where the runner's description came from: cache | host | device
    seconds: float = 0.0
    runner: PreflightRunner | None = None
    program: PreflightProgram | None = None
    missing_operators: tuple[MissingOperatorInfo, ...] = ()
    missing_backends: tuple[MissingBackendInfo, ...] = ()
    version: VersionPairing | None = None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class DeployStats(Record):
    bytes_sent: int
    files_sent: int
    files_skipped: int
    seconds: float


@dataclass(frozen=True, kw_only=True)
class Latency(Record):
    """The timed iterations on the first sample, in milliseconds."""

    load: float | None = None
    n: int
    min: float | None = omitted_if_none()
    median: float | None = omitted_if_none()
    p90: float | None = omitted_if_none()
    max: float | None = omitted_if_none()
    trimmed_mean: float | None = omitted_if_none()
    stdev: float | None = omitted_if_none()
    iterations: tuple[float, ...]


@dataclass(frozen=True)
class Memory(Record):
    planned_bytes: int | None = None
    peak_rss_bytes: int | None = None


@dataclass(frozen=True)
class OutputMetrics(Record):
    """One output of one sample against its reference.

    In memory the metrics are floats, infinite where they are (an exact match's
    SQNR); the document writes a non-finite value as null, and from_json reads
    it back as the value it must have been.
    """

    output: int
    name: str
    sample: str
    shape: tuple[int, ...]
    max_abs: float
    max_rel: float
    mean_abs: float
    sqnr_db: float
    cosine: float
    allclose: bool
    top1_agree: bool | None = None
    top5_agree: bool | None = None
    # Error in units of the output's quantization step (a stage judged in steps).
    steps: float | None = omitted_if_none()

    @property
    def tightest_atol(self) -> float:
        """The smallest atol (with rtol 0) at which this output passes: its max abs error."""
        return self.max_abs

    def to_json(self) -> JsonObject:
        data = super().to_json()
        data["tightest_atol"] = None if not math.isfinite(self.max_abs) else self.max_abs
        return data

    @classmethod
    def from_json(cls, data: Any) -> OutputMetrics:
        # null is non-finite: max_abs, max_rel and mean_abs were infinite (a NaN or
        # infinite output); SQNR was +inf for an exact match, else -inf (the worst).
        filled = dict(data)
        for key in ("max_abs", "max_rel", "mean_abs"):
            if filled.get(key, 0) is None:
                filled[key] = math.inf
        if filled.get("sqnr_db", 0) is None:
            filled["sqnr_db"] = math.inf if filled.get("max_abs") == 0 else -math.inf
        if filled.get("cosine", 0) is None:
            filled["cosine"] = math.nan
        return super().from_json(filled)


OUTPUT_KINDS = ("classifier", "regression", "embedding", "mask", "other")


@dataclass(frozen=True)
class OutputKind(Record):
    """How an output is judged: declared (ModelSpec.output_kinds, --output-kind,
    [verify] output_kinds) or guessed from its shape, which is never held to a
    metric that only fits the guess."""

    name: str
    kind: str  # one of OUTPUT_KINDS
    declared: bool


@dataclass(frozen=True)
class Thresholds(Record):
    """Every limit a verdict applied, recorded with it."""

    atol: float  # fp32: allclose
    rtol: float
    min_sqnr_db: float  # the accuracy budget of quantization
    min_top1: float  # ... for declared classifiers
    min_cosine: float  # ... for declared embeddings
    max_abs: float | None  # ... optional, any kind
    quant_steps: float  # a quantized program's outputs: error in steps of the output's scale
    quant_rtol: float  # ... for an output that is not quantized: relative to its range


@dataclass(frozen=True)
class BudgetStage(Record):
    """One step of the error budget: what one stage of the chain float eager ->
    quantized eager -> host runtime -> device adds, judged by its own rule."""

    stage: str  # quantization | lowering | device
    measured: str  # what against what, e.g. "device vs quantized eager"
    rule: str  # allclose | steps | accuracy
    limit: str  # the rule in words, with its numbers
    passed: bool
    reason: str
    max_abs: float
    sqnr_db: float  # the worst output and sample
    cosine: float
    top1_agreement: float | None = None  # over the classifier outputs, when there are any
    steps: float | None = None  # the worst error in quantization steps (rule steps)
    worst: OutputMetrics | None = None
    metrics: tuple[OutputMetrics, ...] = ()

    @classmethod
    def from_json(cls, data: Any) -> BudgetStage:
        filled = dict(data)
        if filled.get("max_abs", 0) is None:
            filled["max_abs"] = math.inf
        if filled.get("sqnr_db", 0) is None:
            filled["sqnr_db"] = math.inf if filled.get("max_abs") == 0 else -math.inf
        if filled.get("cosine", 0) is None:
            filled["cosine"] = math.nan
        return super().from_json(filled)


@dataclass(frozen=True)
class Verdict(Record):
    """The device's outputs against the reference (metrics: the end-to-end view,
    against the float model or the given file), and the error budget that
    decides: every stage within its limit."""

    passed: bool
    reason: str
    metrics: tuple[OutputMetrics, ...] = ()
    worst: OutputMetrics | None = None
    on_noise: bool = False
    top1_agreement: float | None = None
    reference: str | None = omitted_if_none()  # what `metrics` compare with
    budget: tuple[BudgetStage, ...] = ()
    kinds: tuple[OutputKind, ...] = ()
    thresholds: Thresholds | None = omitted_if_none()

    def to_json(self) -> JsonObject:
        data = super().to_json()
        # The document's historical key order, then what the budget added.
        head = ("passed", "reason", "on_noise", "top1_agreement", "worst", "metrics")
        return {**{k: data.pop(k) for k in head}, **data}

    def stage(self, name: str) -> BudgetStage | None:
        return next((s for s in self.budget if s.stage == name), None)

    @property
    def failed_stage(self) -> BudgetStage | None:
        return next((s for s in self.budget if not s.passed), None)


@dataclass(frozen=True)
class HostCheck(Record):
    """--host-check: the .pte in executorch's Python runtime on this machine."""

    device_vs_host: Verdict
    host_vs_reference: Verdict


@dataclass(frozen=True)
class SizeVerdict(Record):
    key: str
    label: str
    limit_bytes: int
    measured_bytes: int
    status: str  # fits | over | warning
    store: str | None = omitted_if_none()
    inclusive: bool | None = omitted_if_none()
    measure: str | None = omitted_if_none()  # download | raw
    severity: str | None = omitted_if_none()
    headroom_bytes: int | None = omitted_if_none()
    excess_bytes: int | None = omitted_if_none()
    text: str | None = omitted_if_none()
    source: str | None = omitted_if_none()
    read_on: str | None = omitted_if_none()
    note: str | None = None
    # A sampled download figure's bound; the verdict is judged at its top.
    uncertainty_bytes: int | None = omitted_if_none()


@dataclass(frozen=True)
class SizeSummary(Record):
    """The store-size verdict (etdeploy.sizecheck.summary_for_result)."""

    raw_bytes: int
    download_bytes: int
    verdicts: tuple[SizeVerdict, ...]
    passed: bool
    schema: str = "etdeploy.size-summary/1"
    path: str | None = omitted_if_none()
    data_path: str | None = omitted_if_none()  # the .ptd counted with the .pte
    extra_bytes: int | None = omitted_if_none()
    total_raw_bytes: int | None = omitted_if_none()
    total_download_bytes: int | None = omitted_if_none()
    estimate: str | None = omitted_if_none()
    method: str | None = omitted_if_none()  # "exact", or "sampled ±0.12%"
    error_bound: float | None = omitted_if_none()  # a sampled figure's relative half-width
    download_uncertainty_bytes: int | None = omitted_if_none()
    cached: bool | None = omitted_if_none()  # read back from earlier measurements
    store: str | None = omitted_if_none()
    deliveries: tuple[str, ...] = ()
    budget_bytes: int | None = None
    config: str | None = None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class ProfileEvent(Record):
    """One operator or delegate call of the profiled executions (ETDump)."""

    name: str
    delegated: bool
    backend: str | None
    op_types: tuple[str, ...]
    module: str | None
    count: int
    p50_ms: float | None  # null: the profiler measured nothing
    avg_ms: float | None
    max_ms: float | None
    share: float | None = None  # of the median execution


@dataclass(frozen=True)
class ExecutionTimes(Record):
    count: int
    median: float | None


@dataclass(frozen=True)
class OperatorTotal(Record):
    """One kind of operator over one execution: its instances' median times summed."""

    name: str  # a delegate's kernel kind, or the ATen operators, or the runtime's name
    backend: str | None
    instances: int
    p50_ms: float
    share: float | None = None  # of the median execution


@dataclass(frozen=True)
class Profile(Record):
    executions_ms: ExecutionTimes
    events: tuple[ProfileEvent, ...]
    delegate_calls: tuple[ProfileEvent, ...]
    etrecord: bool
    # Per operator kind, largest first (etdeploy.profile.operator_totals).
    operators: tuple[OperatorTotal, ...] = ()


@dataclass(frozen=True)
class ErrorInfo(Record):
    """Why a run did not reach a verdict, and whose fault it was."""

    kind: str
    message: str
    infrastructure: bool
    hint: str | None = None
    retryable: bool = False
    device: str | None = None
    command: str | None = None


@dataclass(frozen=True)
class AttemptError(Record):
    kind: str | None = None
    message: str | None = None
    infrastructure: bool | None = None
    retryable: bool | None = None
    device: str | None = None


@dataclass(frozen=True)
class Attempt(Record):
    """One attempt of a farm job (a retried job has several)."""

    attempt: int
    job_id: str | None
    status: str | None
    started_at: str
    seconds: float
    error: AttemptError | None = omitted_if_none()
    backoff_s: float | None = omitted_if_none()


@dataclass(frozen=True)
class Shard(Record):
    index: int
    count: int


@dataclass(frozen=True)
class FarmPlacement(Record):
    """Where in a farm a result came from."""

    key: str
    shard: Shard
    spec: str


@dataclass(frozen=True)
class TapMetrics(Record):
    """One tapped value on the device against the same node's eager value,
    scaled by the value's own magnitude (its largest |eager value|).

    A summary tap (STATS: the value was over the byte budget) is compared by
    its summary (min, max, mean, std, rms, abs max ...), so `rel` is a lower
    bound and `sqnr_db` is absent."""

    max_abs: float
    rel: float  # max_abs / magnitude
    ulps: float  # max_abs in float32 ULPs at the magnitude
    magnitude: float
    sqnr_db: float | None = None
    steps: float | None = omitted_if_none()  # in steps of its quantization grid

    @classmethod
    def from_json(cls, data: Any) -> TapMetrics:
        # null is non-finite: the errors were infinite (a NaN where eager had a number).
        filled = dict(data)
        for key in ("max_abs", "rel", "ulps"):
            if filled.get(key, 0) is None:
                filled[key] = math.inf
        if "sqnr_db" in filled and filled["sqnr_db"] is None and filled.get("max_abs") == 0:
            filled["sqnr_db"] = math.inf
        return super().from_json(filled)


TAP_STATUSES = ("ok", "carried", "departs")


@dataclass(frozen=True)
class TapResult(Record):
    """One tapped value, in graph order: where it was computed and how far the
    device's value is from eager's, against what its inputs carried in."""

    index: int  # graph order among the taps
    node: str  # the exported program's node name
    op: str  # layer_norm
    module: str | None  # the module path (norm, encoder.layers.3.attn); None: the model itself
    module_class: str | None
    source: str | None  # the user's line: model.py:42
    code: str | None
    partition: str  # XNNPACK (a delegate) or CPU (a kernel)
    kernel: str | None  # the CPU kernel, when not delegated
    delegate: int | None  # which delegated subgraph
    reducer: str  # full | stats
    shape: tuple[int, ...]
    inputs: tuple[str, ...]  # the tapped nodes it is computed from
    sample: str  # the sample these metrics are from (the worst of the localised ones)
    metrics: TapMetrics
    carried_in: float  # the largest rel error among its inputs (0: exact inputs)
    growth: float | None  # rel / what its inputs carried (None: within tolerance)
    status: str  # one of TAP_STATUSES
    # Tapped as a value carried into --localize-module's module (never blamed).
    context: bool = False
    step: float | None = omitted_if_none()  # of the quantization grid the value lies on


@dataclass(frozen=True)
class FirstDivergence(Record):
    """The first operator whose error outgrows what its inputs carried in."""

    op: str
    node: str
    module: str | None
    source: str | None
    code: str | None
    partition: str
    kernel: str | None
    sample: str
    metrics: TapMetrics
    carried_in: float
    growth: float | None


@dataclass(frozen=True)
class LocalizeAttempt(Record):
    """One tapped program tried: did its final outputs reproduce the divergence?"""

    granularity: str  # ops | modules | partitions
    taps: int
    reproduced: bool | None  # None: the run passed, there was nothing to reproduce
    note: str


@dataclass(frozen=True)
class TapTolerance(Record):
    """What a tap may differ by, and how much growth blames an operator."""

    rel: float  # a float value: max abs error / its magnitude
    growth: float  # an operator is blamed when its rel error is this many times its inputs'
    quant_steps: float  # a value on a quantization grid: error in its steps
    floor: float  # the error an exact input is taken to carry (float32's epsilon)


@dataclass(frozen=True)
class TappedProgram(Record):
    """The tapped sibling that ran (the last one tried)."""

    sha256: str
    size_bytes: int
    untapped_size_bytes: int
    full_taps: int
    summary_taps: int
    budget_bytes: int
    cached: bool
    pte: str | None = omitted_if_none()  # in the build cache, beside its .pt2 eager twin
    # Values of dynamic size over the budget, left untapped (a summary cannot follow the size).
    untapped: tuple[str, ...] = ()


@dataclass(frozen=True)
class Localization(Record):
    """`run --localize`: the tapped sibling of the program run on the same device,
    each tapped value judged against the same node's eager value.

    status: localized (a first divergence is named), clean (every tap within
    tolerance), not_localizable (the taps made the divergence disappear at every
    granularity tried), unexplained (reproduced, but no tapped operator's error
    grew: it starts where nothing is tapped)."""

    status: str
    reason: str
    reference: str  # float eager | quantized eager
    samples: tuple[str, ...]
    granularity: str | None
    attempts: tuple[LocalizeAttempt, ...]
    tolerance: TapTolerance
    taps: tuple[TapResult, ...] = ()
    first_divergence: FirstDivergence | None = None
    program: TappedProgram | None = omitted_if_none()
    module: str | None = omitted_if_none()  # --localize-module
    seconds: float = 0.0


@dataclass(frozen=True, kw_only=True)
class RunResult(Record):
    """One job (model x backend x device): the one source of every report.

    Fields are in the document's order."""

    schema: str = RESULT_SCHEMA_ID
    etdeploy: str = ""
    status: Status
    exit_code: int
    job: JobInfo
    device: DeviceSummary
    # The blocks of a run that reached a verdict; absent from an error result.
    artifact: Artifact | None = omitted_if_none()
    runner: RunnerInfo | None = omitted_if_none()
    inputs: InputsInfo | None = omitted_if_none()
    device_lock: DeviceLock | None = omitted_if_none()
    preflight: Preflight | None = omitted_if_none()
    deploy: DeployStats | None = omitted_if_none()
    latency_ms: Latency | None = omitted_if_none()
    memory: Memory | None = omitted_if_none()
    verdict: Verdict | None = omitted_if_none()
    host_check: HostCheck | None = omitted_if_none()
    size: SizeSummary | None = omitted_if_none()
    etdump: str | None = omitted_if_none()
    profile: Profile | None = omitted_if_none()
    # run --localize: where the device starts to depart from eager.
    localization: Localization | None = omitted_if_none()
    warnings: tuple[str, ...] = ()
    error: ErrorInfo | None = None
    started_at: str
    seconds: float
    logs: tuple[str, ...] = ()
    # Added by a farm.
    attempts: tuple[Attempt, ...] | None = omitted_if_none()
    farm: FarmPlacement | None = omitted_if_none()

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    @property
    def is_infrastructure(self) -> bool:
        """A device, transport or runner failure (exit 3), not bad input (exit 2)."""
        if self.error is not None:
            return self.error.infrastructure
        return self.exit_code == 3

    @property
    def retryable(self) -> bool:
        """An infrastructure error that a retry can cure (a dropped link)."""
        return (
            self.status == "error"
            and self.error is not None
            and self.error.infrastructure
            and self.error.retryable
        )

    @property
    def model_label(self) -> str:
        """The model's name, or the .pte's for a run of a bare program."""
        if self.job.model:
            return self.job.model
        if self.artifact is not None and self.artifact.pte:
            from pathlib import PurePath

            return PurePath(self.artifact.pte).name
        return "?"

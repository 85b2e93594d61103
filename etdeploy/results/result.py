"""The typed result of one run: what every stage adds to and every report reads.

`RunResult` is the `etdeploy.result/2` document as frozen records. The pipeline
builds it (etdeploy.pipeline.run), `to_json` writes the document that
report.schema validates, and `RunResult.from_json` reads one back for the farm,
JUnit, HTML and baseline writers. Field names are the document's keys.

Optional blocks are left out of the document when absent: an error result has
no artifact, runner or verdict, and a run without --host-check has no host check.

The records of the verdict, preflight, localization, memory and shapes blocks
live in result_verdict.py, result_preflight.py, result_localization.py,
result_memory.py and result_shapes.py, and are importable from here.

Kept free of heavy imports (no numpy): the CLI imports the report package on
every start.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from etdeploy.lazy import lazy_exports
from etdeploy.results.record import Record, omitted_if_none
from etdeploy.results.result_accuracy import (  # noqa: F401 - re-exported
    Disagreement,
    PairedDifference,
    TaskAccuracy,
    TaskScore,
    Throughput,
)
from etdeploy.results.result_lm import LanguageModelResult
from etdeploy.results.result_memory import (  # noqa: F401 - re-exported
    Memory,
    MemoryLimit,
    MemoryPart,
    MemoryPhase,
)
from etdeploy.results.result_preflight import (  # noqa: F401 - re-exported
    KernelLibrary,
    MissingBackendInfo,
    MissingOperatorInfo,
    Preflight,
    PreflightProgram,
    PreflightRunner,
    VersionPairing,
)
from etdeploy.results.result_shapes import ShapePoint
from etdeploy.results.result_verdict import (  # noqa: F401 - re-exported
    OUTPUT_KINDS,
    BudgetStage,
    HostCheck,
    OutputKind,
    OutputMetrics,
    Thresholds,
    Verdict,
)

if TYPE_CHECKING:
    from etdeploy.results.result_localization import (  # noqa: F401 - re-exported
        AMPLIFIER_CAUSES,
        TAP_STATUSES,
        Amplifier,
        FirstDivergence,
        Localization,
        LocalizeAttempt,
        OperatorError,
        Origin,
        TapMetrics,
        TappedProgram,
        TapResult,
        TapTolerance,
    )

# The localization's twenty records are read only by a run that localized: imported
# when first named (etdeploy.lazy), not by every run (~0.005 s).
_EXPORTS = dict.fromkeys(
    ("AMPLIFIER_CAUSES", "TAP_STATUSES", "Amplifier", "FirstDivergence", "Localization",
     "LocalizeAttempt", "OperatorError", "Origin", "TapMetrics", "TappedProgram", "TapResult",
     "TapTolerance"),
    "etdeploy.results.result_localization",
)  # fmt: skip
__getattr__ = lazy_exports(__name__, _EXPORTS)

RESULT_SCHEMA_ID = "etdeploy.result/2"
# /2 (2026-12-04): a budget stage's `metrics` keep its worst samples per output (the
# verdict's keep every sample); the memory account, task accuracy, throughput and
# --shapes blocks. Documents of /1 are still read (a baseline from before).
READ_SCHEMA_IDS = ("etdeploy.result/1", RESULT_SCHEMA_ID)

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
    # The process's CPU time of each timed iteration and their median (our runner's
    # iterations_cpu_ms; absent from older results and from upstream's runner). A busy
    # host stretches the wall time, not the CPU time: what the baseline reads
    # to tell a busy night from a slower program (etdeploy.results.baseline).
    cpu_median: float | None = omitted_if_none()
    cpu_iterations: tuple[float, ...] | None = omitted_if_none()


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
    # Every sample's one execution (MLPerf's single-stream percentiles, offline rate).
    throughput: Throughput | None = omitted_if_none()
    memory: Memory | None = omitted_if_none()
    verdict: Verdict | None = omitted_if_none()
    # With labelled samples: the task's metric on the device, paired with eager.
    accuracy: TaskAccuracy | None = omitted_if_none()
    host_check: HostCheck | None = omitted_if_none()
    size: SizeSummary | None = omitted_if_none()
    etdump: str | None = omitted_if_none()
    profile: Profile | None = omitted_if_none()
    # run --localize: where the device starts to depart from eager.
    localization: Localization | None = omitted_if_none()
    # run --shapes: the program at points of its dynamic range.
    shapes: tuple[ShapePoint, ...] | None = omitted_if_none()
    # A language model (etdeploy.pipeline.llm): its tokens against float and quantized eager.
    language_model: LanguageModelResult | None = omitted_if_none()
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

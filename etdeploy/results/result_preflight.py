"""What preflight found (the Preflight block of a RunResult): what the
runner said of itself, what the program needs, and what is missing."""

from __future__ import annotations

from dataclasses import dataclass

from etdeploy.results.record import Record


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

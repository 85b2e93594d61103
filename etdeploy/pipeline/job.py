"""resolve: the frozen job a run carries out.

The CLI and the farm build a RunJob from flags over etdeploy.toml over defaults
(etdeploy.config.run_settings); its checks run here, so a bad value fails before
anything is built. A farm worker receives it as JSON (to_json/from_json).
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from etdeploy.errors import UsageError
from etdeploy.report.result import OUTPUT_KINDS

# Called with a short description of what the pipeline is doing now.
StatusCallback = Callable[[str], None]


@dataclass(frozen=True)
class RunJob:
    """Everything one run needs to know. `model` may be None only with both `pte`
    and `reference` (then there is no eager model to compare with)."""

    model: str | None
    device: str = "local"
    backend: str = "xnnpack"
    quantize: str | None = None
    calibration: tuple[str, ...] = ()
    dynamic: tuple[str, ...] = ()
    pte: Path | None = None
    # The external data (.ptd) of --pte, built elsewhere; None: the one its manifest names.
    data: Path | None = None
    # Build MODEL with its weights in a .ptd beside the .pte (program-data separation).
    # Like backend and quantize, a build option: with --pte nothing is built.
    external_weights: bool = False
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
    # Hash every file already on the device instead of trusting its digest records.
    verify_remote: bool = False
    # Record an ETDump of the timed executions and name the slowest operators.
    profile: bool = False
    # How outputs are judged ("NAME=KIND"), over what the model's factory declares.
    output_kinds: tuple[str, ...] = ()
    # The accuracy budget of quantization and the quantized program's tolerance;
    # None: etdeploy.verify's defaults. Every value used is recorded in the verdict.
    min_sqnr_db: float | None = None
    min_top1: float | None = None
    min_cosine: float | None = None
    max_abs_error: float | None = None
    quant_steps: float | None = None
    # run --localize: a tapped sibling of the program, run on the same device,
    # names the operator where it departs from eager (etdeploy.pipeline.localize).
    localize: bool = False
    localize_samples: int = 0  # more samples after the most divergent one
    localize_budget_bytes: int | None = None  # full tensors within it, summaries beyond
    localize_module: str | None = None  # only operators inside this module path
    # The peak memory a run may reach (bytes; etdeploy.memory.limit), and where that
    # limit was set ("--max-memory", "etdeploy.toml: devices.pixel8.max_memory").
    max_memory_bytes: int | None = None
    max_memory_source: str | None = None
    # Points of a dynamic program's range to run at besides the samples' own shapes
    # ("min", "mid", "max", a size, "x:0=3"; etdeploy.pipeline.shapes), each judged
    # for parity and measured for memory.
    shapes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.model is None and (self.pte is None or self.reference is None):
            raise UsageError(
                "no model given",
                "name MODEL (the eager reference), or give both --pte and --reference",
            )
        if self.data is not None and self.pte is None:
            raise UsageError(
                "--data names the weights of a .pte built elsewhere, but no --pte was given",
                "give the pair: --pte model.pte --data model.ptd",
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

        if self.localize and self.model is None:
            raise UsageError(
                "--localize needs MODEL: a --pte alone has no graph to tap",
                "name the model the .pte was built from: etdeploy run MODEL --pte FILE --localize",
            )
        if self.localize_samples < 0:
            raise UsageError(f"--localize-samples must be 0 or more, got {self.localize_samples}")
        if self.localize_budget_bytes is not None and self.localize_budget_bytes < 0:
            raise UsageError(
                f"--localize-budget must be 0 or more, got {self.localize_budget_bytes}",
                "a size, e.g. --localize-budget 64MB",
            )

        if self.max_memory_bytes is not None and self.max_memory_bytes <= 0:
            raise UsageError(
                f"--max-memory must be more than 0 bytes, got {self.max_memory_bytes}",
                "a size, e.g. --max-memory 300MB",
            )
        if self.shapes:
            from etdeploy.pipeline.shapes import parse_points

            parse_points(self.shapes)  # a malformed point fails here; ranges once built
            if self.model is None:
                raise UsageError(
                    "--shapes needs MODEL: the outputs at each point are compared with its eager "
                    "outputs",
                    "name the model the .pte was built from: etdeploy run MODEL --pte FILE --shapes ...",
                )
        self.declared_kinds()  # a malformed --output-kind fails here
        for name in ("min_top1", "min_cosine"):
            value = getattr(self, name)
            if value is not None and not 0 <= value <= 1:
                raise UsageError(
                    f"--{name.replace('_', '-')} must be between 0 and 1, got {value}",
                    "a fraction, e.g. 0.9",
                )
        for name in ("max_abs_error", "quant_steps"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise UsageError(f"--{name.replace('_', '-')} must be 0 or more, got {value}")

    def declared_kinds(self) -> dict[str, str]:
        """--output-kind NAME=KIND as a mapping."""
        kinds: dict[str, str] = {}
        for item in self.output_kinds:
            name, sep, kind = item.partition("=")
            if not sep or not name or not kind:
                raise UsageError(
                    f"cannot read --output-kind {item!r}", "write NAME=KIND, e.g. logits=classifier"
                )
            if kind.strip() not in OUTPUT_KINDS:
                raise UsageError(
                    f"--output-kind {item!r}: {kind.strip()!r} is not one of {', '.join(OUTPUT_KINDS)}",
                    "e.g. --output-kind logits=classifier",
                )
            kinds[name.strip()] = kind.strip()
        return kinds

    @property
    def label(self) -> str:
        return self.model or (self.pte.name if self.pte else "?")

    def to_json(self) -> dict[str, Any]:
        """The job as JSON, for a farm's worker process."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Path):
                value = str(value)
            elif isinstance(value, tuple):
                value = list(value)
            out[f.name] = value
        return out

    @classmethod
    def from_settings(cls, model: str | None, settings: Mapping[str, Any], **flags: Any) -> RunJob:
        """A job from etdeploy.config.run_settings (flags over etdeploy.toml over
        defaults) and the flags that have no setting (--pte, --random, ...).
        Settings that are not the job's own (lock_timeout_s: the device's) are left out."""
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in settings.items() if k in known and v is not None}
        return cls.from_json({**values, "model": model, **flags})

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunJob:
        values = dict(data)
        for f in dataclasses.fields(cls):
            value = values.get(f.name)
            if value is None:
                continue
            if f.name in _PATH_FIELDS and not isinstance(value, Path):
                values[f.name] = Path(value)
            elif isinstance(value, list):
                values[f.name] = tuple(value)
        return cls(**values)


_PATH_FIELDS = ("pte", "data", "reference", "runner")


def new_job_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]

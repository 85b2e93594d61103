"""`release check`: the delivery proof. For each device: its real properties, the group
and variant the store would deliver to it (the selection table, the same rules as
selection.json's), then that variant run there through the ordinary pipeline (real
inputs, the eager reference, the error budget). A variant the table delivers that no
device has verified is unproven; a group no device fell into is untried.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from etdeploy.build_options import ProgramOptions
from etdeploy.devices.base import Device
from etdeploy.errors import EXIT_CHECK_FAILED, EXIT_OK, EtdeployError
from etdeploy.pipeline import RunContext, RunJob, as_error, error_result, run_job
from etdeploy.pipeline.llm.folder import looks_like_lm_folder
from etdeploy.release.package import Release
from etdeploy.release.properties import read_properties
from etdeploy.release.rules import DeviceProperties, Selected
from etdeploy.release.variants import BuiltVariant
from etdeploy.results.result import RunResult

SCHEMA = "etdeploy.release-check/1"
# The job a device runs: (device name, the variant's .pte) -> RunJob. The CLI makes it from
# flags over etdeploy.toml, as `etdeploy run` does.
JobFor = Callable[[str, Path], RunJob]
Opener = Callable[[str], Device]
Status = Callable[[str], None]


@dataclass(frozen=True)
class DeviceProof:
    """One device's row of the proof."""

    device: str
    properties: DeviceProperties | None = None
    selected: Selected | None = None
    result: RunResult | None = None
    # Why the device has no result: not reachable, properties unreadable, variant not built.
    problem: str | None = None
    exit_code: int = EXIT_OK
    notes: tuple[str, ...] = ()

    @property
    def loads(self) -> bool | None:
        """Whether the runner loaded and ran the variant there (None: never tried)."""
        if self.result is None:
            return None
        return self.result.status in ("passed", "failed")

    @property
    def verdict(self) -> str:
        if self.result is not None:
            return self.result.status
        return "error" if self.exit_code != EXIT_OK else "not run"

    def to_json(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "properties": self.properties.to_json() if self.properties else None,
            "group": self.selected.group if self.selected else None,
            "variant": self.selected.variant if self.selected else None,
            "matched_groups": list(self.selected.matched) if self.selected else [],
            "loads": self.loads,
            "verdict": self.verdict,
            "problem": self.problem,
            "exit_code": self.exit_code,
            "notes": list(self.notes),
            "result": self.result.to_json() if self.result else None,
        }


@dataclass(frozen=True)
class DeliveryProof:
    release: str
    devices: tuple[DeviceProof, ...]
    unproven: tuple[str, ...]  # variants the table delivers that no device verified
    untried_groups: tuple[str, ...]  # groups (and "other") no device fell into
    not_built: dict[str, str]

    @property
    def exit_code(self) -> int:
        """1 when a variant failed its check on a device; else a device's own error (3, or
        2); else 0. Unproven variants are said, not failed: no device of theirs was given."""
        codes = [d.exit_code for d in self.devices]
        if EXIT_CHECK_FAILED in codes:
            return EXIT_CHECK_FAILED
        return next((c for c in codes if c != EXIT_OK), EXIT_OK)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "release": self.release,
            "devices": [d.to_json() for d in self.devices],
            "unproven": list(self.unproven),
            "untried_groups": list(self.untried_groups),
            "not_built": self.not_built,
            "exit_code": self.exit_code,
        }


def _memory_gate(job: RunJob, limit: int | None) -> RunJob:
    """The group's max_memory, handed to the run's memory gate (issue 26)."""
    return job if limit is None else dataclasses.replace(job, max_memory_bytes=limit)


def _as_built(job: RunJob, built: BuiltVariant) -> RunJob:
    """A language model's variant run with the options it was built with: its eager
    references (float and quantized) and KV cache follow them (etdeploy.pipeline.llm)."""
    if not looks_like_lm_folder(job.model):
        return job
    chosen = {f.name: getattr(built.variant, f.name) for f in dataclasses.fields(ProgramOptions)}
    return dataclasses.replace(job, **chosen)


def prove_device(
    release: Release, name: str, opener: Opener, job_for: JobFor, context: RunContext
) -> DeviceProof:
    """One device: open it, read it, choose for it, run the chosen variant there."""
    say = context.status or (lambda _text: None)
    try:
        say(f"{name}: opening")
        device = opener(name)
    except EtdeployError as exc:
        return DeviceProof(name, problem=str(exc), exit_code=exc.exit_code)
    with contextlib.closing(device):
        try:
            say(f"{name}: reading its properties")
            props = read_properties(device)
        except EtdeployError as exc:
            return DeviceProof(name, problem=str(exc), exit_code=exc.exit_code)
        selected = release.selection.select(props)
        say(f"{name}: group {selected.group}, variant {selected.variant}")
        built = release.built(selected.variant)
        if built is None or built.pte is None:
            return DeviceProof(name, props, selected, problem=f"variant {selected.variant} not built",
                               exit_code=EXIT_OK)  # fmt: skip
        group = release.selection.group(selected.group)
        job = _memory_gate(_as_built(job_for(name, built.pte), built), group.max_memory_bytes)
        started = time.time()
        try:
            result = run_job(job, device, context)
        except Exception as exc:  # an interruption (KeyboardInterrupt) stops the whole check
            result = error_result(job, name, as_error(exc), started)
        return DeviceProof(name, props, selected, result, exit_code=result.exit_code)


def prove(
    release: Release, devices: Sequence[str], opener: Opener, job_for: JobFor,
    context: RunContext | None = None,
) -> DeliveryProof:  # fmt: skip
    """The delivery proof over `devices`, one after the other."""
    context = context or RunContext()
    rows = tuple(prove_device(release, name, opener, job_for, context) for name in devices)
    table = release.selection
    delivered = list(dict.fromkeys(g.variant for g in (*table.groups, table.other)))
    verified = {r.selected.variant for r in rows if r.selected and r.verdict == "passed"}
    reached = {r.selected.group for r in rows if r.selected}
    return DeliveryProof(
        release=table.release,
        devices=rows,
        unproven=tuple(v for v in delivered if v not in verified),
        untried_groups=tuple(g.name for g in (*table.groups, table.other) if g.name not in reached),
        not_built=dict(table.not_built or {}),
    )

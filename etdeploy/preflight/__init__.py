"""Preflight: can the device's runner run this program? Answered before anything
of the program is pushed.

Two self-descriptions are compared:
- the runner's: `etdeploy_runner --describe` (its ExecuTorch version, every
  kernel in its operator registry, every registered backend, its bundle kind and
  ABI), cached per bundle key, since registration happens in the bundle's own
  static initializers and so changes only when the bundle does;
- the program's, read without torch (etdeploy.pte.calls):
  the operator each instruction calls with its tensors' dtypes and dim orders
  (what the runtime builds a kernel key from), the delegates each method needs,
  and the ExecuTorch that built it (its manifest; the .pte itself carries only
  its schema version and file identifier).

Where the runner is asked: a bundle this machine can execute (the local device,
or an SSH host running the host build) is asked here, as a subprocess. Asking it
on the remote device instead would give the same answer, because the kernel and
backend registries are filled by the bundle's own files, which the cache key
already pins; it would only cost a transfer and a round trip. A bundle this
machine cannot execute (an Android NDK or arm64 build) is asked on the device:
only the runner is pushed, under the content-addressed name deploy uses (so
deploy then skips it), under the device lock, and once per bundle.

A missing operator or backend is bad input (PreflightError, exit 2): each is
named with the library that provides it where the installed executorch ships
one and how to build the runner with it. A version pairing ExecuTorch's
compatibility policy does not promise is a warning. Upstream's executor_runner
cannot describe itself: preflight is skipped with a note.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from etdeploy.devices.base import Device
from etdeploy.preflight.compare import (
    KernelProvider,
    MissingBackend,
    MissingOperator,
    PreflightError,
    PreflightReport,
    compare,
)
from etdeploy.preflight.describe_runner import (
    Described,
    Status,
    built_runner_for,
    describe_runner,
    remote_runner_dir,
    runs_here,
)
from etdeploy.preflight.needs import ProgramNeeds, VersionVerdict, program_needs, version_verdict
from etdeploy.runner_build import RunnerBundle

if TYPE_CHECKING:
    from etdeploy.builder.manifest import ProgramRecord

__all__ = [
    "Described", "KernelProvider", "MissingBackend", "MissingOperator", "PreflightError", "PreflightReport",
    "ProgramNeeds", "VersionVerdict", "built_runner_for", "check", "compare", "describe_runner", "preflight",
    "program_needs", "remote_runner_dir", "runs_here", "version_verdict",
]  # fmt: skip


def check(
    device: Device,
    bundle: RunnerBundle,
    pte: Path,
    manifest: ProgramRecord | None = None,
    *,
    status: Status | None = None,
    verify: bool = False,
    sha256: str | None = None,
) -> PreflightReport:
    """The comparison, whatever its outcome (doctor shows it; `preflight` raises on it).
    `verify`: a runner pushed to describe itself is hashed on the device (--verify-remote).
    `sha256`, the program's when known: what it needs is read back by it (needs.py)."""
    started = time.perf_counter()
    needs = program_needs(pte, manifest, sha256=sha256)
    asked = describe_runner(device, bundle, status=status, verify=verify)
    if asked.description is None:
        return PreflightReport(
            status="skipped",
            device=device.name,
            needs=needs,
            source=asked.source,
            seconds=time.perf_counter() - started,
            notes=(asked.note or "preflight skipped",),
        )
    report = compare(needs, asked.description, device.name)
    return replace(report, source=asked.source, seconds=time.perf_counter() - started)


def preflight(
    device: Device,
    bundle: RunnerBundle,
    pte: Path,
    manifest: ProgramRecord | None = None,
    *,
    status: Status | None = None,
    verify: bool = False,
    sha256: str | None = None,
) -> PreflightReport:
    """The preflight stage: between staging and deploy, before anything of the
    program is pushed. Returns the report (passed, or skipped with a note, its
    warnings for the result); raises PreflightError (exit 2) when the runner
    lacks an operator or backend the program needs."""
    report = check(device, bundle, pte, manifest, status=status, verify=verify, sha256=sha256)
    if report.status == "failed":
        raise report.error()
    return report

"""`etdeploy bundle`: a job bundle a device host runs without torch. Parses and renders
only; etdeploy.pipeline.make_bundle does the work.

A command of its own rather than `build --bundle`: a bundle is a whole job (the
program, its runners, the staged samples, the references, the settings), where
`build` writes a program alone.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import typer

from etdeploy.cli._app import command, console, note
from etdeploy.cli._settings import with_setting_options
from etdeploy.pipeline.job import RunJob
from etdeploy.settings import MACHINE, declared

OUTPUT_PANEL = "Output"
# Every setting that travels in a bundle or is spent making it; the machine's own
# (the device, a runner, the lock) are the running side's, and localisation needs
# the model where it runs.
BUNDLE_SETTINGS = tuple(
    entry.name
    for entry in declared(RunJob)
    if entry.option.scope != MACHINE and not entry.name.startswith("localize")
)


@command(
    "bundle",
    examples=(
        "etdeploy bundle digits -o job/                       # then: etdeploy run --bundle job/",
        "etdeploy bundle digits --abi host --abi arm64-v8a -o job/  # this machine and arm64 phones",
        "etdeploy bundle model.py:build --quantize int8 --inputs samples/ -o job/",
    ),
)
@functools.partial(with_setting_options, cls=RunJob, only=BUNDLE_SETTINGS)
def bundle_command(
    model: str = typer.Argument(None, metavar="MODEL", help="file.py:factory, package.module:factory, model.pt2, or an example (digits)."),
    output: Path = typer.Option(..., "--output", "-o", metavar="DIR", help="The bundle's folder (new, empty, or an old bundle, which is replaced).", rich_help_panel=OUTPUT_PANEL),
    abi: list[str] = typer.Option([], "--abi", metavar="ABI", help="A runner to carry, repeatable: host (default: this machine's build), arm64-v8a or aarch64 (the self-contained arm64 bundle, or the NDK build when set up), x86_64 (Android).", rich_help_panel=OUTPUT_PANEL),
    config_path: Path = typer.Option(None, "--config", metavar="PATH", help="etdeploy.toml to read (default: the nearest one).", rich_help_panel=OUTPUT_PANEL),
    settings: dict[str, Any] | None = None,
) -> None:  # fmt: skip
    """Make a job bundle: what `etdeploy run --bundle DIR` needs, torch not included.

    A machine without torch or executorch runs it.

    The program (and its .ptd), a prebuilt runner per --abi, the staged samples,
    the reference outputs (float eager; quantized eager for a quantized build; the
    host runtime's with --host-check), the job's settings and a manifest with every
    file's sha256. Needs the build extra (pip install 'etdeploy[build]').
    """
    from etdeploy.cli._feedback import Feedback
    from etdeploy.config import config_settings, load_config
    from etdeploy.pipeline.make_bundle import make_bundle, runners_for
    from etdeploy.settings import from_flags, layered

    config = load_config(config_path)
    job = RunJob(
        model=model, **layered(config_settings(config), from_flags(settings or {}, RunJob))
    )
    with Feedback() as feedback:
        runners = runners_for(abi or ("host",), feedback.status)
        made = make_bundle(job, output, runners, status=feedback.status)
    from etdeploy.units import format_bytes

    manifest = made.manifest
    runner_text = ", ".join(f"{r.abi} ({r.kind})" for r in manifest.runners)
    note(f"{len(manifest.samples)} sample(s), runners: {runner_text}")
    console.print(
        f"bundle: {made.path} ({format_bytes(made.size_bytes)} in {len(manifest.files)} files); "
        f"run it with: etdeploy run --bundle {made.path} -d DEVICE",
        highlight=False,
        soft_wrap=True,
    )

"""`etdeploy runner build`: build (or find in the cache) the C++ runner bundle."""

from __future__ import annotations

import typer

from etdeploy.cli._app import app, err_console, render_error
from etdeploy.errors import EtdeployError

runner_app = typer.Typer(
    name="runner",
    help="The C++ runner that executes .pte programs on a device.",
    no_args_is_help=True,
)
app.add_typer(runner_app, name="runner")


@runner_app.command("build")
def runner_build_command(
    abi: str = typer.Option(
        "host",
        "--abi",
        help="host (this machine); arm64-v8a (the NDK build when ANDROID_NDK and "
        "EXECUTORCH_ANDROID_PREFIX are set, else the self-contained arm64 bundle); aarch64 "
        "(that arm64 bundle, for arm64 Linux); x86_64 (Android, needs the NDK).",
    ),
    rebuild: bool = typer.Option(False, "--rebuild", help="Build even when the cache has it."),
    kernels: list[str] = typer.Option([], "--kernels", help="Extra kernel libraries, comma-separated or repeated: quantized, llm (a source install's LLM custom ops), or the path of a kernel library (.so, .dylib, .a)."),
    backends: str = typer.Option("xnnpack", "--backends", help="Delegates to link, comma-separated: xnnpack (default), openvino, qnn, ...; none for none."),
) -> None:  # fmt: skip
    """Build the runner for ABI and print the bundle directory (cached after the first build)."""
    from etdeploy.runner_build import ensure_runner

    extra = [k.strip() for item in kernels for k in item.split(",") if k.strip()]
    chosen = (
        [] if backends.strip() == "none" else [b.strip() for b in backends.split(",") if b.strip()]
    )

    def progress(message: str) -> None:
        err_console.print(f"[dim]{message}[/]", highlight=False, soft_wrap=True)

    # The shared `command` decorator registers on the root app; a sub-app's
    # command translates errors the same way here.
    try:
        bundle = ensure_runner(
            abi, rebuild=rebuild, progress=progress, kernels=extra, backends=chosen
        )
    except EtdeployError as exc:
        render_error(exc)
        raise typer.Exit(exc.exit_code) from None
    if not bundle.fresh:
        progress(f"cached ({bundle.kind} {bundle.abi}, key {bundle.key[:16]})")
    typer.echo(str(bundle.directory))

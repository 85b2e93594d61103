"""`etdeploy runner build`: build (or find in the cache) the C++ runner bundle."""

from __future__ import annotations

import typer

from etdeploy.cli._app import app, examples_epilog, note, plain_text, with_global_flags

runner_app = typer.Typer(
    name="runner",
    help=plain_text("The C++ runner that executes .pte programs on a device."),
    no_args_is_help=True,
)
app.add_typer(runner_app, name="runner")


def runner_build_command(
    abi: str = typer.Option(
        "host",
        "--abi",
        metavar="ABI",
        help="host (this machine); arm64-v8a (the NDK build when ANDROID_NDK and "
        "EXECUTORCH_ANDROID_PREFIX are set, else the self-contained arm64 bundle); aarch64 "
        "(that arm64 bundle, for arm64 Linux); x86_64 (Android, needs the NDK).",
    ),
    rebuild: bool = typer.Option(False, "--rebuild", help="Build even when the cache has it."),
    kernels: list[str] = typer.Option([], "--kernels", metavar="NAME|PATH", help="Extra kernel libraries, comma-separated or repeated: quantized, llm (a source install's LLM custom ops), or the path of a kernel library (.so, .dylib, .a)."),
    backends: str = typer.Option("xnnpack", "--backends", metavar="NAMES", help="Delegates to link, comma-separated: xnnpack (default), openvino, qnn, ...; none for none."),
) -> None:  # fmt: skip
    """Build the runner for ABI and print the bundle directory (cached after the first build)."""
    from etdeploy.cli._feedback import Feedback
    from etdeploy.runner_build import ensure_runner

    extra = [k.strip() for item in kernels for k in item.split(",") if k.strip()]
    chosen = (
        [] if backends.strip() == "none" else [b.strip() for b in backends.split(",") if b.strip()]
    )
    # Configure, compile, collect: each a stage with its elapsed time (a cold
    # build takes minutes), live in a terminal, timestamped lines in a log.
    with Feedback() as feedback:
        feedback.status(f"looking for the {abi} runner in the cache")
        bundle = ensure_runner(
            abi, rebuild=rebuild, progress=feedback.status, kernels=extra, backends=chosen
        )
    if not bundle.fresh:
        note(f"cached ({bundle.kind} {bundle.abi}, key {bundle.key[:16]})")
    typer.echo(str(bundle.directory))


runner_app.command(
    "build",
    epilog=examples_epilog(
        (
            "etdeploy runner build                      # this machine",
            "etdeploy runner build --abi arm64-v8a      # an arm64 phone",
            "etdeploy runner build --kernels quantized --backends xnnpack",
        )
    ),
)(with_global_flags(runner_build_command))

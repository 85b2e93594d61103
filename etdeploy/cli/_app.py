"""The app object, error translation and the shared console."""

from __future__ import annotations

import functools
import logging
import sys
import traceback
from collections.abc import Callable
from typing import Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from etdeploy.errors import EXIT_INFRA, EtdeployError

app = typer.Typer(
    name="etdeploy",
    help="Build an ExecuTorch .pte, run it on a device, and check it against eager PyTorch.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# Results go to stdout; progress, warnings and errors to stderr so `--json -` pipes.
console = Console()
err_console = Console(stderr=True)

_state = {"verbose": False}

F = TypeVar("F", bound=Callable[..., Any])


def is_verbose() -> bool:
    return _state["verbose"]


@app.callback()
def _root(
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Show full tracebacks and logs."),
) -> None:
    _state["verbose"] = verbose


def render_error(exc: EtdeployError) -> None:
    """One line and a hint; the full trace and log only with --verbose."""
    # Messages name TOML tables ([devices.pixel8]) and log text: never markup.
    err_console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
    if exc.hint:
        err_console.print(f"[dim]hint:[/] {escape(exc.hint)}", highlight=False, soft_wrap=True)
    if is_verbose():
        if exc.log:
            err_console.print(exc.log, markup=False, highlight=False)
        err_console.print("".join(traceback.format_exception(exc)), markup=False, highlight=False)
    elif exc.log:
        tail = exc.log.strip().splitlines()[-5:]
        for line in tail:
            err_console.print(f"  | {line}", markup=False, highlight=False)


def command(name: str | None = None, **kwargs: Any) -> Callable[[F], F]:
    """Register a command whose EtdeployErrors become one line + exit code."""

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kw: Any) -> Any:
            try:
                return fn(*args, **kw)
            except EtdeployError as exc:
                render_error(exc)
                raise typer.Exit(exc.exit_code) from None
            except KeyboardInterrupt:
                err_console.print("[bold red]interrupted[/]")
                raise typer.Exit(130) from None

        app.command(name, **kwargs)(wrapper)
        return fn

    return decorate


# Libraries' import-time chatter on stderr (torch's pytree deprecation notice,
# torchao's CUDA-only extensions it cannot load on a CPU build) says nothing about
# the user's run and buries our one-line errors; real errors still show.
_QUIET_LOGGERS = ("torch.utils._pytree", "torchao")


def format_ms(value: float | None) -> str:
    """A latency in milliseconds, as µs below one: "3.9 µs", "0.21 ms" would hide digits."""
    if value is None:
        return "-"
    return f"{value * 1000:.1f} µs" if value < 1 else f"{value:.2f} ms"


def main() -> None:
    for name in _QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    try:
        app()
    except SystemExit:
        raise
    except Exception as exc:  # a bug of ours: say so plainly, keep the trace available
        if is_verbose() or "--verbose" in sys.argv or "-v" in sys.argv:
            raise
        err_console.print(f"[bold red]internal error:[/] {type(exc).__name__}: {exc}")
        err_console.print("[dim]hint:[/] rerun with --verbose and report the traceback")
        # Not the user's input, not a check: the tool itself failed.
        sys.exit(EXIT_INFRA)

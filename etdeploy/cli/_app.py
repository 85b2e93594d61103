"""The app object, the shared consoles, the global flags, error translation and
the `--json PATH|-` convention every command shares."""

from __future__ import annotations

import copy
import functools
import inspect
import logging
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any, TypeVar

import typer
from rich.console import Console, ConsoleDimensions
from rich.markup import escape
from typer.core import TyperGroup
from typer.models import ParameterInfo

import etdeploy
from etdeploy.build_options import QUANTIZATIONS
from etdeploy.cli._exit import EXIT_OUTPUT_CLOSED, flush_or_closed, is_closed_pipe, output_closed
from etdeploy.errors import EXIT_BAD_INPUT, EXIT_INFRA, EtdeployError, InfraError, UsageError
from etdeploy.interrupts import exit_code_of, signal_name, terminate_as_interrupt

# Without a terminal (a CI log, `| tee`) rich would wrap and cut at 80 columns,
# truncating the very numbers etdeploy exists to report ("1.25e-…"). Tables take
# only the width their content needs, so a wide console never pads anything;
# it only stops cutting.
PIPED_WIDTH = 4096
# Help is panels that fill the width: piped, a width that keeps every word whole.
PIPED_HELP_WIDTH = 120


def _usage_error(exc: typer.TyperException) -> int:
    """A usage error click or typer found (an unknown option, a value out of its
    range, a missing argument) as every other error is told: one `error:` line, a
    `hint:` line, exit 2, instead of typer's boxed panel under the usage."""
    message = " ".join(exc.format_message().split())
    ctx = getattr(exc, "ctx", None)
    command = ctx.command_path if ctx is not None else "etdeploy"
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    err_console.print(
        f"[dim]hint:[/] `{escape(command)} --help` lists its options and what they take",
        highlight=False,
        soft_wrap=True,
    )
    return EXIT_BAD_INPUT


class _EtdeployGroup(TyperGroup):
    """The root command: click runs it in its non-standalone mode (click's documented
    way for a program to handle what it raises: click.palletsprojects.com, "Exception
    Handling and Exit Codes", read 2026-12-05), and etdeploy ends the process itself:
    a usage error as one line and a hint, a closed output pipe quietly
    (etdeploy.cli._exit), every other status as click would."""

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: object,
    ) -> object:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, **extra)
        try:
            status = super().main(args, prog_name, complete_var, False, **extra)
        except typer.TyperException as exc:  # click's exceptions, as typer vendors click
            if type(exc).__name__ == "NoArgsIsHelpError":
                status = exc.exit_code  # `etdeploy` alone: the help is shown already
            else:
                status = _usage_error(exc)
        except typer.Abort:
            err_console.print("[bold red]aborted[/]")
            status = 1
        except OSError as exc:
            if not is_closed_pipe(exc):
                raise
            status = output_closed()
        # A command returns None (0) or exits with a status (typer.Exit: its int).
        code = status if isinstance(status, int) else 0
        if not flush_or_closed():
            code = EXIT_OUTPUT_CLOSED
        sys.exit(code)


app = typer.Typer(
    cls=_EtdeployGroup,
    name="etdeploy",
    help="Build an ExecuTorch .pte, run it on a device, and check it against eager PyTorch.",
    no_args_is_help=True,
    # typer's --install-completion / --show-completion (bash, zsh, fish, PowerShell).
    add_completion=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
    rich_markup_mode="rich",
)


class _Console(Console):
    """A rich Console that is as wide as its content when it is not a terminal.

    rich asks every standard stream for a terminal size (and reads COLUMNS), so
    `etdeploy run | tee log` typed in an 80-column terminal would still cut at 80;
    the stream this console writes to is what decides here.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # No ":name:" emoji codes: a path or a model name is printed as written, and
        # rich's emoji table is not imported for it (~0.002 s of every command).
        kwargs.setdefault("emoji", False)
        super().__init__(*args, **kwargs)
        # rich also takes its width from COLUMNS, which a CI runner or a parent
        # shell may export (80): a log is still cut nowhere. A width given here wins.
        self._width_given = kwargs.get("width") is not None

    @property
    def size(self) -> ConsoleDimensions:
        dims = super().size
        if not self._width_given and not self.is_terminal:
            return ConsoleDimensions(PIPED_WIDTH, dims.height)
        return dims

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        Console.size.fset(self, new_size)  # type: ignore[attr-defined]

    @property
    def file(self) -> IO[str]:
        # While a build diverts torch's prints (etdeploy.library_output), etdeploy's
        # own output still reaches the real stream.
        stream = super().file
        passthrough = getattr(stream, "etdeploy_passthrough", None)
        if passthrough is None:
            return stream
        # Behind a live display the real stream is itself behind rich's proxy.
        return getattr(passthrough, "rich_proxied_file", passthrough)  # type: ignore[no-any-return]

    @file.setter
    def file(self, new_file: IO[str]) -> None:
        Console.file.fset(self, new_file)  # type: ignore[attr-defined]

    def on_broken_pipe(self) -> None:
        """rich's hook for a reader that has gone (its default exits 1, which says a
        check failed here): quiet, with etdeploy.cli._exit's status."""
        self.quiet = True
        raise SystemExit(output_closed(self.file))


# Results go to stdout; progress, warnings and errors to stderr so `--json -` pipes.
console: Console = _Console()
err_console: Console = _Console(stderr=True)

_state = {"verbose": False, "quiet": False}

F = TypeVar("F", bound=Callable[..., object])

# Shown under "Global options" in every command's help: accepted before or after
# the subcommand (`etdeploy -v run ...` and `etdeploy run ... -v`).
GLOBAL_PANEL = "Global options"


def is_verbose() -> bool:
    return _state["verbose"]


def is_quiet() -> bool:
    return _state["quiet"]


def _set_globals(verbose: bool, quiet: bool) -> None:
    _state["verbose"] = _state["verbose"] or verbose
    _state["quiet"] = _state["quiet"] or quiet


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"etdeploy {etdeploy.__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Show full tracebacks, and torch's and executorch's own logs.", rich_help_panel=GLOBAL_PANEL),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress lines or notes on stderr; results, warnings and errors still print.", rich_help_panel=GLOBAL_PANEL),
    version: bool = typer.Option(False, "--version", help="Print etdeploy's version and exit.", is_eager=True, callback=_show_version, rich_help_panel=GLOBAL_PANEL),
) -> None:  # fmt: skip
    """Build an ExecuTorch .pte, run it on a device, and check it against eager PyTorch.

    Exit codes: 0 all checks pass, 1 a check failed (numerics, size), 2 bad input
    or usage, 3 device, transport or runner failure.
    """
    # Each invocation starts from its own flags (CliRunner runs many in one process);
    # the command's own -v/-q, after the subcommand, add to these.
    _state["verbose"], _state["quiet"] = verbose, quiet


def render_error(exc: EtdeployError) -> None:
    """One line and a hint; the full trace and log only with --verbose.

    A device's or runner's log explains an infrastructure failure, so its last
    lines are shown with it; torch's output around a model error is noise to
    everyone but the model's author, so it waits for --verbose and etdeploy's
    line stays the last one read.
    """
    # Messages name TOML tables ([devices.pixel8]) and log text: never markup.
    err_console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
    if exc.hint:
        err_console.print(f"[dim]hint:[/] {escape(exc.hint)}", highlight=False, soft_wrap=True)
    if is_verbose():
        if exc.log:
            err_console.print(exc.log, markup=False, highlight=False, soft_wrap=True)
        err_console.print(
            "".join(traceback.format_exception(exc)), markup=False, highlight=False, soft_wrap=True
        )
    elif exc.log and isinstance(exc, InfraError):
        tail = exc.log.strip().splitlines()[-5:]
        for line in tail:
            err_console.print(f"  | {line}", markup=False, highlight=False, soft_wrap=True)


def _global_parameters() -> list[inspect.Parameter]:
    kind = inspect.Parameter.KEYWORD_ONLY
    return [
        inspect.Parameter(
            "_etdeploy_verbose", kind, annotation=bool,
            default=typer.Option(False, "--verbose", "-v", help="Show full tracebacks and torch's logs.", rich_help_panel=GLOBAL_PANEL),
        ),
        inspect.Parameter(
            "_etdeploy_quiet", kind, annotation=bool,
            default=typer.Option(False, "--quiet", "-q", help="No progress lines or notes.", rich_help_panel=GLOBAL_PANEL),
        ),
    ]  # fmt: skip


def examples_epilog(examples: Sequence[str]) -> str:
    """The "Examples" section at the foot of a command's help: one per line, as typed."""
    lines = "\n".join(f"  [bold]{escape(e)}[/]" for e in examples)
    return f"[b]Examples[/]\n\n{lines}"


def plain_text(text: str) -> str:
    """Help text as written: the help is rendered with rich markup (for the examples'
    bold), so a bracketed word such as `[release]` (a TOML table) would be taken for
    a style and dropped."""
    return escape(text)


def _plain_help(parameter: inspect.Parameter) -> inspect.Parameter:
    """The parameter with its help (typer.Option's or typer.Argument's) as written."""
    declared = parameter.default
    if not isinstance(declared, ParameterInfo) or not declared.help:
        return parameter
    shown = copy.copy(declared)
    shown.help = plain_text(declared.help)
    return parameter.replace(default=shown)


def with_global_flags(fn: F) -> Callable[..., object]:
    """`fn` with -v/--verbose and -q/--quiet added to its parameters, and its
    EtdeployErrors turned into one line, a hint and the exit code."""
    signature = inspect.signature(fn, eval_str=True)

    @functools.wraps(fn)
    def wrapper(*args: object, **kw: object) -> object:
        _set_globals(
            bool(kw.pop("_etdeploy_verbose", False)), bool(kw.pop("_etdeploy_quiet", False))
        )
        try:
            return fn(*args, **kw)
        except EtdeployError as exc:
            render_error(exc)
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt as exc:
            # Ctrl-C, or SIGTERM (etdeploy.interrupts): everything unwound on the way.
            err_console.print(f"[bold red]interrupted[/] by {signal_name(exc)}")
            raise typer.Exit(exit_code_of(exc)) from None
        except OSError as exc:
            # Here, before typer's own handler (which exits 1, "a check failed").
            if not is_closed_pipe(exc):
                raise
            raise typer.Exit(output_closed()) from None

    written = inspect.getdoc(fn)
    if written:
        # What typer shows as the command's help, when no help= is given.
        wrapper.__doc__ = plain_text(written)
    own = [_plain_help(p) for p in signature.parameters.values()]
    params = [*own, *_global_parameters()]
    wrapper.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {
        **{p.name: p.annotation for p in params},
        "return": signature.return_annotation,
    }
    return wrapper


def command(
    name: str | None = None,
    *,
    examples: Sequence[str] = (),
    group: typer.Typer | None = None,
    **kwargs: Any,
) -> Callable[[F], F]:
    """Register a command (of `group`, a subcommand group such as `farm`; else
    top-level): global flags after the subcommand too, examples in its help, and
    EtdeployErrors as one line + exit code."""

    def decorate(fn: F) -> F:
        if kwargs.get("help"):
            kwargs["help"] = plain_text(kwargs["help"])
        if examples:
            kwargs.setdefault("epilog", examples_epilog(examples))
        (group or app).command(name, **kwargs)(with_global_flags(fn))
        return fn

    return decorate


# -- --json PATH | - -------------------------------------------------------------------

JSON_HELP = "Write the {what} document ({schema}) to PATH, or to stdout with -."


def json_to_stdout(target: str | None) -> bool:
    return target == "-"


def check_json_target(target: str | None) -> None:
    """Refuse `--json --pte`-style mistakes before anything runs: click hands the
    next word to --json even when it is an option."""
    if target is not None and target != "-" and target.startswith("-"):
        raise UsageError(
            f"--json takes PATH or -, not {target!r}",
            "write --json - to print the document, or --json result.json to save it",
        )


def emit_json(document: object, target: str) -> None:
    """`--json -`: the document alone on stdout; `--json PATH`: written atomically."""
    from etdeploy.atomic import json_text

    text = json_text(document)
    if target == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    from etdeploy.atomic import atomic_write

    path = Path(target)
    try:
        atomic_write(path, text.encode("utf-8"))
    except OSError as exc:
        raise UsageError(
            f"cannot write {path}: {exc.strerror or exc}",
            "check the --json path (its folder must be writable), or use --json - for stdout",
        ) from None


def note(text: str) -> None:
    """A dim line on stderr that --quiet silences: where settings came from, what was started."""
    if not is_quiet():
        err_console.print(f"[dim]{escape(text)}[/]", highlight=False, soft_wrap=True)


# Libraries' import-time chatter on stderr (torch's pytree deprecation notice,
# torchao's CUDA-only extensions it cannot load on a CPU build) says nothing about
# the user's run and buries our one-line errors; real errors still show.
_QUIET_LOGGERS = ("torch.utils._pytree", "torchao")

# `-q` was --quantize's short flag before it became --quiet; an old command line
# gets told so instead of click's "unexpected extra argument".
_QUANTIZE_VALUES = QUANTIZATIONS


def _old_quantize_flag(argv: Sequence[str]) -> bool:
    return any(
        a == "-q" and i + 1 < len(argv) and argv[i + 1] in _QUANTIZE_VALUES
        for i, a in enumerate(argv)
    )


def _configure_help_width() -> None:
    """Piped help at PIPED_HELP_WIDTH. typer reads TERMINAL_WIDTH when it first imports
    its rich_utils, which it does only to print help or a usage error: said through
    the environment, so a run that prints neither never imports it (rich_utils brings
    rich's markdown, pygments and traceback: about 0.1 s of every start-up)."""
    if not sys.stdout.isatty():
        os.environ.setdefault("TERMINAL_WIDTH", str(PIPED_HELP_WIDTH))


def main() -> None:
    for name in _QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    _configure_help_width()
    argv = sys.argv[1:]
    if _old_quantize_flag(argv):
        err_console.print("[bold red]error:[/] -q is --quiet; quantization is --quantize")
        err_console.print("[dim]hint:[/] write --quantize int8 (or --quantize int8-dynamic)")
        sys.exit(EXIT_BAD_INPUT)
    verbose_flag = "--verbose" in argv or "-v" in argv
    try:
        # The name a user types, also under `python -m etdeploy`; SIGTERM unwinds
        # as Ctrl-C does.
        with terminate_as_interrupt():
            app(prog_name="etdeploy")
    except SystemExit:
        raise
    except KeyboardInterrupt as exc:  # before or after a command's own handling
        err_console.print(f"[bold red]interrupted[/] by {signal_name(exc)}")
        sys.exit(exit_code_of(exc))
    except Exception as exc:  # a bug of ours: say so plainly, keep the trace available
        if is_verbose() or verbose_flag:
            raise
        err_console.print(f"[bold red]internal error:[/] {type(exc).__name__}: {exc}")
        err_console.print("[dim]hint:[/] rerun with --verbose and report the traceback")
        # Not the user's input, not a check: the tool itself failed.
        sys.exit(EXIT_INFRA)

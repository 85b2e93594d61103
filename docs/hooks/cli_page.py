"""reference/cli.md and reference/exit-codes.md, read from the typer app and
etdeploy/errors.py.

Every command, subcommand, argument and option of `etdeploy` as its `--help` shows
it, walked from the click command typer builds; run's defaults come from
etdeploy.settings (its options default to "not given" so the file can fill them).
"""

from __future__ import annotations

import functools
import inspect
import re
import signal
from collections.abc import Iterator
from typing import Any

from pagetext import code, docstring, first_sentence, source_path, table, toml_value
from rich.text import Text

from etdeploy import errors, settings
from etdeploy.cli._exit import EXIT_OUTPUT_CLOSED

GLOBAL_FLAGS = ("--verbose", "--quiet", "--help")


@functools.cache
def root_command() -> Any:
    import typer.main

    from etdeploy.cli import app

    return typer.main.get_command(app)


def commands() -> Iterator[tuple[str, Any]]:
    """("etdeploy run", the command) for every command and subcommand, in help order."""

    def walk(path: str, command: Any) -> Iterator[tuple[str, Any]]:
        subcommands = getattr(command, "commands", None)
        if subcommands is None:
            yield path, command
            return
        if path != "etdeploy" and command.callback is not None and command.params:
            yield path, command
        for name, sub in subcommands.items():
            if not getattr(sub, "hidden", False):
                yield from walk(f"{path} {name}", sub)

    yield from walk("etdeploy", root_command())


def command_options(path: str) -> dict[str, Any]:
    """The options of `etdeploy PATH` by each of their flags."""
    for name, command in commands():
        if name == f"etdeploy {path}":
            return {flag: p for p in command.params for flag in (*p.opts, *p.secondary_opts)}
    raise LookupError(f"no command etdeploy {path}")


def plain(text: str | None) -> str:
    """Help text as `--help` shows it: rich markup rendered to plain text."""
    return Text.from_markup(text or "").plain.strip()


def _flags(param: Any) -> str:
    shown = "/".join(param.opts)
    if param.secondary_opts:
        shown += "/" + "/".join(param.secondary_opts)
    if param.metavar and not getattr(param, "is_flag", False):
        shown += f" {param.metavar}"
    return code(shown)


def _default(param: Any, run_defaults: dict[str, Any]) -> str:
    if param.name in run_defaults:
        return toml_value(run_defaults[param.name])
    default = param.default
    if default is None or default == () or default == [] or callable(default):
        return ""
    return toml_value(default)


def _usage(path: str, command: Any) -> str:
    context = command.context_class(command, info_name=path)
    return " ".join((path, *command.collect_usage_pieces(context)))


def _command_section(path: str, command: Any) -> str:
    # run's and build's options are etdeploy.settings' fields, defaulting to "not given".
    derived = path in ("etdeploy run", "etdeploy build")
    run_defaults = {d.name: d.applied_default for d in settings.declared()} if derived else {}
    help_text = plain(command.help)
    parts = [f"## `{path}`\n", help_text + "\n", "    " + _usage(path, command) + "\n"]
    arguments = [p for p in command.params if p.param_type_name == "argument"]
    if arguments:
        rows = [
            [code(p.metavar or p.name.upper()), plain(getattr(p, "help", ""))] for p in arguments
        ]
        parts.append(table(["argument", "meaning"], rows))
    rows = []
    for p in command.params:
        if p.param_type_name != "option" or set(p.opts) & set(GLOBAL_FLAGS) or p.hidden:
            continue
        panel = getattr(p, "rich_help_panel", None) or ""
        rows.append([_flags(p), _default(p, run_defaults), panel, plain(p.help)])
    if rows:
        parts.append(table(["option", "default", "group", "meaning"], rows))
    examples = plain(command.epilog)
    if examples:
        body = "\n".join(
            "    " + line.strip() for line in examples.splitlines()[1:] if line.strip()
        )
        parts.append("Examples:\n\n" + body + "\n")
    return "\n".join(parts)


def render_cli() -> str:
    root = root_command()
    rows = [[_flags(p), plain(p.help)] for p in root.params if not p.hidden]
    parts = [
        "# Command-line reference\n",
        "*Generated from the code at every build of this site; do not edit.* What "
        "`etdeploy COMMAND --help` prints, every command on one page. "
        "`--verbose`/`-v`, `--quiet`/`-q` and `--help`/`-h` work on every command, before or "
        "after its name. A run setting's default is shown where etdeploy.toml can set it "
        "(see the [configuration reference](configuration.md)); a flag wins over the file.\n",
        "## `etdeploy`\n",
        plain(root.help) + "\n",
        table(["option", "meaning"], rows),
    ]
    parts.extend(_command_section(path, command) for path, command in commands())
    return "\n".join(parts)


# -- exit codes -----------------------------------------------------------------------------


# The signals etdeploy unwinds on (etdeploy/interrupts.py) and what each exit means.
SIGNAL_EXITS = {signal.SIGINT: "interrupted (Ctrl-C)", signal.SIGTERM: "stopped (SIGTERM)"}


def exit_codes() -> dict[int, str]:
    """etdeploy's exit codes by their constants: 0 1 2 3 from etdeploy/errors.py,
    128 + the signal for a run stopped by SIGINT or SIGTERM (etdeploy/interrupts.py),
    and 128 + SIGPIPE for an output whose reader went away (etdeploy/cli/_exit.py)."""
    names = {value: name for name, value in vars(errors).items() if name.startswith("EXIT_")}
    for signum in SIGNAL_EXITS:
        names[128 + signum] = f"128 + {signum.name}"
    names[EXIT_OUTPUT_CLOSED] = "EXIT_OUTPUT_CLOSED (128 + SIGPIPE)"
    return dict(sorted(names.items()))


OUTPUT_CLOSED_MEANING = (
    "the reader of its output went away (`etdeploy run ... | head -2`): nothing more is "
    "written and nothing is said; not a failed check (a shell reports the same for a "
    "program a closed pipe ended)"
)


def code_meanings() -> dict[int, str]:
    """What errors.py's docstring says each code means ("0 all checks pass, 1 ...")."""
    sentence = docstring(errors).split("Exit codes", 1)[1].split(":", 1)[1]
    found = re.findall(r"(\d+) ([^,]+?)(?:,|\.$)", " ".join(sentence.split()))
    return {int(number): text.strip() for number, text in found}


def error_kinds() -> list[type[errors.EtdeployError]]:
    """EtdeployError and every kind of it errors.py defines."""
    return [
        cls
        for _, cls in inspect.getmembers(errors, inspect.isclass)
        if issubclass(cls, errors.EtdeployError)
    ]


def _signal_meaning(value: int) -> str:
    if value == EXIT_OUTPUT_CLOSED:
        return OUTPUT_CLOSED_MEANING
    return next(text for signum, text in SIGNAL_EXITS.items() if 128 + signum == value)


def render_exit_codes() -> str:
    kinds = error_kinds()
    meanings = code_meanings()
    rows = []
    for value, name in exit_codes().items():
        raised = [k for k in kinds if k.exit_code == value]
        rows.append(
            [
                code(value),
                code(name),
                meanings.get(value) or _signal_meaning(value),
                "; ".join(f"{code(k.__name__)}: {first_sentence(docstring(k))}" for k in raised),
            ]
        )
    return "\n".join(
        [
            "# Exit codes\n",
            "*Generated from the code at every build of this site; do not edit.* The codes "
            f"are the constants of {source_path(errors)}; each error kind the core raises "
            "carries its code, and the command line turns it into one line, a hint and that "
            "exit status (`--verbose` adds the trace). 130 and 143 are a command stopped by "
            "Ctrl-C or SIGTERM: the runner is killed, the device cleaned and released, the "
            "result written with an `Interruption` error (the farm prints the `--resume` "
            "command).\n",
            table(["code", "constant", "means", "raised as"], rows),
            "What each code covers in practice, with examples, is in the "
            "[command line guide](../guides/command-line.md#exit-codes).\n",
        ]
    )

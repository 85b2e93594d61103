"""Command-line options made from the settings' declarations (etdeploy.settings), so a
setting's flag, help, metavar and panel are written once, beside its default and its
etdeploy.toml key.

`with_setting_options(fn, RunJob)` gives `fn` one keyword parameter per declared field
that has a flag; each arrives as None (or an empty list) when it was not given, so
etdeploy.settings.from_flags can lay the flags over the file and the defaults.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

import typer

from etdeploy.settings import Declared, RunSettings, declared


def option_parameter(entry: Declared) -> inspect.Parameter:
    """The typer option of one setting, defaulting to None: "not given"."""
    option = entry.option
    flags = list(option.flags)
    kind = entry.value_type
    if kind is bool:
        annotation: Any = bool
        if option.negatable and not option.inverted:
            long, *short = flags
            flags = [f"{long}/--no-{long.removeprefix('--')}", *short]
    elif entry.is_list:
        annotation = list[str]
    elif option.parse is not None:
        annotation = str  # parsed by the setting itself (a size, NAME=KIND)
    elif kind is Path:
        annotation = Path
    else:
        annotation = kind
    default = typer.Option(
        None,
        *flags,
        metavar=option.metavar,
        help=option.help,  # escaped once, where the command is declared (_app._plain_help)
        rich_help_panel=option.panel,
        show_default=False,
    )
    return inspect.Parameter(
        entry.name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation
    )


def with_setting_options(
    fn: Callable[..., Any],
    cls: type[RunSettings] = RunSettings,
    *,
    only: Collection[str] | None = None,
) -> Callable[..., Any]:
    """`fn(**own, settings=...)` with an option for every setting of `cls` that has a
    flag (or only those named in `only`); the settings given arrive in `fn`'s `settings`
    keyword as a dict. `fn`'s arguments come first in its help, then the settings, then
    its own options."""
    signature = inspect.signature(fn, eval_str=True)
    own = [p for p in signature.parameters.values() if p.name != "settings"]
    arguments = [p for p in own if isinstance(p.default, typer.models.ArgumentInfo)]
    added = [
        option_parameter(entry)
        for entry in declared(cls)
        if entry.option.flags and (only is None or entry.name in only)
    ]
    names = {p.name for p in added}

    @functools.wraps(fn)
    def wrapper(*args: Any, **kw: Any) -> Any:
        given = {name: kw.pop(name) for name in list(kw) if name in names}
        return fn(*args, settings=given, **kw)

    # typer passes every parameter by keyword; keyword-only lets them come in any order.
    params = [
        p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
        for p in (*arguments, *added, *(p for p in own if p not in arguments))
    ]
    # What typer (inspect.signature) reads; a function type does not declare it.
    wrapper.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {
        **{p.name: p.annotation for p in params},
        "return": signature.return_annotation,
    }
    return wrapper

"""Command-line options made from the settings' declarations (etdeploy.declaration), so a
setting's flag, help, default, metavar and panel are written once, beside its etdeploy.toml
key.

`with_setting_options(fn, RunJob)` gives `fn` one keyword parameter per declared field
that has a flag; each arrives as None (or an empty list) when it was not given, so
etdeploy.settings.from_flags can lay the flags over the file and the defaults.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Collection, Iterator, Sequence
from pathlib import Path
from typing import ParamSpec, TypeVar

import typer

from etdeploy.declaration import PANELS, Declared, declared
from etdeploy.settings import RunSettings

P = ParamSpec("P")
R = TypeVar("R")


def option_parameter(entry: Declared, repeatable: bool = False) -> inspect.Parameter:
    """The typer option of one setting, defaulting to None: "not given". A repeatable
    one takes the option several times (build -b xnnpack -b vulkan) and arrives as a list."""
    option = entry.option
    flags = list(option.flags)
    kind = entry.value_type
    help_text = entry.help
    annotation: object
    if repeatable or entry.is_list:
        annotation = list[str]
        if repeatable:
            help_text += " Repeat for several."
    elif kind is bool:
        annotation = bool
        if option.negatable and not option.inverted:
            long, *short = flags
            flags = [f"{long}/--no-{long.removeprefix('--')}", *short]
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
        help=help_text,  # escaped once, where the command is declared (_app._plain_help)
        rich_help_panel=option.panel,
        show_default=False,
    )
    return inspect.Parameter(
        entry.name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation
    )


def setting_help(cls: type, name: str) -> str:
    """The help of one declared setting, default included, for a command that takes it
    as an option of its own (release check's --iterations, clean's --lock-timeout)."""
    return next(entry.help for entry in declared(cls) if entry.name == name)


def _entries(classes: Sequence[type]) -> Iterator[Declared]:
    """The flagged settings of `classes`, each once, grouped by panel in the help's order
    (a panel's settings in their declaration order)."""
    seen: dict[str, Declared] = {}
    for cls in classes:
        for entry in declared(cls):
            if entry.option.flags:
                seen.setdefault(entry.name, entry)
    order = {panel: i for i, panel in enumerate(PANELS)}
    return iter(sorted(seen.values(), key=lambda e: order.get(e.option.panel or "", len(order))))


def with_setting_options(
    fn: Callable[P, R],
    cls: type | Sequence[type] = RunSettings,
    *,
    only: Collection[str] | None = None,
    repeatable: Collection[str] = (),
) -> Callable[..., R]:
    """`fn(**own, settings=...)` with an option for every setting of `cls` (a declared
    class, or several) that has a flag (or only those named in `only`); the settings
    given arrive in `fn`'s `settings` keyword as a dict. `fn`'s arguments come first in
    its help, then the settings, then its own options. A setting named in `repeatable`
    is taken several times and arrives as a list."""
    classes = (cls,) if isinstance(cls, type) else tuple(cls)
    signature = inspect.signature(fn, eval_str=True)
    own = [p for p in signature.parameters.values() if p.name != "settings"]
    arguments = [p for p in own if isinstance(p.default, typer.models.ArgumentInfo)]
    added = [
        option_parameter(entry, entry.name in repeatable)
        for entry in _entries(classes)
        if only is None or entry.name in only
    ]
    names = {p.name for p in added}

    @functools.wraps(fn)
    def wrapper(*args: object, **kw: object) -> R:
        given = {name: kw.pop(name) for name in list(kw) if name in names}
        call: Callable[..., R] = fn
        return call(*args, settings=given, **kw)

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

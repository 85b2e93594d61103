"""How a setting is declared once: a dataclass field whose metadata says how it is given.

A field made with `setting(default, help, ...)` carries an `Option`: its flags, its help,
its etdeploy.toml table and key, whether a farm job or a release variant may set it,
what a job bundle does with it, its range, and the value a run falls back to when it is
left unset. The command line (etdeploy.cli._settings), etdeploy.toml (etdeploy.config),
farm specs (etdeploy.farm.spec) and release specs (etdeploy.release.spec) read these
declarations (`declared(cls)`) and never list a setting again. The declarations
themselves are etdeploy.build_options.BuildOptions (what a program is built with) and
etdeploy.settings.RunSettings (everything else a run takes).

A help text says what a setting does, never its default: `Declared.help` adds the
default (the field's own, or the Option's `fallback`) where the help is shown.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from etdeploy.errors import UsageError
from etdeploy.units import parse_size

# What a setting's value may be in a TOML file: the types tomllib gives.
TomlType = type | tuple[type, ...]
# A given value (a flag's text, a TOML value) to the field's value; `where` names
# where it was written ("--localize-budget", "etdeploy.toml: run.localize_budget").
Parser = Callable[[object, str], object]
# A number a setting falls back to when it is left unset (None).
Fallback = int | float

# Panels of `etdeploy run --help`, in the order the help shows them.
DEVICE_PANEL = "Device"
MODEL_PANEL = "Model and build"
INPUTS_PANEL = "Inputs and reference"
TIMING_PANEL = "Timing and profiling"
VERIFY_PANEL = "Verification"
ACCURACY_PANEL = "Task accuracy"
LM_PANEL = "Language models (a Hugging Face causal-LM folder as MODEL)"
LOCALIZE_PANEL = "Localization"
PANELS = (DEVICE_PANEL, MODEL_PANEL, INPUTS_PANEL, TIMING_PANEL, VERIFY_PANEL, ACCURACY_PANEL,
          LM_PANEL, LOCALIZE_PANEL)  # fmt: skip

# What a job bundle (etdeploy.bundle) does with a setting, its Option's `scope`:
# JOB travels in the bundle and applies where it runs (iterations, tolerances...);
# MACHINE belongs to the machine that runs it (its device, runner, lock) and never
# travels; BUILD is spent making the bundle (the build, the inputs, the references),
# so a run of a bundle refuses it as a flag.
JOB, MACHINE, BUILD = "job", "machine", "build"


@dataclass(frozen=True)
class Option:
    """How a setting is given: on the command line, in etdeploy.toml, in a farm spec,
    in a release spec."""

    help: str
    #: Its flags, the long one first ("--iterations", "-n"); none: not a flag.
    flags: tuple[str, ...] = ()
    metavar: str | None = None
    panel: str | None = None
    #: The etdeploy.toml table that holds it ("run", "build", "verify"); None: no key.
    section: str | None = None
    #: Its key there, in a farm spec and in a release spec; None: the field's own name.
    key: str | None = None
    #: Whether a farm spec's [farm], model entries and [[farm.job]] may set it.
    farm: bool = False
    #: The [farm] list the farm crosses it over (farm.backends); a [[farm.job]] names one
    #: value under the setting's own key.
    farm_axis: str | None = None
    #: Whether a release variant ([release.variants.NAME]) may set it.
    release: bool = False
    #: Turns a given value into the field's value (sizes, NAME=KIND tables).
    parse: Parser | None = None
    #: The TOML types it accepts when `parse` takes more than the field's own type.
    toml: TomlType | None = None
    #: A path: in a file, relative to that file's folder.
    path: bool = False
    #: A boolean flag comes as --x/--no-x (else the flag alone turns it on).
    negatable: bool = True
    #: The flag turns the setting off (--no-cache sets use_cache to False).
    inverted: bool = False
    #: The range a number must be in: at least `low`, more than `above`, at most `high`.
    low: float | None = None
    above: float | None = None
    high: float | None = None
    #: A value to show in a hint ("10" for --iterations).
    example: str | None = None
    #: What a job bundle does with it: JOB, MACHINE or BUILD (see above).
    scope: str = JOB
    #: What a run uses when the setting is left unset (None): declared here, shown in
    #: the help from here, read by the code that applies it.
    fallback: Fallback | None = None


T = TypeVar("T")


def setting(default: T, help: str, **option: Any) -> T:
    """A dataclass field with its Option (see Option for the keywords)."""
    made: T = field(default=default, metadata={"option": Option(help, **option)})
    return made


def size_value(value: object, where: str) -> int:
    """A size setting's value: bytes, or "64MB"-style text."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise UsageError(f"{where}: expected a size such as 64MB, got {value!r}", f"fix {where}")
    return parse_size(value, what=where)


def strings_value(value: object, where: str) -> tuple[str, ...]:
    """A list of strings (a TOML array, or the values of a repeated flag)."""
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise UsageError(f"{where}: expected a list of strings, got {value!r}", f"fix {where}")
    items: list[str] = []
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise UsageError(f"{where}[{i}]: expected str, got {item!r}", f"fix {where}")
        items.append(item)
    return tuple(items)


def shown_value(value: object, size: bool = False) -> str:
    """A default as the help shows it: 1e-4, 0.9, 120, 64MiB, xnnpack."""
    if size and isinstance(value, int) and value and value % (1 << 20) == 0:
        return f"{value >> 20}MiB"
    if isinstance(value, float):
        if value and abs(value) < 1e-3:
            return re.sub(r"e-0*", "e-", f"{value:.0e}")
        return f"{value:g}"
    return str(value)


@dataclass(frozen=True)
class Declared:
    """One setting: its field, its Option and its resolved Python type."""

    name: str
    option: Option
    annotation: object
    default: object

    @property
    def key(self) -> str:
        return self.option.key or self.name

    @property
    def flag(self) -> str | None:
        return self.option.flags[0] if self.option.flags else None

    @property
    def spelled(self) -> str:
        """How an error names the setting: every spelling of its flag (--iterations / -n)."""
        return " / ".join(self.option.flags) or self.name

    @property
    def applied_default(self) -> object:
        """What a run uses when the setting is not given: the Option's fallback for a
        setting that defaults to unset (None), else the field's default."""
        return self.option.fallback if self.option.fallback is not None else self.default

    @property
    def shown_default(self) -> str | None:
        """The default the help shows: the applied default when it is a value (not None,
        an empty list or a switch)."""
        value = self.applied_default
        if value is None or isinstance(value, bool | tuple):
            return None
        return shown_value(value, size=self.option.parse is size_value)

    @property
    def help(self) -> str:
        """The help text with its default, as every help and reference page shows it."""
        shown = self.shown_default
        if shown is None:
            return self.option.help
        return f"{self.option.help.rstrip('.')} (default {shown})."

    @property
    def value_type(self) -> object:
        """The type without None: `float` for `float | None`."""
        return _without_none(self.annotation)

    @property
    def optional(self) -> bool:
        return _without_none(self.annotation) is not self.annotation

    @property
    def is_list(self) -> bool:
        return typing.get_origin(self.value_type) is tuple

    @property
    def toml_type(self) -> TomlType:
        """What a TOML file may give for it."""
        if self.option.toml is not None:
            return self.option.toml
        kind = self.value_type
        if self.is_list:
            return list
        if kind is float:
            return (int, float)
        if kind is Path:
            return str
        assert isinstance(kind, type), kind
        return kind

    def check_range(self, value: object, where: str) -> None:
        """A number within the setting's range, or a UsageError naming `where`."""
        option = self.option
        if isinstance(value, bool) or not isinstance(value, int | float):
            return
        if option.low is not None and value < option.low:
            bound = "at least 1" if option.low == 1 else f"{option.low:g} or more"
        elif option.above is not None and value <= option.above:
            bound = "positive" if option.above == 0 else f"more than {option.above:g}"
        elif option.high is not None and value > option.high:
            bound = f"between {option.low or 0:g} and {option.high:g}"
        else:
            return
        example = f"; e.g. {self.flag} {option.example}" if option.example and self.flag else ""
        told = option.help.rstrip(".")
        raise UsageError(f"{where} must be {bound}, got {value:g}", f"{told}{example}")

    def from_given(self, value: object, where: str, base: Path | None = None) -> object:
        """A value from a file (base: its folder) or a flag, as the field holds it."""
        converted = self._converted(value, where, base)
        self.check_range(converted, where)
        return converted

    def _converted(self, value: object, where: str, base: Path | None) -> object:
        if self.option.parse is not None:
            return self.option.parse(value, where)
        if self.is_list:
            items = strings_value(value, where)
            if base is not None and self.option.path:
                items = tuple(_relative_to(base, item) for item in items)
            return items
        kind = self.value_type
        if kind is Path:
            text = str(value)
            return Path(_relative_to(base, text) if base is not None else text)
        if kind is float and isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        return value


def _without_none(annotation: object) -> object:
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def _relative_to(base: Path, value: str) -> str:
    path = Path(value).expanduser()
    return value if path.is_absolute() else str(base / path)


def declared(cls: type) -> Iterator[Declared]:
    """Every field of the dataclass `cls` that carries an Option, in declaration order."""
    found = _DECLARED.get(cls)
    if found is None:
        # Worked out once a class: resolving its hints evaluates every annotation's text.
        found = _DECLARED[cls] = _declared(cls)
    return iter(found)


_DECLARED: dict[type, tuple[Declared, ...]] = {}


def _declared(cls: type) -> tuple[Declared, ...]:
    hints = typing.get_type_hints(cls)
    found = []
    for f in dataclasses.fields(cls):
        option = f.metadata.get("option")
        if isinstance(option, Option):
            default = f.default if f.default is not dataclasses.MISSING else None
            found.append(Declared(f.name, option, hints[f.name], default))
    return tuple(found)


def check_ranges(record: object) -> None:
    """Every flagged setting of a declared record within its range (its __post_init__)."""
    for entry in declared(type(record)):
        if entry.flag is not None:
            entry.check_range(getattr(record, entry.name), entry.spelled)


def expect_type(value: object, expected: TomlType, key: str, label: str) -> None:
    """A TOML value of the expected type, or a UsageError naming its key and file."""
    # bool is an int in Python; a boolean where a number belongs is a mistake.
    ok = False if isinstance(value, bool) and expected is not bool else isinstance(value, expected)
    if not ok:
        names = (
            expected.__name__
            if isinstance(expected, type)
            else " or ".join(t.__name__ for t in expected)
        )
        shown = "a table" if isinstance(value, dict) else repr(value)
        raise UsageError(f"{label}: {key}: expected {names}, got {shown}", f"fix {key} in {label}")

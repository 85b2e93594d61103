"""reference/farm-spec.md: the keys of a farm spec, read from etdeploy/farm/spec.py
and its device sources (etdeploy/farm/sources/).

[farm]'s own keys, a model entry's, [[farm.job]]'s, [[farm.exclude]]'s and a
source's are the key tables the spec parser checks against; defaults come from the
dataclasses the parser fills (FarmSpec, FarmJob, StfSource, StfFilter) and notes from
the comments the code gives their fields.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

from config_page import setting_type
from pagetext import code, docstring, field_notes, source_path, table, toml_value, type_name

from etdeploy import settings
from etdeploy.farm import exclude, spec
from etdeploy.farm.sources import stf

HEADER = ["key", "type", "default", "what the code says of it"]


def _defaults(*classes: type) -> tuple[dict[str, Any], dict[str, str]]:
    """Field defaults and notes of the dataclasses, the first class winning."""
    defaults: dict[str, Any] = {}
    notes: dict[str, str] = {}
    for cls in reversed(classes):
        for f in dataclasses.fields(cls):
            if f.default is not dataclasses.MISSING:
                defaults[f.name] = f.default
        notes.update(field_notes(cls))
    return defaults, notes


def _fits(value: Any, expected: type | tuple[type, ...]) -> bool:
    """Whether a dataclass default is also what the TOML key would hold (a parsed
    table, such as sources' tuple of sources, is not shown as a default)."""
    kinds = expected if isinstance(expected, tuple) else (expected,)
    return isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)


def _rows(keys: Mapping[str, Any], *classes: type) -> Iterator[list[str]]:
    defaults, notes = _defaults(*classes)
    for key, expected in keys.items():
        if key in spec.JOB_SETTING_TYPES:
            continue  # listed once, under job settings
        fits = key in defaults and _fits(defaults[key], expected)
        default = toml_value(defaults[key]) if fits else ""
        yield [code(key), type_name(expected), default, notes.get(key, "")]


def job_setting_rows() -> Iterator[list[str]]:
    """The settings a job takes: etdeploy run's (farm=True) and the farm's own."""
    defaults, notes = _defaults(spec.FarmJob)
    for key, entry in settings.farm_settings().items():
        where = (
            f"[{entry.option.section}] in etdeploy.toml"
            if entry.option.section
            else "no etdeploy.toml key"
        )
        yield [
            code(key),
            setting_type(entry),
            toml_value(entry.applied_default),
            f"as {code(entry.flag or key)} ({where}): {entry.option.help}",
        ]
    for key, expected in spec._FARM_JOB_KEYS.items():
        yield [code(key), type_name(expected), toml_value(defaults.get(key)), notes.get(key, "")]


def render() -> str:
    parts = [
        "# Farm spec reference\n",
        "*Generated from the code at every build of this site; do not edit.* A farm spec is "
        "a TOML file with `[farm]`, and the tables `etdeploy.toml` takes "
        f"({', '.join(code(f'[{s}]') for s in spec._SECTIONS if s != 'farm')}; see the "
        "[configuration reference](configuration.md) and the [device tables](devices.md)). "
        "The [farms guide](../guides/farms.md) shows how to use it. What the parser "
        f"({source_path(spec)}) says of a spec:\n",
        "\n".join("    " + line for line in docstring(spec).splitlines()) + "\n",
        "## Job settings\n",
        'Any of `[farm]`, a model entry of `farm.models` (`{model = "...", KEY = ...}`) and '
        "a `[[farm.job]]` entry takes these; the most specific wins.\n",
        table(HEADER, job_setting_rows()),
        "## [farm]\n",
        "Besides every job setting above:\n",
        table(HEADER, _rows(spec.FARM_KEYS, spec.FarmSpec)),
        "## [[farm.job]]\n",
        "One entry is a job per device it names (`device`, or `devices`, else farm.devices), "
        "beside the matrix; it replaces the matrix's cell of the same key. Besides every job "
        "setting:\n",
        table(HEADER, _rows(spec._ENTRY_KEYS)),
        "## [[farm.exclude]]\n",
        "A cell of the matrix is left out when it matches every key of a rule; a value is a "
        "name or a list of names.\n",
        table(["key"], ([code(k)] for k in exclude.EXCLUDE_KEYS)),
        "## [farm.sources.stf]\n",
        f"From {source_path(stf)}. " + " ".join(docstring(stf.StfSource).split()) + "\n",
        table(HEADER, _rows(stf._SOURCE_KEYS, stf.StfSource, stf.StfFilter)),
    ]
    return "\n".join(parts)

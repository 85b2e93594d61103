"""reference/configuration.md: every key of etdeploy.toml, read from the code.

[build], [run] and [verify] come from etdeploy.settings.declared() (each setting's
type, default, range, flag and help); [sizecheck] from etdeploy.config and the
`sizecheck` command's options; [limits] from etdeploy.sizecheck.limits. The device
tables and the farm spec have pages of their own (devices_page, farm_page).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from cli_page import command_options
from pagetext import code, source_path, table, toml_value, type_name

from etdeploy import config, settings
from etdeploy.sizecheck import limits
from etdeploy.units import format_bytes

INTRO = """\
# Configuration reference

*Generated from the code at every build of this site; do not edit.* The file is
`etdeploy.toml`, found in the current directory or the nearest parent (`--config
PATH` names another). Values are layered: a flag over the file over the defaults
below. A key the code does not know is an error naming it (exit 2), as is a value
of the wrong type or out of its range.
"""


def render() -> str:
    """The whole page."""
    parts = [INTRO, _sections_line()]
    for section in settings.SECTIONS:
        parts.append(_run_section(section))
    parts.append(_flag_only())
    parts.append(_sizecheck_section())
    parts.append(_limits_section())
    parts.append(_deliveries_section())
    return "\n".join(parts)


def _sections_line() -> str:
    return (
        "Sections: " + ", ".join(code(f"[{s}]") for s in _config_sections()) + ". "
        "`[devices.NAME]` tables are in the [device tables reference](devices.md), "
        "a farm spec's `[farm]` in the [farm spec reference](farm-spec.md).\n"
    )


def _config_sections() -> list[str]:
    """The sections etdeploy.toml takes, asked of the parser itself: a section it
    refuses names the ones it knows in its hint."""
    from etdeploy.errors import UsageError

    try:
        config.parse_config({"not-a-section": {}})
    except UsageError as exc:
        hint = exc.hint or ""
        return [name.strip() for name in hint.split(":", 1)[1].split(",")]
    raise AssertionError("etdeploy.config accepted an unknown section")


# -- [build], [run], [verify] ----------------------------------------------------------


def setting_type(entry: settings.Declared) -> str:
    """A setting's type as a reader of etdeploy.toml needs it."""
    option = entry.option
    kind = "list of str" if entry.is_list and option.toml is None else type_name(entry.toml_type)
    if entry.value_type is Path or (entry.is_list and option.path):
        kind += " (path, relative to the file)"
    if option.metavar == "SIZE":
        kind += ' (a size: "64MB" or bytes)'
    return kind


def setting_range(entry: settings.Declared) -> str:
    option = entry.option
    if option.high is not None:
        return f"{option.low or 0:g} to {option.high:g}"
    if option.low is not None:
        return f"≥ {option.low:g}"
    if option.above is not None:
        return f"> {option.above:g}"
    return ""


def setting_flags(entry: settings.Declared) -> str:
    option = entry.option
    if not option.flags:
        return ""
    long_flag, *short = option.flags
    shown = f"{long_flag} {option.metavar}" if option.metavar else long_flag
    if entry.value_type is bool and option.negatable and not option.inverted:
        shown = f"{long_flag}/--no-{long_flag[2:]}"
    return ", ".join(code(f) for f in (shown, *short))


def _setting_rows(entries: list[settings.Declared]) -> Iterator[list[str]]:
    for entry in entries:
        flags = setting_flags(entry)
        kind = setting_type(entry)
        bounds = setting_range(entry)
        yield [
            code(entry.key) + (f"<br>{flags}" if flags else ""),
            kind + (f", {bounds}" if bounds else ""),
            toml_value(entry.applied_default),
            "yes" if entry.option.farm else "no",
            entry.option.scope,
            entry.option.help,
        ]


HEADER = ["key and flag", "type and range", "default", "farm job", "bundle", "meaning"]


def _run_section(section: str) -> str:
    entries = [d for d in settings.declared() if d.option.section == section]
    return (
        f"## [{section}]\n\n"
        f"From `etdeploy.settings.RunSettings` ({source_path(settings)}), the one declaration "
        "of a run's settings. *farm job*: a farm spec's `[farm]`, model entries and "
        "`[[farm.job]]` take the key too. *bundle*: what a job bundle does with it "
        "(job: travels in it; machine: the running machine's; build: spent making it; "
        "[job bundles](../guides/bundles.md)). A default shown as – means unset: the value "
        "is then chosen as the meaning says.\n\n" + table(HEADER, _setting_rows(entries))
    )


def _flag_only() -> str:
    from etdeploy.pipeline.job import RunJob

    entries = [d for d in settings.declared(RunJob) if d.option.section is None]
    rows = [
        [
            setting_flags(e), toml_value(e.default), "yes" if e.option.farm else "no",
            e.option.scope, e.option.help,
        ]
        for e in entries
    ]  # fmt: skip
    return (
        "## Run settings without a key in etdeploy.toml\n\n"
        "Flags of `etdeploy run` only; a farm job takes the one marked *yes* under its "
        "own name.\n\n" + table(["flag", "default", "farm job", "bundle", "meaning"], rows)
    )


# -- [sizecheck] ------------------------------------------------------------------------


def sizecheck_flag(key: str) -> str:
    """The `sizecheck` flag a [sizecheck] key stands for: --KEY, or --KEY without its
    plural s (deliveries is --delivery)."""
    options = command_options("sizecheck")
    for flag in (f"--{key}", f"--{key[:-1]}", f"--{key[:-3]}y"):
        if flag in options:
            return flag
    raise LookupError(f"[sizecheck] {key} has no matching flag of etdeploy sizecheck")


def _sizecheck_section() -> str:
    options = command_options("sizecheck")
    rows = []
    for key, expected in config._SIZECHECK_KEYS.items():
        flag = sizecheck_flag(key)
        option = options[flag]
        rows.append([code(key), type_name(expected), code(flag), option.help or ""])
    return (
        "## [sizecheck]\n\n"
        f"Keys from {source_path(config)}; each stands for a flag of `etdeploy sizecheck` "
        "(the flag wins), whose help is the meaning. `run` and `farm` check a program "
        "against the same deliveries.\n\n"
        + table(["key", "type", "flag", "meaning (the flag's help)"], rows)
    )


# -- [limits] ---------------------------------------------------------------------------


LIMIT_HEADER = ["key", "what", "size", "edge", "measure", "severity", "source", "read on", "note"]


def _limits_section() -> str:
    rows = []
    for limit in limits.default_limits().values():
        rows.append(
            [
                code(limit.key),
                limit.label,
                format_bytes(limit.bytes),
                "exactly this fits" if limit.inclusive else "must be less",
                limit.measure,
                limit.severity,
                limit.source,
                limit.read_on,
                limit.note or "",
            ]
        )
    return (
        "## [limits]\n\n"
        f"The store limits etdeploy checks, from {source_path(limits)}: each with where it "
        'was read and when. A `[limits]` key replaces that figure (`"play.base" = "150MB"` '
        'or `[limits.play]` with `base = "150MB"`); the report then says it was '
        "overridden. *download*: the compressed download (deflate level 6, as bundletool "
        "estimates Play's); *raw*: uncompressed bytes. *limit*: over it is rejected; "
        "*conditional*: applies only under a condition etdeploy cannot see, so over it "
        "warns; *warning*: never rejects.\n\n" + table(LIMIT_HEADER, rows)
    )


def _deliveries_section() -> str:
    rows = []
    for name, (store, keys) in limits.DELIVERIES.items():
        default = "default" if limits.DEFAULT_DELIVERY.get(store) == name else ""
        rows.append([code(name), store, ", ".join(code(k) for k in keys), default])
    return (
        "### Deliveries\n\n"
        "`--delivery NAME` (or `deliveries` in `[sizecheck]`) checks these limits; without "
        "one, each store's default.\n\n" + table(["delivery", "store", "limits", ""], rows)
    )

"""etdeploy.toml -> typed settings. Flags override the file, the file overrides
defaults. A bad value names its key: `etdeploy.toml: run.iterations: expected an
integer, got "ten"`.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from etdeploy.errors import UsageError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - 3.10
    import tomli as tomllib

CONFIG_NAME = "etdeploy.toml"
TRANSPORTS = ("local", "adb", "ssh", "ios-simulator")


@dataclass(frozen=True)
class DeviceConfig:
    name: str
    transport: str
    # Transport-specific settings (serial, adb_host, host, user, key, ...), kept
    # as given; each transport validates its own.
    settings: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Config:
    path: Path | None = None
    build: dict[str, Any] = field(default_factory=dict)
    run: dict[str, Any] = field(default_factory=dict)
    devices: dict[str, DeviceConfig] = field(default_factory=dict)
    limits: dict[str, Any] = field(default_factory=dict)
    sizecheck: dict[str, Any] = field(default_factory=dict)
    verify: dict[str, Any] = field(default_factory=dict)


_SECTION_KEYS: dict[str, dict[str, type | tuple[type, ...]]] = {
    "build": {
        "backend": str,
        "quantize": str,
        "calibration": list,
        "dynamic": list,
        "external_weights": bool,
    },
    "run": {
        "device": str,
        "iterations": int,
        "warmup": int,
        "deadline_s": (int, float),
        "idle_timeout_s": (int, float),
        "lock_timeout_s": (int, float),
        "atol": (int, float),
        "rtol": (int, float),
        "inputs": list,
        "keep": bool,
        "preprocess": str,
        "host_check": bool,
        "runner": str,
        "cpu_threads": int,
        # run --localize (etdeploy.pipeline.localize); the budget is "64MB" or bytes.
        "localize": bool,
        "localize_samples": int,
        "localize_budget": (str, int),
        "localize_module": str,
        # The peak memory a run may reach ("300MB" or bytes; etdeploy.memory.limit)
        # and the points of a dynamic program's range to run at (etdeploy.pipeline.shapes).
        "max_memory": (str, int),
        "shapes": list,
    },
    # Sizes are "150MB"-style strings or plain byte counts.
    "sizecheck": {
        "store": str,
        "deliveries": list,
        "budget": (str, int),
        "extra": (str, int),
        "estimate": str,
    },
    # How outputs are judged (etdeploy.verify): kinds by output name, the accuracy
    # budget of quantization, and the quantized program's tolerance in steps.
    "verify": {
        "output_kinds": dict,
        "min_sqnr_db": (int, float),
        "min_top1": (int, float),
        "min_cosine": (int, float),
        "max_abs_error": (int, float),
        "quant_steps": (int, float),
    },
}


def find_config(start: Path | None = None) -> Path | None:
    """The nearest etdeploy.toml in the directory or its parents."""
    here = (start or Path.cwd()).resolve()
    for directory in (here, *here.parents):
        candidate = directory / CONFIG_NAME
        if candidate.is_file():
            return candidate
    return None


def load_config(path: Path | None = None) -> Config:
    if path is None:
        path = find_config()
        if path is None:
            return Config()
    elif not path.is_file():
        raise UsageError(f"config file not found: {path}", "check --config")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(
            f"{path.name}: not valid TOML: {exc}", "fix the syntax at that line"
        ) from None
    return parse_config(data, path)


def parse_config(data: dict[str, Any], path: Path | None = None) -> Config:
    label = path.name if path else CONFIG_NAME
    known = {"build", "run", "devices", "limits", "sizecheck", "verify"}
    for key in data:
        if key not in known:
            raise UsageError(
                f"{label}: unknown section [{key}]", f"sections are: {', '.join(sorted(known))}"
            )
    sections: dict[str, dict[str, Any]] = {}
    for section, schema in _SECTION_KEYS.items():
        table = data.get(section, {})
        _expect_table(table, section, label)
        for key, value in table.items():
            if key not in schema:
                raise UsageError(
                    f"{label}: unknown key {section}.{key}",
                    f"keys of [{section}]: {', '.join(schema)}",
                )
            _expect_type(value, schema[key], f"{section}.{key}", label)
        sections[section] = dict(table)
    devices: dict[str, DeviceConfig] = {}
    device_tables = data.get("devices", {})
    _expect_table(device_tables, "devices", label)
    for name, table in device_tables.items():
        _expect_table(table, f"devices.{name}", label)
        transport = table.get("transport", "adb")
        if transport not in TRANSPORTS:
            raise UsageError(
                f"{label}: devices.{name}.transport: unknown transport {transport!r}",
                f"use one of: {', '.join(TRANSPORTS)}",
            )
        settings = {k: v for k, v in table.items() if k != "transport"}
        devices[name] = DeviceConfig(name, transport, settings)
    limits = data.get("limits", {})
    _expect_table(limits, "limits", label)
    for name, kind in sections["verify"].get("output_kinds", {}).items():
        _expect_type(kind, str, f"verify.output_kinds.{name}", label)
    return Config(
        path,
        sections["build"],
        sections["run"],
        devices,
        dict(limits),
        sections["sizecheck"],
        sections["verify"],
    )


def _expect_table(value: Any, key: str, label: str) -> None:
    if not isinstance(value, dict):
        raise UsageError(f"{label}: {key} must be a table", f"write [{key}] with keys below it")


def _expect_type(value: Any, expected: type | tuple[type, ...], key: str, label: str) -> None:
    # bool is an int in Python; a boolean where a number belongs is a mistake.
    ok = False if isinstance(value, bool) and expected is not bool else isinstance(value, expected)
    if not ok:
        names = (
            expected.__name__
            if isinstance(expected, type)
            else " or ".join(t.__name__ for t in expected)
        )
        raise UsageError(
            f"{label}: {key}: expected {names}, got {value!r}", f"fix {key} in {label}"
        )


# What `etdeploy run` does when neither a flag nor etdeploy.toml says otherwise.
RUN_DEFAULTS: dict[str, Any] = {
    "device": "local",
    "backend": "xnnpack",
    "iterations": 10,
    "warmup": 3,
    "deadline_s": 120.0,
    "lock_timeout_s": 600.0,
    "keep": False,
    "host_check": False,
}


def run_settings(config: Config, **flags: Any) -> dict[str, Any]:
    """Flags over etdeploy.toml ([run], and [build] for backend, quantize,
    calibration and dynamic) over RUN_DEFAULTS. A flag left at None was not
    given. Paths in the file are relative to the file; paths in flags to the
    current directory."""
    merged: dict[str, Any] = dict(RUN_DEFAULTS)
    from_file = {
        k: v
        for k, v in config.build.items()
        if k in ("backend", "quantize", "calibration", "dynamic", "external_weights")
    }
    from_file.update(config.run)
    from_file.update({k: v for k, v in config.verify.items() if k != "output_kinds"})
    kinds = config.verify.get("output_kinds", {})
    if kinds:
        from_file["output_kinds"] = [f"{name}={kind}" for name, kind in kinds.items()]
    if config.path is not None:
        base = config.path.parent
        for key in ("inputs", "calibration"):
            if key in from_file:
                from_file[key] = [_relative_to(base, item) for item in from_file[key]]
        if "runner" in from_file:
            from_file["runner"] = _relative_to(base, from_file["runner"])
    if "localize_budget" in from_file:
        from etdeploy.sizecheck.limits import parse_size

        label = config.path.name if config.path else CONFIG_NAME
        from_file["localize_budget_bytes"] = parse_size(
            from_file.pop("localize_budget"), what=f"{label}: run.localize_budget"
        )
    merged.update(from_file)
    given = {k: v for k, v in flags.items() if v is not None}
    if "output_kinds" in given:
        # A flag names some outputs; the file's kinds for the others still hold.
        given["output_kinds"] = [*merged.get("output_kinds", []), *given["output_kinds"]]
    merged.update(given)
    return merged


def _relative_to(base: Path, value: Any) -> Any:
    if not isinstance(value, str):
        return value
    path = Path(value).expanduser()
    return value if path.is_absolute() else str(base / path)

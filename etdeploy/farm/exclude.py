"""farm.exclude: cells of the matrix a spec drops by model, backend, quantization or
device, e.g. [[farm.exclude]] backend = "coreml" and device = "pixel8"."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from etdeploy.errors import UsageError
from etdeploy.farm.checks import NO_QUANT, strings

EXCLUDE_KEYS = ("model", "backend", "quantize", "device")


def parse_excludes(rules: list[Any], label: str) -> list[dict[str, list[str]]]:
    """farm.exclude rules: for each key, the values a cell must have to be dropped."""
    parsed = []
    for r, rule in enumerate(rules):
        where = f"farm.exclude[{r}]"
        if not isinstance(rule, dict) or not rule:
            raise UsageError(
                f"{label}: {where}: expected a table of model/backend/quantize/device",
                'write [[farm.exclude]] with e.g. backend = "coreml" and device = "pixel8"',
            )
        entry: dict[str, list[str]] = {}
        for key, value in rule.items():
            if key not in EXCLUDE_KEYS:
                raise UsageError(
                    f"{label}: unknown key {where}.{key}",
                    f"keys of [[farm.exclude]]: {', '.join(EXCLUDE_KEYS)}",
                )
            values = [value] if isinstance(value, str) else value
            if not isinstance(values, list):
                raise UsageError(
                    f"{label}: {where}.{key}: expected str or list, got {value!r}",
                    f"fix {where}.{key}",
                )
            entry[key] = strings(values, f"{where}.{key}", label)
        parsed.append(entry)
    return parsed


def excluded(
    rule: Mapping[str, list[str]], model: str, backend: str, quant: str | None, device: str
) -> bool:
    """The cell matches every key of the rule."""
    actual = {"model": model, "backend": backend, "quantize": quant or NO_QUANT, "device": device}
    return all(actual[key] in values for key, values in rule.items())

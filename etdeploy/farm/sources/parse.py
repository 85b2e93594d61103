"""[farm.sources] of a spec: the device sources it names (etdeploy.farm.sources),
each read into its record; a provided name checked against the spec's devices."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from etdeploy.errors import UsageError
from etdeploy.farm.sources.stf import KIND as STF_KIND
from etdeploy.farm.sources.stf import StfSource

# The source kinds a spec may name in [farm.sources.KIND].
KINDS = (STF_KIND,)

DeviceSource = StfSource


def parse_sources(table: Any, label: str, base_dir: Path) -> tuple[DeviceSource, ...]:
    """[farm.sources] of a spec; a bad kind, key or value is a UsageError naming it."""
    if not isinstance(table, dict):
        raise UsageError(f"{label}: farm.sources: expected a table", "write [farm.sources.stf]")
    sources: list[DeviceSource] = []
    for kind, sub in table.items():
        if kind != STF_KIND:
            raise UsageError(f"{label}: unknown device source farm.sources.{kind}",
                             f"sources etdeploy knows: {', '.join(KINDS)}")  # fmt: skip
        sources.append(StfSource.parse(sub, label, base_dir))
    return tuple(sources)


def check_source_names(
    sources: Sequence[DeviceSource], tables: Mapping[str, Any], label: str
) -> None:
    """A provided name is no [devices.NAME] table and no other source's name."""
    seen: dict[str, str] = {}
    for source in sources:
        for name in source.names:
            if name in tables:
                raise UsageError(
                    f"{label}: {source.where}.devices names {name!r}, which [devices.{name}] "
                    "also defines",
                    "a device comes from a table or from a source, not both: rename one",
                )
            if name in seen:
                raise UsageError(f"{label}: device {name!r} is in {seen[name]} and {source.where}",
                                 "give each device one source")  # fmt: skip
            seen[name] = source.where

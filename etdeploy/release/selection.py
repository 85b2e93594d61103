"""selection.json: the table an app reads at run time, and the one `release check` and
the reference selector evaluate.

Every group in priority order with its selectors (SoCs under every manufacturer name
Play may see), its variant, and the file a device of the group receives (its path in
OUT, the path the app opens, size, download size, sha256); then "other", the fallback.
Groups whose variant was not built (--skip-unavailable) are not in the table: a device
of such a group falls through to the next group or "other", exactly as the targeting
config written beside it says; they are listed under `not_built`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from etdeploy.errors import UsageError
from etdeploy.release.rules import (
    DeviceProperties,
    Selected,
    Targeted,
    choose,
    choose_apple,
)
from etdeploy.release.spec import AppleRule, DeviceId, Selector, SystemOnChip

SCHEMA = "etdeploy.release-selection/1"
RULES = (
    "play: the first group (in this order) any of whose selectors admits the device, else "
    "'other'; a selector admits a device when all it names holds: ram_min_bytes <= RAM < "
    "ram_max_bytes, (brand, device) or brand in device_ids if any, in no exclude_device_ids, "
    "every feature, no forbid_feature, SoC (exact manufacturer and model, API 31+) in socs if "
    "any. apple: the first rule whose families, models and RAM bounds hold, else the fallback."
)


@dataclass(frozen=True)
class DeliveredFile:
    """A file a device of a group receives."""

    path: str  # relative to the release folder (OUT)
    asset_path: str  # what the app opens: inside the pack's assets/, without #group_
    size_bytes: int
    download_bytes: int
    sha256: str

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "asset_path": self.asset_path, "size_bytes": self.size_bytes,
                "download_bytes": self.download_bytes, "sha256": self.sha256}  # fmt: skip

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DeliveredFile:
        return cls(data["path"], data["asset_path"], int(data["size_bytes"]),
                   int(data["download_bytes"]), data["sha256"])  # fmt: skip


@dataclass(frozen=True)
class TableGroup:
    name: str
    variant: str
    selectors: tuple[Selector, ...]
    files: tuple[DeliveredFile, ...]
    max_memory_bytes: int | None = None

    @property
    def targeted(self) -> Targeted:
        return Targeted(self.name, self.variant, self.selectors)


@dataclass(frozen=True)
class AppleEntry:
    rule: AppleRule
    pack_id: str
    files: tuple[DeliveredFile, ...]


@dataclass(frozen=True)
class AppleTable:
    delivery: str
    download_policy: str
    rules: tuple[AppleEntry, ...]
    fallback: AppleEntry  # rule.name == "other"


@dataclass(frozen=True)
class Selection:
    release: str
    model: str
    pack: str
    delivery: str
    asset_dir: str
    groups: tuple[TableGroup, ...]  # priority order, without "other"
    other: TableGroup
    apple: AppleTable | None = None
    not_built: Mapping[str, str] | None = None  # group or variant -> why it is not delivered

    def select(self, props: DeviceProperties) -> Selected:
        """Which group and variant Play delivers to a device of these properties."""
        return choose(props, [g.targeted for g in self.groups], self.other.variant)

    def select_apple(self, props: DeviceProperties) -> Selected:
        if self.apple is None:
            raise UsageError("the release has no [release.apple] section",
                             "add one to choose variants for Apple devices")  # fmt: skip
        rules = [e.rule for e in self.apple.rules]
        return choose_apple(props, rules, self.apple.fallback.rule.variant)

    def group(self, name: str) -> TableGroup:
        return (
            self.other
            if name == self.other.name
            else next(g for g in self.groups if g.name == name)
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "release": self.release,
            "model": self.model,
            "rules": RULES,
            "play": {
                "pack": self.pack, "delivery": self.delivery, "asset_dir": self.asset_dir,
                "groups": [_group_json(g, i + 1) for i, g in enumerate((*self.groups, self.other))],
            },
            "apple": _apple_json(self.apple) if self.apple else None,
            "not_built": dict(self.not_built or {}),
        }  # fmt: skip

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Selection:
        if data.get("schema") != SCHEMA:
            raise UsageError(f"not a {SCHEMA} document (schema {data.get('schema')!r})",
                             "give the selection.json `etdeploy release build` wrote")  # fmt: skip
        play = data["play"]
        groups = [_group_from_json(g) for g in play["groups"]]
        apple = data.get("apple")
        return cls(
            release=data["release"], model=data["model"], pack=play["pack"],
            delivery=play["delivery"], asset_dir=play["asset_dir"], groups=tuple(groups[:-1]),
            other=groups[-1], apple=_apple_from_json(apple) if apple else None,
            not_built=dict(data.get("not_built") or {}),
        )  # fmt: skip

    @classmethod
    def load(cls, path: Path) -> Selection:
        try:
            return cls.from_json(json.loads(path.read_text()))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise UsageError(f"cannot read {path}: {exc}",
                             "give the selection.json `etdeploy release build` wrote") from None  # fmt: skip


def selector_json(s: Selector) -> dict[str, Any]:
    """Only the properties a selector names, under Play's names for them."""
    out: dict[str, Any] = {}
    if s.ram_min_bytes is not None:
        out["ram_min_bytes"] = s.ram_min_bytes
    if s.ram_max_bytes is not None:
        out["ram_max_bytes"] = s.ram_max_bytes
    for key in ("device_ids", "exclude_device_ids"):
        ids: tuple[DeviceId, ...] = getattr(s, key)
        if ids:
            out[key] = [
                {"brand": i.brand, **({"device": i.device} if i.device else {})} for i in ids
            ]
    for key in ("features", "forbid_features"):
        if getattr(s, key):
            out[key] = list(getattr(s, key))
    if s.socs:
        out["socs"] = [{"manufacturer": c.manufacturer, "model": c.model} for c in s.socs]
    return out


def selector_from_json(data: Mapping[str, Any]) -> Selector:
    def ids(key: str) -> tuple[DeviceId, ...]:
        return tuple(DeviceId(i["brand"], i.get("device")) for i in data.get(key, []))

    return Selector(
        ram_min_bytes=data.get("ram_min_bytes"), ram_max_bytes=data.get("ram_max_bytes"),
        device_ids=ids("device_ids"), exclude_device_ids=ids("exclude_device_ids"),
        features=tuple(data.get("features", [])), forbid_features=tuple(data.get("forbid_features", [])),
        socs=tuple(SystemOnChip(c["manufacturer"], c["model"]) for c in data.get("socs", [])),
    )  # fmt: skip


def _group_json(g: TableGroup, priority: int) -> dict[str, Any]:
    return {
        "name": g.name, "priority": priority, "variant": g.variant,
        "selectors": [selector_json(s) for s in g.selectors],
        "files": [f.to_json() for f in g.files],
        "max_memory_bytes": g.max_memory_bytes,
    }  # fmt: skip


def _group_from_json(data: Mapping[str, Any]) -> TableGroup:
    return TableGroup(
        data["name"], data["variant"],
        tuple(selector_from_json(s) for s in data["selectors"]),
        tuple(DeliveredFile.from_json(f) for f in data["files"]),
        data.get("max_memory_bytes"),
    )  # fmt: skip


def _apple_entry_json(e: AppleEntry) -> dict[str, Any]:
    r = e.rule
    return {
        "name": r.name, "variant": r.variant, "families": list(r.families),
        "models": list(r.models), "min_ram_bytes": r.min_ram_bytes,
        "max_ram_bytes": r.max_ram_bytes, "asset_pack_id": e.pack_id,
        "files": [f.to_json() for f in e.files],
    }  # fmt: skip


def _apple_entry_from_json(d: Mapping[str, Any]) -> AppleEntry:
    rule = AppleRule(d["name"], d["variant"], tuple(d.get("families", [])), d.get("min_ram_bytes"),
                     d.get("max_ram_bytes"), tuple(d.get("models", [])))  # fmt: skip
    return AppleEntry(
        rule, d["asset_pack_id"], tuple(DeliveredFile.from_json(f) for f in d["files"])
    )


def _apple_json(a: AppleTable) -> dict[str, Any]:
    return {
        "delivery": a.delivery, "download_policy": a.download_policy,
        "rules": [_apple_entry_json(e) for e in (*a.rules, a.fallback)],
    }  # fmt: skip


def _apple_from_json(d: Mapping[str, Any]) -> AppleTable:
    entries = [_apple_entry_from_json(e) for e in d["rules"]]
    return AppleTable(d["delivery"], d["download_policy"], tuple(entries[:-1]), entries[-1])

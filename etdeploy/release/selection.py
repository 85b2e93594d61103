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

from etdeploy.errors import UsageError
from etdeploy.jsonvalue import (
    JsonObject,
    JsonValue,
    as_object,
    read_array,
    read_int,
    read_object,
    read_str,
    read_str_list,
)
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

    def to_json(self) -> JsonObject:
        return {"path": self.path, "asset_path": self.asset_path, "size_bytes": self.size_bytes,
                "download_bytes": self.download_bytes, "sha256": self.sha256}  # fmt: skip

    @classmethod
    def from_json(cls, data: Mapping[str, JsonValue]) -> DeliveredFile:
        return cls(_str(data, "path"), _str(data, "asset_path"), _int(data, "size_bytes"),
                   _int(data, "download_bytes"), _str(data, "sha256"))  # fmt: skip


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

    def to_json(self) -> JsonObject:
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
    def from_json(cls, data: Mapping[str, JsonValue]) -> Selection:
        if data.get("schema") != SCHEMA:
            raise UsageError(f"not a {SCHEMA} document (schema {data.get('schema')!r})",
                             "give the selection.json `etdeploy release build` wrote")  # fmt: skip
        play = read_object(data, "play", SCHEMA)
        groups = [_group_from_json(as_object(g, "a group")) for g in read_array(play, "groups")]
        apple = read_object(data, "apple", SCHEMA)
        not_built = read_object(data, "not_built", SCHEMA)
        return cls(
            release=_str(data, "release"), model=_str(data, "model"), pack=_str(play, "pack"),
            delivery=_str(play, "delivery"), asset_dir=_str(play, "asset_dir"),
            groups=tuple(groups[:-1]), other=groups[-1],
            apple=_apple_from_json(apple) if apple else None,
            not_built={name: _str(not_built, name) for name in not_built},
        )  # fmt: skip

    @classmethod
    def load(cls, path: Path) -> Selection:
        try:
            return cls.from_json(json.loads(path.read_text()))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise UsageError(f"cannot read {path}: {exc}",
                             "give the selection.json `etdeploy release build` wrote") from None  # fmt: skip


def selector_json(s: Selector) -> JsonObject:
    """Only the properties a selector names, under Play's names for them."""
    out: JsonObject = {}
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


def selector_from_json(data: Mapping[str, JsonValue]) -> Selector:
    def ids(key: str) -> tuple[DeviceId, ...]:
        found = [as_object(i, key) for i in read_array(data, key)]
        return tuple(DeviceId(_str(i, "brand"), read_str(i, "device", None)) for i in found)

    socs = [as_object(c, "socs") for c in read_array(data, "socs")]
    return Selector(
        ram_min_bytes=read_int(data, "ram_min_bytes", None),
        ram_max_bytes=read_int(data, "ram_max_bytes", None),
        device_ids=ids("device_ids"), exclude_device_ids=ids("exclude_device_ids"),
        features=tuple(read_str_list(data, "features")),
        forbid_features=tuple(read_str_list(data, "forbid_features")),
        socs=tuple(SystemOnChip(_str(c, "manufacturer"), _str(c, "model")) for c in socs),
    )  # fmt: skip


def _group_json(g: TableGroup, priority: int) -> JsonObject:
    return {
        "name": g.name, "priority": priority, "variant": g.variant,
        "selectors": [selector_json(s) for s in g.selectors],
        "files": [f.to_json() for f in g.files],
        "max_memory_bytes": g.max_memory_bytes,
    }  # fmt: skip


def _group_from_json(data: Mapping[str, JsonValue]) -> TableGroup:
    return TableGroup(
        _str(data, "name"), _str(data, "variant"),
        tuple(selector_from_json(as_object(s, "selectors")) for s in read_array(data, "selectors")),
        _files(data),
        read_int(data, "max_memory_bytes", None),
    )  # fmt: skip


def _apple_entry_json(e: AppleEntry) -> JsonObject:
    r = e.rule
    return {
        "name": r.name, "variant": r.variant, "families": list(r.families),
        "models": list(r.models), "min_ram_bytes": r.min_ram_bytes,
        "max_ram_bytes": r.max_ram_bytes, "asset_pack_id": e.pack_id,
        "files": [f.to_json() for f in e.files],
    }  # fmt: skip


def _apple_entry_from_json(d: Mapping[str, JsonValue]) -> AppleEntry:
    rule = AppleRule(_str(d, "name"), _str(d, "variant"), tuple(read_str_list(d, "families")),
                     read_int(d, "min_ram_bytes", None), read_int(d, "max_ram_bytes", None),
                     tuple(read_str_list(d, "models")))  # fmt: skip
    return AppleEntry(rule, _str(d, "asset_pack_id"), _files(d))


def _apple_json(a: AppleTable) -> JsonObject:
    return {
        "delivery": a.delivery, "download_policy": a.download_policy,
        "rules": [_apple_entry_json(e) for e in (*a.rules, a.fallback)],
    }  # fmt: skip


def _apple_from_json(d: Mapping[str, JsonValue]) -> AppleTable:
    entries = [_apple_entry_from_json(as_object(e, "rules")) for e in read_array(d, "rules")]
    return AppleTable(
        _str(d, "delivery"), _str(d, "download_policy"), tuple(entries[:-1]), entries[-1]
    )


def _files(data: Mapping[str, JsonValue]) -> tuple[DeliveredFile, ...]:
    return tuple(DeliveredFile.from_json(as_object(f, "files")) for f in read_array(data, "files"))


def _str(data: Mapping[str, JsonValue], key: str) -> str:
    """A string the document must hold (a missing one: KeyError, as load reports it)."""
    value = read_str(data, key, None, SCHEMA)
    if value is None:
        raise KeyError(key)
    return value


def _int(data: Mapping[str, JsonValue], key: str) -> int:
    value = read_int(data, key, None, SCHEMA)
    if value is None:
        raise KeyError(key)
    return value

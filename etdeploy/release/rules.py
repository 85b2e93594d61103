"""Which group a device is in, and which variant it is delivered: Play's rules, and the
app's own for Apple devices.

Play's rules, as bundletool's DeviceTargetingConfigEvaluator implements them
(github.com/google/bundletool, src/main/java/.../device/DeviceTargetingConfigEvaluator.java,
read 2026-12-04) and Play's "Play for On-device AI" page documents them (read 2026-12-04):

- a selector admits a device when every property it names holds (AND): RAM at least
  ram_min_bytes and below ram_max_bytes (min inclusive, max exclusive); its (brand, device)
  or its brand alone among device_ids when any are listed, and neither among
  exclude_device_ids; every feature of `features` present, none of `forbid_features`; its
  SoC (manufacturer and model, exact strings) among `socs` when any are listed;
- a group holds a device when any of its selectors admits it (OR);
- a device in several groups is served the group defined first ("the order you define
  groups in the XML file is your priority order"); a device in none gets "other";
- SoC targeting works only on API level 31 and later (Build.SOC_* exist from Android 12):
  below that a device's SoC is unknown to Play, and an unknown SoC matches no SoC list.

Play cannot tell "Qualcomm" from "QTI" as a SoC manufacturer (LiteRT's AI-pack exporter,
google-ai-edge/LiteRT litert/python/aot/ai_pack/export_lib.py, read 2026-12-04: "Play cannot
distinguish between Qualcomm and QTI for now", and it writes both): a spec's Qualcomm SoC is
written with both spellings, so a phone that reports either is in the group.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from etdeploy.release.spec import AppleRule, DeviceId, Selector, SystemOnChip

# Android 12 (API 31) added Build.SOC_MANUFACTURER and Build.SOC_MODEL.
SOC_MIN_SDK = 31
QUALCOMM_SPELLINGS = ("Qualcomm", "QTI")


@dataclass(frozen=True)
class DeviceProperties:
    """What a store (or an app) knows of a device when it chooses a variant."""

    ram_bytes: int | None = None  # MemTotal (Android's ActivityManager.MemoryInfo.totalMem)
    brand: str = ""  # Build.BRAND (ro.product.brand)
    device: str = ""  # Build.DEVICE (ro.product.device)
    sdk: int | None = None  # ro.build.version.sdk
    soc_manufacturer: str = ""  # ro.soc.manufacturer
    soc_model: str = ""  # ro.soc.model
    features: frozenset[str] = frozenset()  # `pm list features`
    model: str = ""  # ro.product.model, or an Apple hw.machine ("iPhone16,1")
    abi: str = ""
    os: str = ""  # android, linux, darwin, ios
    family: str = ""  # an Apple device family (iPhone, iPad, Mac, ...)
    # What could not be read, said rather than guessed ("system features: pm not found").
    unknown: tuple[str, ...] = ()

    @property
    def soc_known(self) -> bool:
        """Whether Play sees this device's SoC (set, and API level 31 or later)."""
        too_old = self.sdk is not None and self.sdk < SOC_MIN_SDK
        return bool(self.soc_manufacturer and self.soc_model) and not too_old

    def to_json(self) -> dict[str, Any]:
        return {
            "ram_bytes": self.ram_bytes, "brand": self.brand, "device": self.device,
            "sdk": self.sdk, "soc_manufacturer": self.soc_manufacturer,
            "soc_model": self.soc_model, "features": sorted(self.features), "model": self.model,
            "abi": self.abi, "os": self.os, "family": self.family, "unknown": list(self.unknown),
        }  # fmt: skip

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DeviceProperties:
        values = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        values["features"] = frozenset(values.get("features") or ())
        values["unknown"] = tuple(values.get("unknown") or ())
        return cls(**values)


def spellings(soc: SystemOnChip) -> tuple[SystemOnChip, ...]:
    """The SoC as Play must be told it: a Qualcomm part under both of its manufacturer names."""
    if soc.manufacturer in QUALCOMM_SPELLINGS:
        return tuple(SystemOnChip(m, soc.model) for m in QUALCOMM_SPELLINGS)
    return (soc,)


def with_spellings(selector: Selector) -> Selector:
    """`selector` with each SoC under every manufacturer name Play may see (no duplicates)."""
    socs = tuple(dict.fromkeys(s for soc in selector.socs for s in spellings(soc)))
    return replace(selector, socs=socs)


def _id_listed(props: DeviceProperties, ids: Iterable[DeviceId]) -> bool:
    return any(i.brand == props.brand and i.device in (None, props.device) for i in ids)


def admits(selector: Selector, props: DeviceProperties) -> bool:
    """Whether `selector` admits the device: every property it names holds."""
    ram = props.ram_bytes or 0  # unknown RAM is 0, as in Play's DeviceProperties proto
    if selector.ram_min_bytes is not None and ram < selector.ram_min_bytes:
        return False
    if selector.ram_max_bytes is not None and ram >= selector.ram_max_bytes:
        return False
    if selector.device_ids and not _id_listed(props, selector.device_ids):
        return False
    if _id_listed(props, selector.exclude_device_ids):
        return False
    if not set(selector.features) <= props.features:
        return False
    if props.features & set(selector.forbid_features):
        return False
    if selector.socs:
        chip = SystemOnChip(props.soc_manufacturer, props.soc_model)
        return props.soc_known and chip in selector.socs
    return True


@dataclass(frozen=True)
class Targeted:
    """A group as the rules see it: its name, its variant, its selectors (in order)."""

    name: str
    variant: str
    selectors: tuple[Selector, ...]


@dataclass(frozen=True)
class Selected:
    """The store's (or the app's) choice for one device."""

    group: str  # the group's name, "other" for the fallback
    variant: str
    # Every group that holds the device, in priority order (the first is `group`).
    matched: tuple[str, ...] = ()
    # The index of the first selector of `group` that admits it (None for the fallback).
    selector: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"group": self.group, "variant": self.variant, "matched": list(self.matched),
                "selector": self.selector}  # fmt: skip


def choose(props: DeviceProperties, groups: Sequence[Targeted], fallback: str) -> Selected:
    """The first group (in order) that holds the device, else "other" with `fallback`."""
    matched: list[tuple[Targeted, int]] = []
    for group in groups:
        first = next((i for i, s in enumerate(group.selectors) if admits(s, props)), None)
        if first is not None:
            matched.append((group, first))
    names = tuple(g.name for g, _ in matched)
    if not matched:
        return Selected("other", fallback, names, None)
    group, index = matched[0]
    return Selected(group.name, group.variant, names, index)


def apple_admits(rule: AppleRule, props: DeviceProperties) -> bool:
    """An Apple rule: its family, model and RAM bounds (min inclusive, max exclusive) all hold."""
    ram = props.ram_bytes or 0
    return (
        (not rule.families or props.family in rule.families)
        and (not rule.models or props.model in rule.models)
        and (rule.min_ram_bytes is None or ram >= rule.min_ram_bytes)
        and (rule.max_ram_bytes is None or ram < rule.max_ram_bytes)
    )


def choose_apple(props: DeviceProperties, rules: Sequence[AppleRule], fallback: str) -> Selected:
    """The first Apple rule that admits the device, else the fallback (the same order rule
    as Play's, so one table reads the same on both platforms)."""
    names = tuple(r.name for r in rules if apple_admits(r, props))
    first = next((r for r in rules if r.name in names), None)
    if first is None:
        return Selected("other", fallback, names, None)
    return Selected(first.name, first.variant, names, 0)

"""The release spec: a `[release]` table in a TOML file, read into frozen records.

    [release]
    name = "digits"                  # the AI pack's name, and the release's
    model = "digits"                 # MODEL as `etdeploy build` takes it
    delivery = "install-time"        # the AI pack's delivery: install-time | fast-follow | on-demand
    fallback = "int8"                # the variant of devices in no group (Play's "other")

    [release.variants.fp32]          # a name, and what `etdeploy build` is given
    backend = "xnnpack"

    [[release.groups]]               # in priority order: a device in two groups gets the first
    name = "high_ram"
    variant = "fp32"
    ram_min_bytes = "8GB"            # one selector written inline ...
    # selectors = [{...}, {...}]     # ... or up to five, any of which admits a device

Groups speak Play's device-targeting vocabulary (the selector keys below); the rules
are Play's, read in etdeploy/release/rules.py. Everything is checked here, before
anything is built: a bad spec is one UsageError naming the key and the file.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from etdeploy.build_options import LM_QUANTIZATIONS, PROGRAM_QUANTIZATIONS, BuildOptions
from etdeploy.builder.backends import names as backend_names
from etdeploy.declaration import Declared, declared
from etdeploy.errors import UsageError
from etdeploy.jsonvalue import as_object
from etdeploy.pipeline.llm.folder import looks_like_lm_folder
from etdeploy.units import parse_size

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

# Play's limits on a device group, from "Device targeting (beta)" and "Play for On-device AI
# (beta)" (developer.android.com/google/play/device-targeting and .../on-device-ai, read
# 2026-12-04): up to 5 selectors per group, 10000 device ids and 100 system features per group.
MAX_SELECTORS_PER_GROUP = 5
MAX_DEVICE_IDS_PER_GROUP = 10_000
MAX_FEATURES_PER_GROUP = 100
# Group and AI-pack names: a letter, then letters, digits and underscores (bundletool's
# DeviceTargetingUtils.DEVICE_GROUP_PATTERN; the AI pack name rule of on-device-ai; read
# 2026-12-04). "other" is the implicit fallback group and must not be defined.
NAME_PATTERN = re.compile(r"[a-zA-Z][a-zA-Z0-9_]*")
OTHER_GROUP = "other"
# The AI pack's delivery modes (on-device-ai: aiPack { dynamicDelivery { deliveryType } }).
PLAY_DELIVERIES = ("install-time", "fast-follow", "on-demand")
# Apple Background Assets download policies (the manifest `xcrun ba-package template`
# writes: essential, prefetch, onDemand; Apple developer forums attachment, read 2026-12-04).
APPLE_POLICIES = ("essential", "prefetch", "onDemand")
APPLE_DELIVERIES = ("background-assets", "odr")
APPLE_PLATFORMS = ("iOS", "macOS", "tvOS", "visionOS")
# The device families an Apple rule names (UIDevice/ProcessInfo as an app sees them).
APPLE_FAMILIES = ("iPhone", "iPad", "Mac", "AppleTV", "Vision")

SELECTOR_KEYS = (
    "ram_min_bytes",
    "ram_max_bytes",
    "device_ids",
    "exclude_device_ids",
    "features",
    "forbid_features",
    "soc",
)
GROUP_KEYS = ("name", "variant", "selectors", "max_memory")
# A variant's keys: the build options a release may set, from their declarations.
VARIANT_KEYS = tuple(entry.key for entry in declared(BuildOptions) if entry.option.release)
# The quantizations a variant is built with by etdeploy.builder.build.
RELEASE_KEYS = ("name", "model", "delivery", "fallback", "asset_dir", "app_bytes",
                "variants", "groups", "apple", "limits")  # fmt: skip
APPLE_KEYS = ("asset_pack_prefix", "delivery", "download_policy", "platforms", "app_group_id",
              "rules", "fallback")  # fmt: skip
APPLE_RULE_KEYS = ("name", "variant", "families", "min_ram_bytes", "max_ram_bytes", "models")


@dataclass(frozen=True)
class DeviceId:
    """Build.BRAND and Build.DEVICE; a brand alone names every device of that brand."""

    brand: str
    device: str | None = None

    @property
    def text(self) -> str:
        return self.brand if self.device is None else f"{self.brand}:{self.device}"


@dataclass(frozen=True)
class SystemOnChip:
    """Build.SOC_MANUFACTURER and Build.SOC_MODEL (ro.soc.manufacturer, ro.soc.model)."""

    manufacturer: str
    model: str


@dataclass(frozen=True)
class Selector:
    """One of Play's device selectors: every property given must hold (a logical AND)."""

    ram_min_bytes: int | None = None  # inclusive
    ram_max_bytes: int | None = None  # exclusive
    device_ids: tuple[DeviceId, ...] = ()
    exclude_device_ids: tuple[DeviceId, ...] = ()
    features: tuple[str, ...] = ()
    forbid_features: tuple[str, ...] = ()
    socs: tuple[SystemOnChip, ...] = ()


@dataclass(frozen=True)
class Group:
    """A device group: any of its selectors admits a device (a logical OR)."""

    name: str
    variant: str
    selectors: tuple[Selector, ...]
    # A per-group memory gate for the check; recorded and passed on, not a Play property.
    max_memory_bytes: int | None = None


@dataclass(frozen=True, kw_only=True)
class Variant(BuildOptions):
    """One artefact of the release: its name, and the options `etdeploy build` is
    given to make it (BuildOptions: declared once, with the run's)."""

    name: str

    @property
    def label(self) -> str:
        return f"{self.backend}" + (f" {self.quantize}" if self.quantize else "")


@dataclass(frozen=True)
class AppleRule:
    """The app's own choice on Apple devices (the App Store does not target by device)."""

    name: str
    variant: str
    families: tuple[str, ...] = ()
    min_ram_bytes: int | None = None  # inclusive
    max_ram_bytes: int | None = None  # exclusive, as Play's
    models: tuple[str, ...] = ()  # hw.machine identifiers, e.g. "iPhone16,1"


@dataclass(frozen=True)
class AppleSection:
    asset_pack_prefix: str
    delivery: str  # background-assets | odr
    download_policy: str
    platforms: tuple[str, ...]
    rules: tuple[AppleRule, ...]
    fallback: str
    app_group_id: str | None = None

    def pack_id(self, variant: str) -> str:
        return f"{self.asset_pack_prefix}-{variant}"

    @property
    def variants(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys([*(r.variant for r in self.rules), self.fallback]))


@dataclass(frozen=True)
class ReleaseSpec:
    path: Path
    name: str
    model: str
    delivery: str
    variants: tuple[Variant, ...]
    groups: tuple[Group, ...]
    fallback: str
    asset_dir: str = "model"
    app_bytes: int = 0  # the rest of the app, added to each AI pack's cumulative check
    apple: AppleSection | None = None
    limits: Mapping[str, object] = field(default_factory=dict)  # [release.limits] overrides

    def variant(self, name: str) -> Variant:
        return next(v for v in self.variants if v.name == name)

    @property
    def used_variants(self) -> tuple[str, ...]:
        """Variants some group, the fallback or an Apple rule delivers, in first-use order."""
        names = [*(g.variant for g in self.groups), self.fallback]
        if self.apple is not None:
            names += list(self.apple.variants)
        return tuple(dict.fromkeys(names))


def load_spec(path: Path) -> ReleaseSpec:
    """Read and check the `[release]` table of `path`."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise UsageError(
            f"cannot read the release spec {path}: {exc.strerror or exc}",
            "give the path to a TOML file with a [release] table (examples/release/release.toml)",
        ) from None
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: not valid TOML: {exc}", "fix the syntax at that line") from None
    table = document.get("release")
    if not isinstance(table, dict):
        raise UsageError(
            f"{path}: no [release] table",
            "a release spec is a [release] table; see examples/release/release.toml",
        )
    return _Reader(path).release(table)


class _Reader:
    """Checks each key as it reads it; every error names `file: release.key`."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, where: str, message: str, hint: str) -> UsageError:
        return UsageError(f"{self.path.name}: {where}: {message}", hint)

    def keys(self, table: Mapping[str, object], known: Sequence[str], where: str) -> None:
        for key in table:
            if key not in known:
                raise self.fail(
                    f"{where}.{key}", "unknown key", f"the keys of {where} are: {', '.join(known)}"
                )

    def string(
        self, table: Mapping[str, object], key: str, where: str, default: str | None = None
    ) -> str:
        value = table.get(key, default)
        if not isinstance(value, str) or not value:
            raise self.fail(f"{where}.{key}", f"expected a non-empty string, got {value!r}",
                            f'write {key} = "..."')  # fmt: skip
        return value

    def strings(self, table: Mapping[str, object], key: str, where: str) -> tuple[str, ...]:
        value = table.get(key, [])
        items = value if isinstance(value, list) else None
        if items is None or not all(isinstance(v, str) and v for v in items):
            raise self.fail(f"{where}.{key}", f"expected a list of strings, got {value!r}",
                            f'write {key} = ["...", "..."]')  # fmt: skip
        return tuple(str(v) for v in items)

    def size(self, table: Mapping[str, object], key: str, where: str) -> int | None:
        if key not in table:
            return None
        value = table[key]
        what = f"{self.path.name}: {where}.{key}"
        try:
            if isinstance(value, bool) or not isinstance(value, str | int | float):
                raise UsageError(f"{what}: expected a size, got {value!r}")
            return parse_size(value, what=what)
        except UsageError as exc:
            raise UsageError(exc.message, "bytes, or a size such as 8GB or 4GiB") from None

    def choice(self, table: Mapping[str, object], key: str, where: str, options: Sequence[str],
               default: str) -> str:  # fmt: skip
        value = self.string(table, key, where, default)
        if value not in options:
            raise self.fail(f"{where}.{key}", f"{value!r} is not one of {', '.join(options)}",
                            f'write {key} = "{options[0]}"')  # fmt: skip
        return value

    def name(self, value: str, where: str, what: str) -> str:
        if not NAME_PATTERN.fullmatch(value):
            raise self.fail(where, f"{what} {value!r} is not a valid name",
                            "a letter, then letters, digits or underscores (Play's rule for "
                            "group and AI pack names)")  # fmt: skip
        return value

    # -- the tables -------------------------------------------------------------------

    def release(self, table: Mapping[str, object]) -> ReleaseSpec:
        self.keys(table, RELEASE_KEYS, "release")
        name = self.name(self.string(table, "name", "release"), "release.name", "the release name")
        model = self.string(table, "model", "release")
        delivery = self.choice(table, "delivery", "release", PLAY_DELIVERIES, "install-time")
        variants = self.variants(table.get("variants"), language_model=looks_like_lm_folder(model))
        names = {v.name for v in variants}
        groups = self.groups(table.get("groups", []), names)
        fallback = self.string(table, "fallback", "release")
        self.known_variant(fallback, names, "release.fallback")
        asset_dir = self.string(table, "asset_dir", "release", "model")
        if "/" in asset_dir or "#" in asset_dir or asset_dir in (".", ".."):
            raise self.fail("release.asset_dir", f"{asset_dir!r} is not one folder name",
                            'one folder inside the pack\'s assets/, e.g. asset_dir = "model"')  # fmt: skip
        apple = self.apple(table["apple"], names) if "apple" in table else None
        limits = table.get("limits", {})
        if not isinstance(limits, dict):
            raise self.fail(
                "release.limits", "expected a table", '[release.limits] "play.ai-pack" = "1GB"'
            )
        return ReleaseSpec(
            path=self.path, name=name, model=model, delivery=delivery, variants=variants,
            groups=groups, fallback=fallback, asset_dir=asset_dir,
            app_bytes=self.size(table, "app_bytes", "release") or 0, apple=apple, limits=limits,
        )  # fmt: skip

    def known_variant(self, name: str, names: set[str], where: str) -> None:
        if name not in names:
            raise self.fail(where, f"no variant named {name!r}",
                            f"define [release.variants.{name}] or use one of: "
                            f"{', '.join(sorted(names)) or 'none defined'}")  # fmt: skip

    def variants(self, table: object, *, language_model: bool = False) -> tuple[Variant, ...]:
        if not isinstance(table, dict) or not table:
            raise self.fail("release.variants", "no variants",
                            '[release.variants.fp32] with backend = "xnnpack"')  # fmt: skip
        out = []
        for name, body in table.items():
            where = f"release.variants.{name}"
            self.name(name, where, "the variant name")
            if not isinstance(body, dict):
                raise self.fail(where, "expected a table", f'[{where}] backend = "xnnpack"')
            self.keys(body, VARIANT_KEYS, where)
            options = {
                entry.name: self.option(body, entry, where)
                for entry in declared(BuildOptions)
                if entry.option.release and entry.key in body
            }
            self.choice(body, "backend", where, backend_names(), "xnnpack")
            quantize = options.get("quantize")
            # A language model's folder builds 8da4w (or float); every other model int8.
            allowed = LM_QUANTIZATIONS if language_model else PROGRAM_QUANTIZATIONS
            if quantize is not None and quantize not in allowed:
                raise self.fail(f"{where}.quantize", f"{quantize!r} is not {' or '.join(allowed)}"
                                + (" (for a language model's folder)" if language_model else ""),
                                f'write quantize = "{allowed[0]}"')  # fmt: skip
            out.append(Variant(name=name, **options))
        return tuple(out)

    def option(self, body: Mapping[str, object], entry: Declared, where: str) -> Any:
        """A variant's build option as its declaration types it (paths stay as written)."""
        key = entry.key
        if entry.is_list:
            return self.strings(body, key, where)
        kind = entry.value_type
        value = body[key]
        if kind is str:
            return self.string(body, key, where)
        if kind is bool and not isinstance(value, bool):
            raise self.fail(f"{where}.{key}", f"expected true or false, got {value!r}",
                            f"write {key} = true")  # fmt: skip
        if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
            raise self.fail(f"{where}.{key}", f"expected an integer, got {value!r}",
                            f"write {key} = {entry.option.example or 1}")  # fmt: skip
        entry.check_range(value, f"{self.path.name}: {where}.{key}")
        return value

    def groups(self, items: object, variants: set[str]) -> tuple[Group, ...]:
        if not isinstance(items, list):
            raise self.fail("release.groups", "expected [[release.groups]] tables",
                            '[[release.groups]] name = "high_ram" ...')  # fmt: skip
        out: list[Group] = []
        for i, body in enumerate(items):
            where = f"release.groups[{i}]"
            if not isinstance(body, dict):
                raise self.fail(where, "expected a table", "[[release.groups]] name = ...")
            self.keys(body, (*GROUP_KEYS, *SELECTOR_KEYS), where)
            name = self.name(self.string(body, "name", where), f"{where}.name", "the group name")
            if name == OTHER_GROUP:
                raise self.fail(f"{where}.name", '"other" is the implicit fallback group',
                                "name the group otherwise; devices in no group get release.fallback")  # fmt: skip
            if any(g.name == name for g in out):
                raise self.fail(f"{where}.name", f"two groups are named {name!r}",
                                "give each group its own name: a device gets the first group it "
                                "matches, so merge them or rename one")  # fmt: skip
            where = f"release.groups.{name}"
            variant = self.string(body, "variant", where)
            self.known_variant(variant, variants, f"{where}.variant")
            out.append(Group(name, variant, self.selectors(body, where),
                             self.size(body, "max_memory", where)))  # fmt: skip
        return tuple(out)

    def selectors(self, body: Mapping[str, object], where: str) -> tuple[Selector, ...]:
        inline = {k: v for k, v in body.items() if k in SELECTOR_KEYS}
        listed = body.get("selectors")
        if listed is not None and inline:
            raise self.fail(where, f"both selectors and {', '.join(inline)} given",
                            "write one selector inline, or all of them in selectors = [{...}]")  # fmt: skip
        given = [inline] if listed is None else listed
        if not isinstance(given, list) or not all(isinstance(t, dict) for t in given):
            raise self.fail(f"{where}.selectors", "expected a list of tables",
                            'selectors = [{ ram_min_bytes = "8GB" }]')  # fmt: skip
        tables = [as_object(t) for t in given]
        if not tables or not any(tables):
            raise self.fail(where, "no selector: the group would hold every device",
                            "give it a property, e.g. ram_min_bytes = \"8GB\"; devices in no "
                            "group get release.fallback")  # fmt: skip
        if len(tables) > MAX_SELECTORS_PER_GROUP:
            raise self.fail(f"{where}.selectors", f"{len(tables)} selectors",
                            f"Play takes at most {MAX_SELECTORS_PER_GROUP} per group")  # fmt: skip
        selectors = tuple(self.selector(t, f"{where}.selectors[{i}]" if listed else where)
                          for i, t in enumerate(tables))  # fmt: skip
        ids = sum(len(s.device_ids) + len(s.exclude_device_ids) for s in selectors)
        if ids > MAX_DEVICE_IDS_PER_GROUP:
            raise self.fail(where, f"{ids} device ids",
                            f"Play takes at most {MAX_DEVICE_IDS_PER_GROUP} per group")  # fmt: skip
        for key in ("features", "forbid_features"):
            count = sum(len(getattr(s, key)) for s in selectors)
            if count > MAX_FEATURES_PER_GROUP:
                raise self.fail(where, f"{count} {key}",
                                f"Play takes at most {MAX_FEATURES_PER_GROUP} per group")  # fmt: skip
        return selectors

    def selector(self, table: Mapping[str, object], where: str) -> Selector:
        if not table:
            raise self.fail(where, "an empty selector holds every device",
                            "give it a property, e.g. ram_min_bytes = \"8GB\"")  # fmt: skip
        self.keys(table, SELECTOR_KEYS, where)
        low, high = (
            self.size(table, "ram_min_bytes", where),
            self.size(table, "ram_max_bytes", where),
        )
        if low is not None and high is not None and high <= low:
            raise self.fail(f"{where}.ram_max_bytes", "is not above ram_min_bytes",
                            "ram_min_bytes is inclusive, ram_max_bytes exclusive: max > min")  # fmt: skip
        return Selector(
            ram_min_bytes=low, ram_max_bytes=high,
            device_ids=self.device_ids(table, "device_ids", where),
            exclude_device_ids=self.device_ids(table, "exclude_device_ids", where),
            features=self.strings(table, "features", where),
            forbid_features=self.strings(table, "forbid_features", where),
            socs=self.socs(table, where),
        )  # fmt: skip

    def device_ids(self, table: Mapping[str, object], key: str, where: str) -> tuple[DeviceId, ...]:
        out = []
        for text in self.strings(table, key, where):
            brand, sep, device = text.partition(":")
            if not brand or (sep and not device):
                raise self.fail(f"{where}.{key}", f"cannot read {text!r}",
                                'write "BRAND:DEVICE" (Build.BRAND and Build.DEVICE, e.g. '
                                '"google:shiba") or a brand alone')  # fmt: skip
            out.append(DeviceId(brand, device or None))
        return tuple(out)

    def socs(self, table: Mapping[str, object], where: str) -> tuple[SystemOnChip, ...]:
        out = []
        for text in self.strings(table, "soc", where):
            manufacturer, sep, model = text.partition(":")
            if not sep or not manufacturer or not model:
                raise self.fail(f"{where}.soc", f"cannot read {text!r}",
                                'write "MANUFACTURER:MODEL" as ro.soc.manufacturer and '
                                'ro.soc.model say, e.g. "Qualcomm:SM8650"')  # fmt: skip
            out.append(SystemOnChip(manufacturer, model))
        return tuple(out)

    def apple(self, table: object, variants: set[str]) -> AppleSection:
        where = "release.apple"
        if not isinstance(table, dict):
            raise self.fail(where, "expected a table", '[release.apple] fallback = "..."')
        self.keys(table, APPLE_KEYS, where)
        fallback = self.string(table, "fallback", where)
        self.known_variant(fallback, variants, f"{where}.fallback")
        rules: list[AppleRule] = []
        items = table.get("rules", [])
        if not isinstance(items, list):
            raise self.fail(f"{where}.rules", "expected [[release.apple.rules]] tables", "")
        for i, body in enumerate(items):
            at = f"{where}.rules[{i}]"
            if not isinstance(body, dict):
                raise self.fail(at, "expected a table", "[[release.apple.rules]] name = ...")
            self.keys(body, APPLE_RULE_KEYS, at)
            name = self.name(self.string(body, "name", at), f"{at}.name", "the rule name")
            if any(r.name == name for r in rules):
                raise self.fail(f"{at}.name", f"two Apple rules are named {name!r}",
                                "give each rule its own name")  # fmt: skip
            variant = self.string(body, "variant", at)
            self.known_variant(variant, variants, f"{at}.variant")
            families = self.strings(body, "families", at)
            for family in families:
                if family not in APPLE_FAMILIES:
                    raise self.fail(f"{at}.families", f"{family!r} is not a device family",
                                    f"use: {', '.join(APPLE_FAMILIES)}")  # fmt: skip
            rule = AppleRule(name, variant, families, self.size(body, "min_ram_bytes", at),
                             self.size(body, "max_ram_bytes", at), self.strings(body, "models", at))  # fmt: skip
            if not (rule.families or rule.models or rule.min_ram_bytes or rule.max_ram_bytes):
                raise self.fail(at, "the rule admits every device",
                                "give it families, models or a RAM bound; release.apple.fallback "
                                "serves the rest")  # fmt: skip
            rules.append(rule)
        platforms = self.strings(table, "platforms", where) or ("iOS",)
        for platform in platforms:
            if platform not in APPLE_PLATFORMS:
                raise self.fail(f"{where}.platforms", f"{platform!r} is not a platform",
                                f"use: {', '.join(APPLE_PLATFORMS)}")  # fmt: skip
        app_group = table.get("app_group_id")
        return AppleSection(
            asset_pack_prefix=self.string(table, "asset_pack_prefix", where, "model"),
            delivery=self.choice(table, "delivery", where, APPLE_DELIVERIES, "background-assets"),
            download_policy=self.choice(table, "download_policy", where, APPLE_POLICIES, "onDemand"),
            platforms=platforms, rules=tuple(rules), fallback=fallback,
            app_group_id=self.string(table, "app_group_id", where) if app_group is not None else None,
        )  # fmt: skip

"""The app stores' size limits, each with where it was read and when.

MB and GB are decimal (1 MB = 10**6 bytes), as the stores write them. Every figure below was
read on 2026-12-02 (those marked READ_ON_RELEASE on 2026-12-04) in the search tool's stored
copies of the pages named; the stores change
these pages without notice, so `apply_overrides` lets etdeploy.toml's [limits] replace any
figure without a release.

Google Play measures the compressed download size (Play Console's own computation;
bundletool estimates it with gzip, see compress.py). Apple measures uncompressed, thinned
sizes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from etdeploy.errors import UsageError
from etdeploy.units import format_bytes, parse_size

READ_ON = "2026-12-02"
# The AI-pack deliveries and the On-Demand Resources hosting totals (release sets, issue 25).
READ_ON_RELEASE = "2026-12-04"

PLAY_SIZE_PAGE = "https://support.google.com/googleplay/android-developer/answer/9859372"
PLAY_AI_PAGE = "https://developer.android.com/google/play/on-device-ai"
PLAY_APK_PAGE = "https://developer.android.com/google/play/expansion-files"
APPLE_BUILD_PAGE = (
    "https://developer.apple.com/help/app-store-connect/reference/maximum-build-file-sizes"
)
APPLE_ODR_PAGE = (
    "https://developer.apple.com/help/app-store-connect/reference/on-demand-resources-size-limits"
)
APPLE_BA_PAGE = (
    "https://developer.apple.com/help/app-store-connect/reference/"
    "apple-hosted-asset-pack-size-limits"
)
# No Apple page in the stored copies states the cellular prompt; these third-party pages do.
CELLULAR_PAGE = (
    "https://is.jablickar.cz/jak-na-iphone-povolit-stahovani-velkych-aplikaci-z-app-store-pres-"
    "mobilni-data/ (third party; Apple's Settings > App Store > App Downloads, iOS 13+)"
)

STORES: tuple[str, ...] = ("play", "appstore")
# What is measured against a limit.
DOWNLOAD = "download"  # compressed download (deflate level 6, bundletool's estimate)
RAW = "raw"  # uncompressed bytes on disk

# Severity: a "limit" rejects an upload; a "conditional" limit applies only under a
# condition the tool cannot see (deployment target, invocation kind), so being over it warns;
# a "warning" never rejects.
LIMIT = "limit"
CONDITIONAL = "conditional"
WARNING = "warning"


@dataclass(frozen=True)
class Limit:
    key: str  # dotted name, the [limits] key in etdeploy.toml
    store: str
    label: str
    bytes: int
    measure: str  # DOWNLOAD | RAW
    severity: str  # LIMIT | CONDITIONAL | WARNING
    source: str
    read_on: str = READ_ON
    note: str | None = None
    # Whether exactly `bytes` fits: "limit 500 MB" and "doesn't exceed" do; Apple's "must be
    # less than 4GB" does not.
    inclusive: bool = True

    @property
    def largest_fitting_bytes(self) -> int:
        return self.bytes if self.inclusive else self.bytes - 1


_MB = 10**6
_GB = 10**9

_DEFAULTS: tuple[Limit, ...] = (
    # Google Play, compressed download size.
    Limit(
        "play.base", "play", "Play base module", 500 * _MB, DOWNLOAD, LIMIT, PLAY_SIZE_PAGE,
        note="the newest copy of the page says 500 MB; older copies said 200 MB",
    ),
    Limit(
        "play.feature", "play", "Play feature module (each)", 500 * _MB, DOWNLOAD, LIMIT,
        PLAY_SIZE_PAGE, note="the newest copy of the page says 500 MB; older copies said 200 MB",
    ),
    Limit(
        "play.asset-pack", "play", "Play asset pack (each)", 1500 * _MB, DOWNLOAD, LIMIT,
        PLAY_SIZE_PAGE, note="install-time, fast-follow and on-demand packs alike",
    ),
    Limit(
        "play.modules-and-install-time", "play", "Play all modules + install-time packs",
        4 * _GB, DOWNLOAD, LIMIT, PLAY_SIZE_PAGE,
        note="cumulative: add the rest of the app with --extra",
    ),
    Limit(
        "play.on-demand-and-fast-follow", "play", "Play on-demand + fast-follow packs",
        4 * _GB, DOWNLOAD, LIMIT, PLAY_SIZE_PAGE,
        note="cumulative; 30 GB for Android XR and Play Partner Program for Games titles",
    ),
    Limit(
        "play.ai-pack", "play", "Play AI pack (each)", 1500 * _MB, DOWNLOAD, LIMIT, PLAY_AI_PAGE,
    ),
    Limit(
        "play.ai-packs-total", "play", "Play app version, AI packs included", 4 * _GB, DOWNLOAD,
        LIMIT, PLAY_AI_PAGE, note="cumulative app size of any version built from the bundle",
    ),
    Limit(
        "play.apk", "play", "Play legacy APK", 100 * _MB, DOWNLOAD, LIMIT, PLAY_APK_PAGE,
        note="new apps must ship App Bundles (since August 2021)",
    ),
    # Apple App Store, uncompressed size.
    Limit(
        "appstore.app", "appstore", "App Store app (uncompressed)", 4 * _GB, RAW, LIMIT,
        APPLE_BUILD_PAGE, note="the page says the total must be less than 4 GB, so 4 GB itself "
        "is over", inclusive=False,
    ),
    Limit(
        "appstore.cellular-prompt", "appstore", "App Store cellular download prompt", 200 * _MB,
        RAW, WARNING, CELLULAR_PAGE,
        note="not a rejection: since iOS 13 users choose whether to download over 200 MB on "
        "cellular",
    ),
    Limit(
        "appstore.app-clip", "appstore", "App Clip, iOS 16+", 15 * _MB, RAW, LIMIT,
        APPLE_BUILD_PAGE, note="uncompressed thinned variant; minimum deployment target iOS 16",
    ),
    Limit(
        "appstore.app-clip-pre-ios16", "appstore", "App Clip, before iOS 16", 10 * _MB, RAW,
        CONDITIONAL, APPLE_BUILD_PAGE, note="applies when the App Clip supports iOS 15 or earlier",
    ),
    Limit(
        "appstore.app-clip-ios17-digital", "appstore", "App Clip, iOS 17+ digital only",
        100 * _MB, RAW, CONDITIONAL, APPLE_BUILD_PAGE,
        note="only for App Clips invoked digitally (web, Spotlight), iOS 17+ only",
    ),
    Limit(
        "appstore.odr-asset-pack", "appstore", "On-Demand Resources asset pack, iOS 18+",
        8 * _GB, RAW, LIMIT, APPLE_ODR_PAGE, note="each thinned asset pack",
    ),
    Limit(
        "appstore.odr-asset-pack-pre-ios18", "appstore", "On-Demand Resources asset pack, "
        "before iOS 18", 512 * _MB, RAW, CONDITIONAL, APPLE_ODR_PAGE,
        note="applies when the app supports iOS/iPadOS 17 or earlier",
    ),
    Limit(
        "appstore.odr-hosted", "appstore", "On-Demand Resources hosted, iOS 18+", 70 * _GB, RAW,
        LIMIT, APPLE_ODR_PAGE, read_on=READ_ON_RELEASE,
        note="total of the thinned asset packs the App Store hosts for the app",
    ),
    Limit(
        "appstore.odr-hosted-pre-ios18", "appstore", "On-Demand Resources hosted, before iOS 18",
        20 * _GB, RAW, CONDITIONAL, APPLE_ODR_PAGE, read_on=READ_ON_RELEASE,
        note="applies when the app supports iOS/iPadOS 17 or earlier",
    ),
    Limit(
        "appstore.background-assets", "appstore", "Apple-hosted Background Assets, all packs",
        200 * _GB, RAW, LIMIT, APPLE_BA_PAGE,
        note="total over all asset pack IDs (largest version of each); Apple's developer "
        "documentation calls it 200 GB of compressed assets, raw size is the safe side",
    ),
)  # fmt: skip

# Which limits each --delivery is checked against.
DELIVERIES: dict[str, tuple[str, tuple[str, ...]]] = {
    "base": ("play", ("play.base", "play.modules-and-install-time")),
    "feature": ("play", ("play.feature", "play.modules-and-install-time")),
    "install-time": ("play", ("play.asset-pack", "play.modules-and-install-time")),
    "fast-follow": ("play", ("play.asset-pack", "play.on-demand-and-fast-follow")),
    "on-demand": ("play", ("play.asset-pack", "play.on-demand-and-fast-follow")),
    "ai-pack": ("play", ("play.ai-pack", "play.ai-packs-total")),
    # An AI pack is an asset pack of type "ai-pack" (bundletool's AndroidManifest.java maps
    # both to ASSET_MODULE, read 2026-12-04), so it also counts where Play's size page puts
    # asset packs of its delivery mode: install-time with the modules, the others together.
    "ai-pack-install-time": (
        "play",
        ("play.ai-pack", "play.ai-packs-total", "play.modules-and-install-time"),
    ),
    "ai-pack-fast-follow": (
        "play",
        ("play.ai-pack", "play.ai-packs-total", "play.on-demand-and-fast-follow"),
    ),
    "ai-pack-on-demand": (
        "play",
        ("play.ai-pack", "play.ai-packs-total", "play.on-demand-and-fast-follow"),
    ),
    "apk": ("play", ("play.apk",)),
    "app": ("appstore", ("appstore.app", "appstore.cellular-prompt")),
    "app-clip": (
        "appstore",
        (
            "appstore.app-clip",
            "appstore.app-clip-pre-ios16",
            "appstore.app-clip-ios17-digital",
        ),
    ),
    "odr": ("appstore", ("appstore.odr-asset-pack", "appstore.odr-asset-pack-pre-ios18")),
    # All of an app's On-Demand Resources together (a release's Apple variants).
    "odr-hosted": ("appstore", ("appstore.odr-hosted", "appstore.odr-hosted-pre-ios18")),
    "background-assets": ("appstore", ("appstore.background-assets",)),
}
DEFAULT_DELIVERY = {"play": "base", "appstore": "app"}


def default_limits() -> dict[str, Limit]:
    """A fresh copy of the built-in table, keyed by Limit.key."""
    return {limit.key: limit for limit in _DEFAULTS}


def _flatten(mapping: Mapping[str, object], prefix: str = "") -> dict[str, object]:
    flat: dict[str, object] = {}
    for key, value in mapping.items():
        full = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(_flatten(value, f"{full}."))
        else:
            flat[full] = value
    return flat


def apply_overrides(table: Mapping[str, Limit], mapping: Mapping[str, object]) -> dict[str, Limit]:
    """A copy of `table` with sizes replaced from `mapping` (etdeploy.toml's [limits]).

    Keys are Limit keys, dotted ("play.base" = "150MB") or nested ([limits.play] base = ...).
    An unknown key or a value that is not a size raises UsageError naming `limits.<key>`.
    """
    out = dict(table)
    for key, value in _flatten(mapping).items():
        if key not in out:
            known = ", ".join(sorted(out))
            raise UsageError(f"limits.{key}: no such limit", f"known limits: {known}")
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise UsageError(f"limits.{key}: expected a size, got {value!r}",
                             f'write {key} = "150MB" (or bytes)')  # fmt: skip
        out[key] = replace(out[key], bytes=parse_size(value, what=f"limits.{key}"), note=(
            f"overridden in [limits] (built-in {format_bytes(out[key].bytes)})"
        ))  # fmt: skip
    return out


def stores_for(store: str, *, what: str = "--store") -> tuple[str, ...]:
    """The stores `store` names (play, appstore, or all of them); UsageError naming `what`."""
    if store not in (*STORES, "all"):
        raise UsageError(f"{what} {store!r}: not a store", "use play, appstore or all")
    return STORES if store == "all" else (store,)


def select_limits(
    table: Mapping[str, Limit], store: str, deliveries: Iterable[str] | None
) -> list[Limit]:
    """The limits to check for `store` (play, appstore, all) and the chosen deliveries.

    With no deliveries: each chosen store's default (Play base module, App Store app).
    """
    stores = stores_for(store)
    chosen = list(dict.fromkeys(deliveries or ()))
    if not chosen:
        chosen = [DEFAULT_DELIVERY[s] for s in stores]
    keys: list[str] = []
    for delivery in chosen:
        if delivery not in DELIVERIES:
            raise UsageError(
                f"--delivery {delivery!r}: not a delivery",
                f"use one of: {', '.join(DELIVERIES)}",
            )
        owner, limit_keys = DELIVERIES[delivery]
        if owner not in stores:
            raise UsageError(
                f"--delivery {delivery} is a {owner} delivery, but --store is {store}",
                f"use --store {owner} or --store all",
            )
        keys.extend(k for k in limit_keys if k not in keys)
    return [table[k] for k in keys]

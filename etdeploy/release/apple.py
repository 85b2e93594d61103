"""Apple's side of a release: one asset pack per variant the app may choose, and the
Info.plist keys the app needs for them.

The App Store does not target by device: the app chooses (selection.json's "apple"
rules) and asks for that pack. Each pack is written as `xcrun ba-package` takes it:

    apple/<assetPackID>/Manifest.json     assetPackID, downloadPolicy, fileSelectors, platforms
    apple/<assetPackID>/<file>.pte
    apple/Info.plist.fragment             keys to merge into the app's Info.plist

Formats, read 2026-12-04:
- the manifest: the template `xcrun ba-package template` writes (Apple developer forums
  attachment 6eeeed59-0ed8-40c7-bee7-b12b919411c7): "assetPackID"; "downloadPolicy" with one
  of "essential" or "prefetch" (each with "installationEventTypes", e.g. "firstInstallation",
  "subsequentUpdate") or "onDemand" (an empty object); "fileSelectors", each {"file": path} or
  {"directory": path} relative to where the tool runs; "platforms".
- Info.plist (developer.apple.com/documentation/bundleresources/information-property-list):
  BAHasManagedAssetPacks and BAUsesAppleHosting (Booleans), BAAppGroupID (the app group
  shared with the downloader extension), BAEssentialMaxInstallSize (the essential packs'
  uncompressed bytes), BAMaxInstallSize (the uncompressed bytes of the non-essential packs
  downloaded right after installation: prefetch), BAInitialDownloadRestrictions >
  BAEssentialDownloadAllowance (the essential packs' download bytes).
With On-Demand Resources (delivery = "odr") packs are Xcode's tags instead: no manifest and
no Background Assets keys are written; selection.json names the tag (the asset pack id).
"""

from __future__ import annotations

import json
import plistlib
from collections.abc import Sequence
from typing import Any

from etdeploy.release.selection import AppleEntry, AppleTable
from etdeploy.release.spec import AppleSection

MANIFEST = "Manifest.json"
INFO_PLIST_FRAGMENT = "Info.plist.fragment"
INSTALLATION_EVENTS = ("firstInstallation", "subsequentUpdate")


def pack_manifest(section: AppleSection, entry: AppleEntry) -> bytes:
    policy: dict[str, Any]
    if section.download_policy == "onDemand":
        policy = {"onDemand": {}}
    else:
        policy = {section.download_policy: {"installationEventTypes": list(INSTALLATION_EVENTS)}}
    document = {
        "assetPackID": entry.pack_id,
        "downloadPolicy": policy,
        # Relative to the pack's folder: run `xcrun ba-package` there.
        "fileSelectors": [{"file": f.path.rsplit("/", 1)[-1]} for f in entry.files],
        "platforms": list(section.platforms),
    }
    return (json.dumps(document, indent=2) + "\n").encode()


def _entries(table: AppleTable) -> Sequence[AppleEntry]:
    """Each pack once (several rules may share a variant, hence a pack)."""
    return list({e.pack_id: e for e in (*table.rules, table.fallback)}.values())


def info_plist_fragment(section: AppleSection, table: AppleTable) -> bytes:
    packs = _entries(table)

    def total(policy: str, measure: str) -> int:
        if section.download_policy != policy:
            return 0
        return sum(getattr(f, measure) for e in packs for f in e.files)

    keys: dict[str, Any] = {
        "BAHasManagedAssetPacks": True,
        "BAUsesAppleHosting": True,
        "BAEssentialMaxInstallSize": total("essential", "size_bytes"),
        "BAMaxInstallSize": total("prefetch", "size_bytes"),
        "BAInitialDownloadRestrictions": {
            "BAEssentialDownloadAllowance": total("essential", "download_bytes"),
        },
    }
    if section.app_group_id:
        keys["BAAppGroupID"] = section.app_group_id
    return plistlib.dumps(keys, fmt=plistlib.FMT_XML, sort_keys=True)

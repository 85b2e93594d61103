"""Play's AI-pack layout for a release: the pack, its manifest, and the device-targeting
config.

    play/
      device_targeting_config.xml                the groups, in priority order
      <pack>/AiPackManifest.xml                  dist:type="ai-pack" and the delivery mode
      <pack>/build.gradle                        the AI pack plugin's aiPack { } block
      <pack>/src/main/assets/<dir>#group_<g>/    each group's variant
      <pack>/src/main/assets/<dir>#group_other/  the fallback

Formats, as read on 2026-12-04:
- device_targeting_config.xml: element and attribute names of Play's "Device targeting
  (beta)" and "Play for On-device AI (beta)" pages (developer.android.com/google/play/
  device-targeting, .../on-device-ai): config:device-targeting-config in namespace
  http://schemas.android.com/apk/config; config:device-group name=; config:device-selector
  ram-min-bytes= ram-max-bytes=; config:included-device-id / config:excluded-device-id
  brand= device=; config:required-system-feature / config:forbidden-system-feature name=;
  config:system-on-chip manufacturer= model=. "other" is implicit, never written.
- AiPackManifest.xml: the module manifest bundletool reads for an AI pack (bundletool's
  AndroidManifest.java: MODULE_TYPE_AI_VALUE = "ai-pack" in the distribution namespace
  http://schemas.android.com/apk/distribution; AndroidManifestValidator: an asset pack's
  manifest holds only dist:module, which must state its fusing; ManifestDeliveryElement: one
  of install-time, fast-follow, on-demand), named as LiteRT's AI-pack exporter names it.
- build.gradle: the `com.android.ai-pack` plugin block of the on-device-ai page.
- The #group_ folder suffixes: on-device-ai's "Use device targeting for your AI packs";
  the app opens <dir>/<file> without the suffix.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence

from etdeploy.release.selection import TableGroup
from etdeploy.release.spec import Selector

CONFIG_NS = "http://schemas.android.com/apk/config"
DIST_NS = "http://schemas.android.com/apk/distribution"
ANDROID_NS = "http://schemas.android.com/apk/res/android"
TARGETING_CONFIG = "device_targeting_config.xml"
PACK_MANIFEST = "AiPackManifest.xml"
GROUP_SUFFIX = "#group_"


def group_folder(asset_dir: str, group: str) -> str:
    return f"{asset_dir}{GROUP_SUFFIX}{group}"


def _xml(root: ET.Element) -> bytes:
    ET.indent(root, space="    ")
    text: bytes = ET.tostring(root, encoding="utf-8", xml_declaration=True)
    return text + b"\n"


def _selector_element(parent: ET.Element, selector: Selector) -> None:
    attrs: dict[str, str] = {}
    if selector.ram_min_bytes is not None:
        attrs["ram-min-bytes"] = str(selector.ram_min_bytes)
    if selector.ram_max_bytes is not None:
        attrs["ram-max-bytes"] = str(selector.ram_max_bytes)
    element = ET.SubElement(parent, f"{{{CONFIG_NS}}}device-selector", attrs)
    for tag, ids in (("included-device-id", selector.device_ids),
                     ("excluded-device-id", selector.exclude_device_ids)):  # fmt: skip
        for device_id in ids:
            id_attrs = {"brand": device_id.brand}
            if device_id.device is not None:
                id_attrs["device"] = device_id.device
            ET.SubElement(element, f"{{{CONFIG_NS}}}{tag}", id_attrs)
    for tag, names in (("required-system-feature", selector.features),
                       ("forbidden-system-feature", selector.forbid_features)):  # fmt: skip
        for name in names:
            ET.SubElement(element, f"{{{CONFIG_NS}}}{tag}", {"name": name})
    for chip in selector.socs:
        ET.SubElement(element, f"{{{CONFIG_NS}}}system-on-chip",
                      {"manufacturer": chip.manufacturer, "model": chip.model})  # fmt: skip


def targeting_config_xml(groups: Sequence[TableGroup]) -> bytes:
    """The device-targeting config: `groups` in priority order (without "other")."""
    ET.register_namespace("config", CONFIG_NS)
    root = ET.Element(f"{{{CONFIG_NS}}}device-targeting-config")
    for group in groups:
        element = ET.SubElement(root, f"{{{CONFIG_NS}}}device-group", {"name": group.name})
        for selector in group.selectors:
            _selector_element(element, selector)
    return _xml(root)


def pack_manifest_xml(delivery: str) -> bytes:
    """The AI pack's module manifest: type ai-pack, fused into standalone APKs (bundletool
    requires every non-base module to say), and its one delivery mode."""
    ET.register_namespace("dist", DIST_NS)
    ET.register_namespace("android", ANDROID_NS)
    root = ET.Element("manifest")
    module = ET.SubElement(root, f"{{{DIST_NS}}}module", {f"{{{DIST_NS}}}type": "ai-pack"})
    ET.SubElement(module, f"{{{DIST_NS}}}fusing", {f"{{{DIST_NS}}}include": "true"})
    deliver = ET.SubElement(module, f"{{{DIST_NS}}}delivery")
    ET.SubElement(deliver, f"{{{DIST_NS}}}{delivery}")
    return _xml(root)


def pack_gradle(pack: str, delivery: str) -> bytes:
    """The AI pack module's build.gradle (Groovy), as the on-device-ai page gives it."""
    return (
        "// Written by `etdeploy release build`: the AI pack module of this release.\n"
        "plugins {\n    id 'com.android.ai-pack'\n}\n\n"
        "aiPack {\n"
        f'    packName = "{pack}"\n'
        "    dynamicDelivery {\n"
        f'        deliveryType = "{delivery}"\n'
        "    }\n"
        "}\n"
    ).encode()

"""What a device says of itself: Android's getprop, MemTotal and pm lines parsed as a
phone prints them; a host's own properties read from this machine."""

from __future__ import annotations

import platform
import re
from pathlib import Path

from etdeploy.devices.local import LocalDevice
from etdeploy.release.properties import android_properties, read_properties

GETPROP = """[ro.product.brand]: [samsung]
[ro.product.device]: [e3q]
[ro.product.model]: [SM-S928B]
[ro.build.version.sdk]: [34]
[ro.soc.manufacturer]: [QTI]
[ro.soc.model]: [SM8650]
[ro.product.cpu.abi]: [arm64-v8a]
"""
MEMINFO = "MemTotal:       11280000 kB\nMemFree:         1000000 kB\n"


def test_a_phones_getprop_meminfo_and_features_become_its_properties() -> None:
    features = (
        "feature:android.hardware.camera\nfeature:android.hardware.vulkan.level=1\npm_exit=0\n"
    )
    props = android_properties(GETPROP, MEMINFO, features)
    assert (props.brand, props.device, props.model, props.sdk) == ("samsung", "e3q", "SM-S928B", 34)
    assert (props.soc_manufacturer, props.soc_model, props.abi) == ("QTI", "SM8650", "arm64-v8a")
    assert props.ram_bytes == 11_280_000 * 1024  # the kernel's kB are KiB
    assert props.features == {"android.hardware.camera", "android.hardware.vulkan.level"}
    assert props.soc_known and props.unknown == ()


def test_what_a_phone_cannot_say_is_listed_not_guessed() -> None:
    old = GETPROP.replace("[34]", "[30]").replace("[QTI]", "[]").replace("[SM8650]", "[]")
    props = android_properties(
        old, "", "/system/bin/sh: pm: inaccessible or not found\npm_exit=127\n"
    )
    assert props.ram_bytes is None and props.features == frozenset() and not props.soc_known
    assert any(u.startswith("RAM:") for u in props.unknown)
    assert any("pm list features" in u for u in props.unknown)
    assert any(u.startswith("SoC:") for u in props.unknown)


def test_this_machine_reports_its_own_memtotal_and_architecture(tmp_path: Path) -> None:
    with LocalDevice(workdir=tmp_path) as device:
        props = read_properties(device)
    found = re.search(r"^MemTotal:\s+(\d+) kB", Path("/proc/meminfo").read_text(), re.MULTILINE)
    assert found is not None and props.ram_bytes == int(found.group(1)) * 1024
    assert props.abi == platform.machine() and props.os == "linux"
    assert props.brand == "" and props.sdk is None
    assert any("not an Android device" in u for u in props.unknown)

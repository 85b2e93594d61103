"""What a device says of itself, in the terms a store chooses a variant by.

An Android phone (adb), in one shell round trip:
- `getprop`: ro.soc.manufacturer, ro.soc.model (Build.SOC_*), ro.product.brand and
  ro.product.device (Build.BRAND, Build.DEVICE: Play's device id), ro.product.model,
  ro.build.version.sdk, ro.product.cpu.abi;
- /proc/meminfo's MemTotal: the RAM Play's device catalog and ActivityManager.MemoryInfo
  .totalMem report (the kernel's total, a little under the marketed size);
- `pm list features`: the system features (PackageManager.getSystemAvailableFeatures), one
  `feature:NAME` (or `feature:NAME=VERSION`) a line.
A host over SSH (or this machine): uname, MemTotal (Linux) or hw.memsize (macOS), the SoC
the kernel exposes in /sys/devices/soc0 (family, machine), the board's device-tree model or
the Mac's hw.model. It has no Play properties (brand, SDK, features): those stay empty and
are listed as unknown, so a group that needs them does not hold it.
"""

from __future__ import annotations

import re
import shlex

from etdeploy.devices.adb.wire import parse_getprop
from etdeploy.devices.base import Device
from etdeploy.errors import DeviceError
from etdeploy.release.rules import DeviceProperties

_SECTION = "----etdeploy-release----"
_ANDROID_SCRIPT = (
    f"getprop; echo {_SECTION}; cat /proc/meminfo; echo {_SECTION}; "
    "pm list features 2>&1; echo pm_exit=$?"
)
_HOST_SCRIPT = (
    'printf "os=%s\\n" "$(uname -s)"; printf "machine=%s\\n" "$(uname -m)"; '
    "if [ -r /proc/meminfo ]; then sed -n 's/^MemTotal: *\\([0-9]*\\) kB/memtotal_kb=\\1/p' "
    "/proc/meminfo; fi; "
    'if [ "$(uname -s)" = Darwin ]; then printf "memsize=%s\\n" "$(sysctl -n hw.memsize)"; '
    'printf "model=%s\\n" "$(sysctl -n hw.model)"; fi; '
    "for f in family machine; do if [ -r /sys/devices/soc0/$f ]; then "
    'printf "soc_%s=%s\\n" "$f" "$(cat /sys/devices/soc0/$f)"; fi; done; '
    "if [ -r /proc/device-tree/model ]; then "
    'printf "model=%s\\n" "$(tr -d \'\\000\' < /proc/device-tree/model)"; fi'
)
DEADLINE_S = 60.0


def _run(device: Device, script: str, what: str) -> str:
    result = device.run(["sh", "-c", script], deadline_s=DEADLINE_S)
    if result.timed_out or result.exit_code != 0:
        raise DeviceError(
            f"reading the {what} failed (exit {result.exit_code})",
            "is the device responsive? `etdeploy doctor` checks it",
            device=device.name, command=shlex.join(["sh", "-c", script]),
            log=(result.stdout + result.stderr)[-4000:],
        )  # fmt: skip
    return result.stdout


def parse_memtotal(text: str) -> int | None:
    """MemTotal in bytes (/proc/meminfo writes kB, which the kernel means as KiB)."""
    match = re.search(r"^MemTotal:\s+(\d+)\s*kB", text, re.MULTILINE)
    return int(match.group(1)) * 1024 if match else None


def parse_features(text: str) -> frozenset[str]:
    return frozenset(
        line.strip()[len("feature:") :].split("=", 1)[0]
        for line in text.splitlines()
        if line.strip().startswith("feature:")
    )


def android_properties(getprop: str, meminfo: str, features: str) -> DeviceProperties:
    """The properties from what `getprop`, /proc/meminfo and `pm list features` printed
    (`features` ends with the line pm_exit=N)."""
    props = parse_getprop(getprop)
    pm_ok = re.search(r"^pm_exit=0$", features, re.MULTILINE) is not None
    ram = parse_memtotal(meminfo)
    sdk_text = props.get("ro.build.version.sdk", "")
    unknown = []
    if ram is None:
        unknown.append("RAM: no MemTotal in /proc/meminfo")
    if not pm_ok:
        said = features.strip().splitlines()[0] if features.strip() else ""
        unknown.append(f"system features: `pm list features` failed ({said})")
    if not props.get("ro.soc.model"):
        unknown.append("SoC: no ro.soc.model (Android 12 / API 31 added it)")
    return DeviceProperties(
        ram_bytes=ram,
        brand=props.get("ro.product.brand", ""),
        device=props.get("ro.product.device", ""),
        sdk=int(sdk_text) if sdk_text.isdigit() else None,
        soc_manufacturer=props.get("ro.soc.manufacturer", ""),
        soc_model=props.get("ro.soc.model", ""),
        features=parse_features(features) if pm_ok else frozenset(),
        model=props.get("ro.product.model", ""),
        abi=props.get("ro.product.cpu.abi", ""),
        os="android",
        unknown=tuple(unknown),
    )


def host_properties(text: str) -> DeviceProperties:
    """The properties from _HOST_SCRIPT's key=value lines."""
    facts: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key not in facts:
            facts[key] = value.strip()
    os_name = facts.get("os", "").lower()
    ram: int | None = None
    if facts.get("memtotal_kb", "").isdigit():
        ram = int(facts["memtotal_kb"]) * 1024
    elif facts.get("memsize", "").isdigit():
        ram = int(facts["memsize"])
    unknown = ["brand, device, SDK, system features: not an Android device"]
    if ram is None:
        unknown.append("RAM: neither /proc/meminfo nor hw.memsize answered")
    if not facts.get("soc_machine"):
        unknown.append("SoC: no /sys/devices/soc0 on this host")
    return DeviceProperties(
        ram_bytes=ram,
        soc_manufacturer=facts.get("soc_family", ""),
        soc_model=facts.get("soc_machine", ""),
        model=facts.get("model", ""),
        abi=facts.get("machine", ""),
        os=os_name,
        family="Mac" if os_name == "darwin" else "",
        unknown=tuple(unknown),
    )


def read_properties(device: Device) -> DeviceProperties:
    """The device's own properties, read from it now."""
    if device.transport == "adb":
        text = _run(device, _ANDROID_SCRIPT, "phone's properties")
        getprop, _, rest = text.partition(_SECTION)
        meminfo, _, features = rest.partition(_SECTION)
        return android_properties(getprop, meminfo, features)
    return host_properties(_run(device, _HOST_SCRIPT, "host's properties"))

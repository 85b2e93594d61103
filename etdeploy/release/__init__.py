"""Release sets: one artefact per device class, packaged for the stores, and the proof
that each class gets a variant that works there.

    spec.py        the [release] table: variants, groups in Play's vocabulary, Apple rules
    rules.py       which group holds a device and what it is delivered (Play's rules)
    variants.py    each variant built (etdeploy.builder, cached) and sized for its delivery
    selection.py   selection.json: the table an app reads, and the reference selector's
    play.py        the AI pack, its manifest and device_targeting_config.xml
    apple.py       Background Assets pack manifests and the Info.plist keys
    package.py     `release build`: all of it into OUT, whole or not at all
    properties.py  what a device says of itself (getprop, MemTotal, pm list features; uname)
    proof.py       `release check`: each device's group and variant, run there

Nothing here imports torch at module level; building a variant does, through the builder.
"""

from __future__ import annotations

from etdeploy.release.rules import DeviceProperties, Selected
from etdeploy.release.selection import Selection
from etdeploy.release.spec import ReleaseSpec, load_spec


def select(properties: DeviceProperties, selection: Selection) -> Selected:
    """The reference selector: the group and variant Play delivers to a device of these
    properties under `selection` (selection.json, `Selection.load(path)`)."""
    return selection.select(properties)


__all__ = ["DeviceProperties", "ReleaseSpec", "Selected", "Selection", "load_spec", "select"]

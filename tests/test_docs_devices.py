"""docs/devices.md lists every key a [devices.NAME] table takes, per transport, as
the code reads them: a key added to a transport and not documented fails here."""

from __future__ import annotations

import re
from pathlib import Path

from etdeploy.devices.registry import ADB_KEYS, COMMON_KEYS, LOCAL_KEYS, TRANSPORTS
from etdeploy.devices.simulator import SIMULATOR_SETTING_TYPES
from etdeploy.devices.ssh.connection import SSH_SETTING_TYPES

DOC = Path(__file__).resolve().parent.parent / "docs" / "devices.md"


def _sections() -> dict[str, set[str]]:
    """The keys in the first column of each section's table, by section heading."""
    found: dict[str, set[str]] = {}
    heading = ""
    for line in DOC.read_text().splitlines():
        if line.startswith("## "):
            heading = line
            found[heading] = set()
        elif heading and (key := re.match(r"\| `([a-z_]+)` \|", line)):
            found[heading].add(key.group(1))
    return found


def _section(transport: str) -> set[str]:
    (keys,) = [k for h, k in _sections().items() if f'transport = "{transport}"' in h]
    return keys


def test_every_transport_has_its_section() -> None:
    headings = " ".join(_sections())
    assert all(f'`transport = "{name}"`' in headings for name in TRANSPORTS)


def test_each_section_lists_exactly_the_keys_its_transport_takes() -> None:
    assert _section("local") == set(LOCAL_KEYS)
    assert _section("adb") == set(ADB_KEYS)
    assert _section("ssh") == set(SSH_SETTING_TYPES)
    assert _section("ios-simulator") == set(SIMULATOR_SETTING_TYPES)
    common = next(k for h, k in _sections().items() if "every table" in h)
    assert common == {*COMMON_KEYS, "transport"}


def test_the_ssh_keys_a_user_asked_about_are_there() -> None:
    assert {"port", "key_filename", "known_hosts"} <= _section("ssh")

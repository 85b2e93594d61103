"""etdeploy.toml: typed settings, and errors that name the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from etdeploy.config import find_config, load_config
from etdeploy.errors import UsageError


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "etdeploy.toml"
    path.write_text(text)
    return path


def test_devices_limits_and_run_settings_are_read(tmp_path: Path) -> None:
    config = load_config(
        write(
            tmp_path,
            """
[run]
iterations = 20
deadline_s = 30.5
[devices.pixel8]
serial = "ABC123"
[devices.mac]
transport = "ssh"
host = "mac.local"
[limits]
play_base = "150MB"
""",
        )
    )
    assert config.run == {"iterations": 20, "deadline_s": 30.5}
    assert config.devices["pixel8"].transport == "adb"
    assert config.devices["pixel8"].settings == {"serial": "ABC123"}
    assert config.devices["mac"].transport == "ssh"
    assert config.limits == {"play_base": "150MB"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[run]\niterations = "ten"', "run.iterations: expected int, got 'ten'"),
        ("[run]\nkeep = 1", "run.keep: expected bool"),
        ("[run]\nwarmup = true", "run.warmup: expected int"),
        ("[run]\nspeed = 1", "unknown key run.speed"),
        ("[run]\nmax_memory = 3.5", "run.max_memory: expected str or int, got 3.5"),
        ('[run]\nshapes = "min"', "run.shapes: expected list"),
        ("[colors]\nx = 1", "unknown section [colors]"),
        ('[devices.p]\ntransport = "usb"', "devices.p.transport: unknown transport 'usb'"),
        ("[run\n", "not valid TOML"),
    ],
)
def test_a_bad_value_names_its_key(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(UsageError, match=r"etdeploy\.toml") as info:
        load_config(write(tmp_path, text))
    assert message in info.value.message
    assert info.value.hint


def test_the_nearest_config_in_a_parent_directory_is_found(tmp_path: Path) -> None:
    path = write(tmp_path, "[run]\n")
    deep = tmp_path / "a" / "b"
    deep.mkdir(parents=True)
    assert find_config(deep) == path.resolve()

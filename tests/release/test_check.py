"""`etdeploy release check` on four loopback phones at once, each of its own class:

    pixel     Google Tensor G3, 8 GB           -> high_ram   (fp32)
    galaxy    QTI SM8650, 12 GB                -> snapdragon (fp32), also in high_ram
    budget    MediaTek, 3 GB                   -> low_ram    (int8)
    boundary  Unisoc, exactly 4 GiB (low_ram's exclusive max), Android 11 -> no group: other (int8)

Each phone's properties come from the phone (getprop, /proc/meminfo, pm list features
through the real adb server); each gets the variant the rules give it, runs it with the
host runner (the loopback phone runs what it is sent on this machine) and verifies it on
real inputs against eager PyTorch. selection.json's reference selector must agree.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from etdeploy.cli import app
from etdeploy.release import DeviceProperties, Selection, select
from tests.release.conftest import EXAMPLE, BuiltRelease
from tests.support.adb_server import AdbTestbed, adb_testbed
from tests.support.device_config import write_config

pytestmark = pytest.mark.slow

FEATURES = ("android.hardware.camera", "android.hardware.vulkan.level", "android.software.webview")
PHONES: dict[str, dict[str, Any]] = {
    "pixel": {"mem_total_kb": 7_773_000, "system_features": FEATURES},  # DEFAULT_PROPERTIES: Pixel 8
    "galaxy": {
        "properties": {
            "ro.product.brand": "samsung", "ro.product.device": "e3q",
            "ro.product.model": "SM-S928B", "ro.product.name": "e3qxxx",
            "ro.soc.manufacturer": "QTI", "ro.soc.model": "SM8650", "ro.build.version.sdk": "34",
        },
        "mem_total_kb": 11_280_000, "system_features": FEATURES,
    },
    "budget": {
        "properties": {
            "ro.product.brand": "samsung", "ro.product.device": "a05", "ro.product.model": "SM-A055F",
            "ro.product.name": "a05xx", "ro.soc.manufacturer": "Mediatek",
            "ro.soc.model": "MT6769V/CZ", "ro.build.version.sdk": "34",
        },
        "mem_total_kb": 2_800_000, "system_features": FEATURES[:1],
    },
    "boundary": {
        "properties": {
            "ro.product.brand": "nokia", "ro.product.device": "ANT", "ro.product.model": "Nokia G21",
            "ro.product.name": "ant", "ro.soc.manufacturer": "", "ro.soc.model": "",
            "ro.build.version.sdk": "30",
        },
        "mem_total_kb": 4 * 1024 * 1024, "system_features": (),
    },
}  # fmt: skip
EXPECTED = {"pixel": ("high_ram", "fp32"), "galaxy": ("snapdragon", "fp32"),
            "budget": ("low_ram", "int8"), "boundary": ("other", "int8")}  # fmt: skip


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AdbTestbed]:
    with adb_testbed(tmp_path_factory.mktemp("adb"), PHONES) as testbed:
        yield testbed


@pytest.fixture(scope="module")
def config(bed: AdbTestbed, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from etdeploy.runner_build import ensure_runner

    runner = str(ensure_runner("host").directory)
    tables = {name: {"serial": bed.serial(name), "adb_port": bed.server.port, "runner": runner}
              for name in PHONES}  # fmt: skip
    return write_config(tmp_path_factory.mktemp("cfg") / "etdeploy.toml", tables)


def check(config: Path, out: Path, *devices: str) -> tuple[int, str, dict[str, Any]]:
    args = ["release", "check", str(EXAMPLE), "--config", str(config), "-n", "2",
            "--json", str(out)]  # fmt: skip
    for name in devices:
        args += ["-d", name]
    done = CliRunner().invoke(app, args, catch_exceptions=False)
    return done.exit_code, done.output, json.loads(out.read_text())


def test_four_phones_of_four_classes_each_get_and_verify_the_variant_the_rules_give_them(
    built_release: BuiltRelease, config: Path, tmp_path: Path
) -> None:
    code, output, proof = check(config, tmp_path / "proof.json", *PHONES)
    assert code == 0, output
    rows = {row["device"]: row for row in proof["devices"]}
    assert {n: (r["group"], r["variant"]) for n, r in rows.items()} == EXPECTED
    for row in rows.values():
        assert row["loads"] is True and row["verdict"] == "passed", row
        assert row["result"]["verdict"]["passed"] and not row["result"]["inputs"]["on_noise"]
    assert rows["galaxy"]["matched_groups"] == ["snapdragon", "high_ram"]
    assert rows["boundary"]["matched_groups"] == []
    # What the phones said of themselves, read over adb.
    galaxy = rows["galaxy"]["properties"]
    assert (galaxy["soc_manufacturer"], galaxy["soc_model"], galaxy["sdk"]) == ("QTI", "SM8650", 34)
    assert galaxy["ram_bytes"] == 11_280_000 * 1024 and galaxy["features"] == sorted(FEATURES)
    assert rows["boundary"]["properties"]["ram_bytes"] == 4 * 2**30
    assert proof["unproven"] == [] and proof["untried_groups"] == []
    # The report a person reads: each device, its group (and the other it is in), loads, verdict.
    assert "snapdragon (also in high_ram)" in output
    assert "4 of 4 device(s) verified their variant" in output
    # selection.json's reference selector agrees with the check on every device.
    table = Selection.load(built_release.out / "selection.json")
    for name, row in rows.items():
        chosen = select(DeviceProperties.from_json(row["properties"]), table)
        assert (chosen.group, chosen.variant) == EXPECTED[name]
        (delivered,) = table.group(chosen.group).files
        assert row["result"]["artifact"]["sha256"] == delivered.sha256


def test_a_variant_no_device_verified_is_listed_as_unproven(
    built_release: BuiltRelease, config: Path, tmp_path: Path
) -> None:
    code, output, proof = check(config, tmp_path / "proof.json", "pixel")
    assert code == 0, output
    assert proof["unproven"] == ["int8"]
    assert proof["untried_groups"] == ["snapdragon", "low_ram", "other"]
    assert "unproven: int8" in output


def test_a_model_without_samples_is_checked_on_the_inputs_given_and_this_machine_reads_well(
    tmp_path: Path,
) -> None:
    """`release check -d local` of a model that ships no samples: without inputs, one line
    and the hint that names --inputs (exit 2); with --inputs, the variant verified on them;
    this machine's properties read as what it is (no empty brand, no "SoC ? ?")."""
    models = Path(__file__).resolve().parents[1] / "data" / "models"
    spec = tmp_path / "release.toml"
    spec.write_text(
        '[release]\nname = "mlp"\n'
        f'model = "{models / "two_io.py"}:batch_mlp"\nfallback = "fp32"\n\n'
        '[release.variants.fp32]\nbackend = "xnnpack"\n'
    )
    t = np.arange(20, dtype=np.float64).reshape(4, 5)
    for i in range(3):  # four readings of five slow sensors, three windows
        np.save(tmp_path / f"window{i}.npy", np.sin(t / (7.0 + i) + i).astype(np.float32))
    config = write_config(tmp_path / "etdeploy.toml", {})
    args = ["release", "check", str(spec), "--config", str(config), "-d", "local", "-n", "1"]

    bare = CliRunner().invoke(app, args)
    assert bare.exit_code == 2, bare.output
    assert "local: no inputs to verify with" in bare.output
    assert "hint: give --inputs" in " ".join(bare.output.split())

    given = CliRunner().invoke(app, [*args, "--inputs", str(tmp_path / "window*.npy"),
                                     "--json", str(tmp_path / "proof.json")])  # fmt: skip
    assert given.exit_code == 0, given.output
    (row,) = json.loads((tmp_path / "proof.json").read_text())["devices"]
    assert row["verdict"] == "passed" and len(row["result"]["inputs"]["samples"]) == 3
    assert "/ ," not in given.output and "SoC ?" not in given.output
    assert f"{row['properties']['os']} {row['properties']['abi']}" in given.output

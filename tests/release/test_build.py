"""`etdeploy release build`: the example release as written to disk, and bad input that
leaves OUT as it was."""

from __future__ import annotations

import hashlib
import json
import plistlib
from pathlib import Path

import pytest
import xmlschema

from etdeploy.release import DeviceProperties, Selection, select
from tests.cli.conftest import assert_one_line_error, etdeploy
from tests.release.conftest import EXAMPLE, BuiltRelease

pytestmark = pytest.mark.slow

SCHEMAS = Path(__file__).parent / "schemas"
PACK_ASSETS = "play/digits/src/main/assets"


def tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def test_every_group_gets_its_variants_file_and_selection_json_says_which(
    built_release: BuiltRelease,
) -> None:
    out, release = built_release.out, built_release.release
    document = json.loads((out / "selection.json").read_text())
    groups = document["play"]["groups"]
    assert [(g["name"], g["priority"], g["variant"]) for g in groups] == [
        ("snapdragon", 1, "fp32"), ("high_ram", 2, "fp32"), ("low_ram", 3, "int8"),
        ("other", 4, "int8"),
    ]  # fmt: skip
    for group in groups:
        (entry,) = group["files"]
        assert entry["path"] == f"{PACK_ASSETS}/model#group_{group['name']}/digits.pte"
        assert entry["asset_path"] == "model/digits.pte"
        data = (out / entry["path"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == entry["sha256"]
        assert len(data) == entry["size_bytes"] and 0 < entry["download_bytes"] < len(data) + 64
        built = release.built(group["variant"])
        assert built is not None and built.sha256 == entry["sha256"]
    assert groups[0]["files"][0]["sha256"] != groups[2]["files"][0]["sha256"]  # fp32 vs int8
    qualcomm = {(c["manufacturer"], c["model"]) for c in groups[0]["selectors"][0]["socs"]}
    assert {("Qualcomm", "SM8650"), ("QTI", "SM8650")} <= qualcomm
    assert document["not_built"] == {}


def test_the_play_files_validate_and_the_table_reads_back_for_the_reference_selector(
    built_release: BuiltRelease,
) -> None:
    out = built_release.out
    xmlschema.XMLSchema11(str(SCHEMAS / "device_targeting_config.xsd")).validate(
        str(out / "play" / "device_targeting_config.xml"))  # fmt: skip
    xmlschema.XMLSchema11(str(SCHEMAS / "ai_pack_manifest.xsd")).validate(
        str(out / "play" / "digits" / "AiPackManifest.xml"))  # fmt: skip
    table = Selection.load(out / "selection.json")
    assert table == built_release.release.selection
    flagship = DeviceProperties(ram_bytes=12 * 2**30, brand="samsung", device="e3q", sdk=34,
                                soc_manufacturer="QTI", soc_model="SM8650")  # fmt: skip
    assert (select(flagship, table).group, select(flagship, table).variant) == (
        "snapdragon",
        "fp32",
    )


def test_the_apple_packs_and_info_plist_keys(built_release: BuiltRelease) -> None:
    out = built_release.out
    for variant in ("fp32", "int8"):
        manifest = json.loads((out / "apple" / f"digits-{variant}" / "Manifest.json").read_text())
        assert manifest == {
            "assetPackID": f"digits-{variant}", "downloadPolicy": {"onDemand": {}},
            "fileSelectors": [{"file": "digits.pte"}], "platforms": ["iOS"],
        }  # fmt: skip
        assert (out / "apple" / f"digits-{variant}" / "digits.pte").is_file()
    keys = plistlib.loads((out / "apple" / "Info.plist.fragment").read_bytes())
    assert keys["BAHasManagedAssetPacks"] is True and keys["BAUsesAppleHosting"] is True
    # On-demand packs are neither essential nor prefetched: nothing is promised at install.
    assert keys["BAEssentialMaxInstallSize"] == 0 and keys["BAMaxInstallSize"] == 0
    rules = json.loads((out / "selection.json").read_text())["apple"]["rules"]
    assert [(r["name"], r["variant"], r["asset_pack_id"]) for r in rules] == [
        ("pro", "fp32", "digits-fp32"), ("other", "int8", "digits-int8")]  # fmt: skip


def spec_with(tmp_path: Path, old: str, new: str) -> Path:
    text = EXAMPLE.read_text()
    assert old in text
    path = tmp_path / "release.toml"
    path.write_text(text.replace(old, new, 1))
    return path


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ('ram_min_bytes = "7500MB"', "ram_gigabytes = 8", "release.groups[1].ram_gigabytes: unknown key"),
        ('variant = "int8"\nram_max_bytes', 'variant = "npu"\nram_max_bytes', "no variant named 'npu'"),
        ('name = "high_ram"', 'name = "snapdragon"', "two groups are named 'snapdragon'"),
        ("[release.apple]", '[release.limits]\n"play.ai-pack" = "10kB"\n\n[release.apple]',
         "variant fp32 is over its delivery's limit"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_exit_2_and_out_keeps_the_earlier_release(
    built_release: BuiltRelease, tmp_path: Path, old: str, new: str, message: str
) -> None:
    out = tmp_path / "out"
    done = etdeploy("release", "build", EXAMPLE, "-o", out, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    before = tree(out)
    done = etdeploy("release", "build", spec_with(tmp_path, old, new), "-o", out, cwd=tmp_path)
    assert_one_line_error(done, 2, message)
    assert tree(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "release.toml"]  # no debris


def test_a_variant_that_cannot_be_built_here_is_an_error_or_listed_as_not_built(
    built_release: BuiltRelease, tmp_path: Path
) -> None:
    spec = spec_with(tmp_path, '[release.variants.int8]',
                     '[release.variants.npu]\nbackend = "qnn"\n\n[release.variants.int8]')  # fmt: skip
    spec.write_text(spec.read_text().replace('name = "snapdragon"\nvariant = "fp32"',
                                             'name = "snapdragon"\nvariant = "npu"'))  # fmt: skip
    out = tmp_path / "out"
    done = etdeploy("release", "build", spec, "-o", out, cwd=tmp_path)
    assert_one_line_error(done, 2, "variant npu cannot be built here")
    assert "--skip-unavailable" in done.errors[1] and not out.exists()

    done = etdeploy("release", "build", spec, "-o", out, "--skip-unavailable", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "not built: npu" in done.stderr
    document = json.loads((out / "selection.json").read_text())
    assert "QNN" in document["not_built"]["npu"]
    assert "group snapdragon" in document["not_built"]
    assert [g["name"] for g in document["play"]["groups"]] == ["high_ram", "low_ram", "other"]
    assert "snapdragon" not in (out / "play" / "device_targeting_config.xml").read_text()
    assert not (out / PACK_ASSETS / "model#group_snapdragon").exists()

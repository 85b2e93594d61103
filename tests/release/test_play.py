"""The Play files checked against the documented formats (tests/release/schemas/*.xsd,
written from Play's device-targeting and AI-pack pages and bundletool's manifest rules):
what etdeploy writes validates; what breaks a documented rule does not."""

from __future__ import annotations

from pathlib import Path

import pytest
import xmlschema

from etdeploy.release.play import pack_gradle, pack_manifest_xml, targeting_config_xml
from etdeploy.release.rules import with_spellings
from etdeploy.release.selection import TableGroup
from etdeploy.release.spec import DeviceId, Selector, SystemOnChip, load_spec

SCHEMAS = Path(__file__).parent / "schemas"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "release" / "release.toml"


@pytest.fixture(scope="module")
def targeting_schema() -> xmlschema.XMLSchema11:
    return xmlschema.XMLSchema11(str(SCHEMAS / "device_targeting_config.xsd"))


@pytest.fixture(scope="module")
def manifest_schema() -> xmlschema.XMLSchema11:
    return xmlschema.XMLSchema11(str(SCHEMAS / "ai_pack_manifest.xsd"))


def groups_of(spec_path: Path) -> list[TableGroup]:
    spec = load_spec(spec_path)
    return [TableGroup(g.name, g.variant, tuple(with_spellings(s) for s in g.selectors), ())
            for g in spec.groups]  # fmt: skip


def test_the_examples_targeting_config_is_in_the_documented_schema_with_both_qualcomm_names(
    targeting_schema: xmlschema.XMLSchema11,
) -> None:
    xml = targeting_config_xml(groups_of(EXAMPLE))
    targeting_schema.validate(xml.decode())
    text = xml.decode()
    assert 'manufacturer="Qualcomm" model="SM8650"' in text
    assert 'manufacturer="QTI" model="SM8650"' in text
    assert text.index('name="snapdragon"') < text.index('name="high_ram"')  # priority order
    assert 'name="other"' not in text  # implicit


def test_every_selector_property_is_written_as_the_docs_name_it(
    targeting_schema: xmlschema.XMLSchema11,
) -> None:
    selector = Selector(
        ram_min_bytes=4_000_000_000, ram_max_bytes=8_000_000_000,
        device_ids=(DeviceId("google", "redfin"), DeviceId("good-brand")),
        exclude_device_ids=(DeviceId("google", "caiman"),),
        features=("android.hardware.bluetooth",), forbid_features=("android.hardware.camera",),
        socs=(SystemOnChip("Google", "Tensor G3"),),
    )  # fmt: skip
    xml = targeting_config_xml([TableGroup("myCustomGroup1", "v", (selector,), ())]).decode()
    targeting_schema.validate(xml)
    for fragment in (
        'ram-min-bytes="4000000000"', 'ram-max-bytes="8000000000"',
        '<config:included-device-id brand="google" device="redfin" />',
        '<config:included-device-id brand="good-brand" />',
        '<config:excluded-device-id brand="google" device="caiman" />',
        '<config:required-system-feature name="android.hardware.bluetooth" />',
        '<config:forbidden-system-feature name="android.hardware.camera" />',
        '<config:system-on-chip manufacturer="Google" model="Tensor G3" />',
    ):  # fmt: skip
        assert fragment in xml


def test_the_schema_refuses_what_play_refuses(targeting_schema: xmlschema.XMLSchema11) -> None:
    """Must-fail cases: the schema is not a rubber stamp."""
    six = tuple(Selector(ram_min_bytes=i + 1) for i in range(6))
    for bad in (
        [TableGroup("too_many", "v", six, ())],
        [TableGroup("bad-name", "v", (Selector(ram_min_bytes=1),), ())],
        [TableGroup("other", "v", (Selector(ram_min_bytes=1),), ())],
        [TableGroup("a", "v", (Selector(ram_min_bytes=5, ram_max_bytes=5),), ())],
        [TableGroup("a", "v", (Selector(ram_min_bytes=1),), ()),
         TableGroup("a", "v", (Selector(ram_min_bytes=2),), ())],
    ):  # fmt: skip
        assert not targeting_schema.is_valid(targeting_config_xml(bad).decode())


@pytest.mark.parametrize("delivery", ["install-time", "fast-follow", "on-demand"])
def test_the_ai_pack_manifest_is_an_ai_pack_with_one_delivery_mode(
    manifest_schema: xmlschema.XMLSchema11, delivery: str
) -> None:
    xml = pack_manifest_xml(delivery).decode()
    manifest_schema.validate(xml)
    assert 'dist:type="ai-pack"' in xml and f"<dist:{delivery} />" in xml
    assert not manifest_schema.is_valid(xml.replace('"ai-pack"', '"asset-pack"'))
    assert not manifest_schema.is_valid(xml.replace("<dist:fusing", "<dist:fused"))
    gradle = pack_gradle("digits", delivery).decode()
    assert "id 'com.android.ai-pack'" in gradle and f'deliveryType = "{delivery}"' in gradle

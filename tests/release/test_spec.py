"""The release spec: what it accepts, and the one-line error (with a hint) for what it does not."""

from __future__ import annotations

from pathlib import Path

import pytest

from etdeploy.errors import EXIT_BAD_INPUT, UsageError
from etdeploy.release.spec import DeviceId, SystemOnChip, load_spec

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "release" / "release.toml"

BASE = """
[release]
name = "digits"
model = "digits"
fallback = "int8"
[release.variants.fp32]
backend = "xnnpack"
[release.variants.int8]
quantize = "int8"
"""


def spec_of(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "release.toml"
    path.write_text(BASE + text)
    return path


def refused(tmp_path: Path, text: str) -> UsageError:
    with pytest.raises(UsageError) as caught:
        load_spec(spec_of(tmp_path, text))
    error = caught.value
    assert error.exit_code == EXIT_BAD_INPUT
    assert "\n" not in error.message and error.message.startswith("release.toml: ")
    assert error.hint
    return error


def test_the_example_reads_as_written() -> None:
    spec = load_spec(EXAMPLE)
    assert [g.name for g in spec.groups] == ["snapdragon", "high_ram", "low_ram"]
    assert [v.name for v in spec.variants] == ["fp32", "int8"]
    assert spec.variant("int8").quantize == "int8" and spec.fallback == "int8"
    snapdragon = spec.groups[0].selectors[0]
    assert SystemOnChip("Qualcomm", "SM8650") in snapdragon.socs
    assert snapdragon.ram_min_bytes == 6_000_000_000
    assert spec.groups[2].selectors[0].ram_max_bytes == 4 * 2**30
    assert spec.app_bytes == 40_000_000
    assert spec.apple is not None and spec.apple.pack_id("fp32") == "digits-fp32"
    assert spec.used_variants == ("fp32", "int8")


def test_a_group_lists_up_to_five_selectors_and_reads_device_ids(tmp_path: Path) -> None:
    spec = load_spec(spec_of(tmp_path, """
[[release.groups]]
name = "pixels"
variant = "fp32"
selectors = [{ device_ids = ["google:shiba", "google"] }, { ram_min_bytes = 12000000000 }]
"""))  # fmt: skip
    first, second = spec.groups[0].selectors
    assert first.device_ids == (DeviceId("google", "shiba"), DeviceId("google"))
    assert second.ram_min_bytes == 12_000_000_000


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[[release.groups]]\nname = "a"\nvariant = "fp32"\nram_gigs = 8\n',
         "release.groups[0].ram_gigs: unknown key"),
        ('[[release.groups]]\nname = "a"\nvariant = "npu"\nram_min_bytes = 1\n',
         "release.groups.a.variant: no variant named 'npu'"),
        ('[[release.groups]]\nname = "a"\nvariant = "fp32"\nram_min_bytes = 1\n'
         '[[release.groups]]\nname = "a"\nvariant = "int8"\nram_max_bytes = 5\n',
         "release.groups[1].name: two groups are named 'a'"),
        ('[[release.groups]]\nname = "high-ram"\nvariant = "fp32"\nram_min_bytes = 1\n',
         "'high-ram' is not a valid name"),
        ('[[release.groups]]\nname = "other"\nvariant = "fp32"\nram_min_bytes = 1\n',
         '"other" is the implicit fallback group'),
        ('[[release.groups]]\nname = "a"\nvariant = "fp32"\n',
         "no selector: the group would hold every device"),
        ('[[release.groups]]\nname = "a"\nvariant = "fp32"\nselectors = ['
         + ", ".join(["{ram_min_bytes = 1}"] * 6) + "]\n", "6 selectors"),
        ('[[release.groups]]\nname = "a"\nvariant = "fp32"\nram_min_bytes = "8GB"\n'
         'ram_max_bytes = "4GB"\n', "is not above ram_min_bytes"),
        ('[[release.groups]]\nname = "a"\nvariant = "fp32"\nsoc = ["SM8650"]\n',
         "cannot read 'SM8650'"),
        ('[[release.groups]]\nname = "a"\nvariant = "fp32"\nram_min_bytes = "lots"\n',
         "cannot read 'lots' as a size"),
        ('[release.variants.npu]\nbackend = "tpu"\n', "'tpu' is not one of"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_naming_the_key_with_a_hint(
    tmp_path: Path, text: str, message: str
) -> None:
    assert message in refused(tmp_path, text).message


def test_a_missing_fallback_variant_and_a_missing_table_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "release.toml"
    path.write_text(BASE.replace('fallback = "int8"', 'fallback = "npu"'))
    with pytest.raises(UsageError, match=r"release\.fallback: no variant named 'npu'"):
        load_spec(path)
    path.write_text("[run]\ndevice = 'local'\n")
    with pytest.raises(UsageError, match="no \\[release\\] table"):
        load_spec(path)
    with pytest.raises(UsageError, match="cannot read the release spec"):
        load_spec(tmp_path / "absent.toml")

"""Play's selection rules as the reference selector applies them, case by case against
what bundletool's DeviceTargetingConfigEvaluator and Play's docs say (etdeploy/release/
rules.py cites them): the first group wins, RAM min inclusive and max exclusive, an
unknown SoC is in no SoC list, Qualcomm and QTI are one manufacturer to Play."""

from __future__ import annotations

from etdeploy.release.rules import (
    DeviceProperties,
    Targeted,
    admits,
    choose,
    choose_apple,
    with_spellings,
)
from etdeploy.release.spec import AppleRule, DeviceId, Selector, SystemOnChip

GiB = 2**30
SNAPDRAGON = with_spellings(Selector(socs=(SystemOnChip("Qualcomm", "SM8650"),)))
GROUPS = (
    Targeted("snapdragon", "fp32", (SNAPDRAGON,)),
    Targeted("high_ram", "fp32", (Selector(ram_min_bytes=8 * GiB),)),
    Targeted("low_ram", "int8", (Selector(ram_max_bytes=4 * GiB),)),
)


def phone(**kw: object) -> DeviceProperties:
    values: dict[str, object] = {"brand": "google", "device": "shiba", "sdk": 35,
                                 "ram_bytes": 6 * GiB}  # fmt: skip
    values.update(kw)
    return DeviceProperties(**values)  # type: ignore[arg-type]


def test_a_device_in_two_groups_gets_the_first_and_both_are_recorded() -> None:
    both = phone(soc_manufacturer="QTI", soc_model="SM8650", ram_bytes=12 * GiB)
    chosen = choose(both, GROUPS, "int8")
    assert (chosen.group, chosen.variant) == ("snapdragon", "fp32")
    assert chosen.matched == ("snapdragon", "high_ram")


def test_ram_bounds_are_min_inclusive_and_max_exclusive() -> None:
    assert choose(phone(ram_bytes=8 * GiB), GROUPS, "x").group == "high_ram"
    assert choose(phone(ram_bytes=8 * GiB - 1), GROUPS, "x").group == "other"
    assert choose(phone(ram_bytes=4 * GiB - 1), GROUPS, "x").group == "low_ram"
    assert choose(phone(ram_bytes=4 * GiB), GROUPS, "x").group == "other"
    # Unknown RAM counts as 0 (Play's proto default): under every max, over no min.
    assert choose(phone(ram_bytes=None), GROUPS, "x").group == "low_ram"


def test_qualcomm_and_qti_are_one_manufacturer_and_an_unknown_soc_matches_no_soc_list() -> None:
    assert SystemOnChip("QTI", "SM8650") in SNAPDRAGON.socs
    for maker in ("Qualcomm", "QTI"):
        assert admits(SNAPDRAGON, phone(soc_manufacturer=maker, soc_model="SM8650"))
    assert not admits(SNAPDRAGON, phone(soc_manufacturer="QTI", soc_model="SM8550"))
    assert not admits(SNAPDRAGON, phone())  # no ro.soc.*: unknown
    # SoC targeting needs API 31: an older phone's SoC is not seen even when reported.
    assert not admits(SNAPDRAGON, phone(soc_manufacturer="QTI", soc_model="SM8650", sdk=30))
    # Exact strings, as bundletool compares them.
    assert not admits(SNAPDRAGON, phone(soc_manufacturer="qti", soc_model="SM8650"))


def test_device_ids_match_brand_and_device_or_brand_alone_and_exclusions_win() -> None:
    pixels = Selector(device_ids=(DeviceId("google"),),
                      exclude_device_ids=(DeviceId("google", "caiman"),))  # fmt: skip
    assert admits(pixels, phone(device="shiba"))
    assert not admits(pixels, phone(device="caiman"))
    assert not admits(pixels, phone(brand="samsung", device="dm3q"))
    exact = Selector(device_ids=(DeviceId("google", "shiba"),))
    assert admits(exact, phone()) and not admits(exact, phone(device="husky"))


def test_features_are_all_required_and_none_forbidden_and_a_selector_is_an_and() -> None:
    vulkan = Selector(ram_min_bytes=4 * GiB, features=("android.hardware.vulkan.level",),
                      forbid_features=("android.hardware.type.watch",))  # fmt: skip
    has = frozenset({"android.hardware.vulkan.level", "android.hardware.camera"})
    assert admits(vulkan, phone(features=has))
    assert not admits(vulkan, phone(features=has, ram_bytes=2 * GiB))
    assert not admits(vulkan, phone(features=frozenset({"android.hardware.camera"})))
    assert not admits(vulkan, phone(features=has | {"android.hardware.type.watch"}))


def test_a_group_is_an_or_of_its_selectors() -> None:
    group = Targeted("either", "fp32", (Selector(ram_min_bytes=12 * GiB),
                                        Selector(device_ids=(DeviceId("google", "shiba"),))))  # fmt: skip
    chosen = choose(phone(ram_bytes=2 * GiB), [group], "int8")
    assert (chosen.group, chosen.selector) == ("either", 1)
    assert choose(phone(device="husky", ram_bytes=2 * GiB), [group], "int8").group == "other"


def test_apple_rules_take_the_first_that_holds_else_the_fallback() -> None:
    rules = (AppleRule("pro", "fp32", ("iPhone", "iPad"), min_ram_bytes=6 * 10**9),
             AppleRule("macs", "fp32", ("Mac",)))  # fmt: skip
    iphone15pro = DeviceProperties(family="iPhone", model="iPhone16,1", ram_bytes=8 * 10**9)
    assert choose_apple(iphone15pro, rules, "int8").group == "pro"
    se = DeviceProperties(family="iPhone", model="iPhone14,6", ram_bytes=4 * 10**9)
    assert (choose_apple(se, rules, "int8").group, choose_apple(se, rules, "int8").variant) == (
        "other", "int8")  # fmt: skip

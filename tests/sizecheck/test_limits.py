"""The limits table: decimal units, verdicts exactly at each boundary, sourced figures, and
overrides that name the bad key."""

from __future__ import annotations

import pytest

from etdeploy.errors import UsageError
from etdeploy.sizecheck.check import FITS, OVER, WARN, judge
from etdeploy.sizecheck.limits import (
    CONDITIONAL,
    DELIVERIES,
    DOWNLOAD,
    LIMIT,
    RAW,
    WARNING,
    apply_overrides,
    default_limits,
    select_limits,
)
from etdeploy.units import format_bytes, parse_size

EXPECTED_BYTES = {
    "play.base": 500_000_000,
    "play.feature": 500_000_000,
    "play.asset-pack": 1_500_000_000,
    "play.modules-and-install-time": 4_000_000_000,
    "play.on-demand-and-fast-follow": 4_000_000_000,
    "play.ai-pack": 1_500_000_000,
    "play.ai-packs-total": 4_000_000_000,
    "play.apk": 100_000_000,
    "appstore.app": 4_000_000_000,
    "appstore.cellular-prompt": 200_000_000,
    "appstore.app-clip": 15_000_000,
    "appstore.app-clip-pre-ios16": 10_000_000,
    "appstore.app-clip-ios17-digital": 100_000_000,
    "appstore.odr-asset-pack": 8_000_000_000,
    "appstore.odr-asset-pack-pre-ios18": 512_000_000,
    "appstore.odr-hosted": 70_000_000_000,
    "appstore.odr-hosted-pre-ios18": 20_000_000_000,
    "appstore.background-assets": 200_000_000_000,
}


def test_every_limit_is_in_decimal_bytes_with_a_source_and_date() -> None:
    table = default_limits()
    assert {k: v.bytes for k, v in table.items()} == EXPECTED_BYTES
    for limit in table.values():
        assert limit.source.startswith("https://")
        assert limit.read_on in ("2026-12-02", "2026-12-04")
        assert limit.measure == (DOWNLOAD if limit.store == "play" else RAW)
    assert "200 MB" in (table["play.base"].note or "")  # the older copies' figure
    assert table["appstore.cellular-prompt"].severity == WARNING


# Apple's build page: the app's total uncompressed size "must be less than 4GB"; every other
# figure is a maximum that may be reached.
EXCLUSIVE = {"appstore.app"}


@pytest.mark.parametrize("key", sorted(EXPECTED_BYTES))
def test_the_last_byte_that_fits_fits_and_one_more_does_not(key: str) -> None:
    limit = default_limits()[key]
    assert limit.inclusive == (key not in EXCLUSIVE)
    last = limit.bytes if limit.inclusive else limit.bytes - 1
    at = judge(limit, raw_bytes=last, download_bytes=last)
    assert at.status == FITS and at.headroom_bytes == 0 and at.excess_bytes == 0
    over = judge(limit, raw_bytes=last + 1, download_bytes=last + 1)
    assert over.headroom_bytes == -1 and over.excess_bytes == 1
    assert over.status == {LIMIT: OVER, CONDITIONAL: WARN, WARNING: WARN}[limit.severity]
    # The other measure never decides: a Play limit ignores raw bytes, Apple's the download.
    other = (
        judge(limit, raw_bytes=10 * last, download_bytes=last)
        if limit.measure == DOWNLOAD
        else judge(limit, raw_bytes=last, download_bytes=10 * last)
    )
    assert other.status == FITS


def test_exactly_4gb_is_over_the_app_store_app_limit() -> None:
    app = default_limits()["appstore.app"]
    verdict = judge(app, raw_bytes=4_000_000_000, download_bytes=0)
    assert verdict.status == OVER and verdict.excess_bytes == 1
    assert verdict.describe() == "over by 1 B"
    assert "less than 4 GB" in (app.note or "")


def test_play_judges_the_download_and_apple_the_raw_size() -> None:
    table = default_limits()
    # 600 MB raw that downloads as 400 MB fits Play's 500 MB base module.
    assert judge(table["play.base"], 600_000_000, 400_000_000).status == FITS
    # 16 MB raw that downloads as 9 MB does not fit a 15 MB App Clip.
    assert judge(table["appstore.app-clip"], 16_000_000, 9_000_000).status == OVER


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("123", 123), (123, 123), ("12MB", 12_000_000), ("1.5GB", 1_500_000_000),
        ("150 MB", 150_000_000), ("64KiB", 65_536), ("2MiB", 2_097_152), ("0.5kb", 500),
        ("7b", 7), ("4GB", 4_000_000_000),
    ],
)  # fmt: skip
def test_sizes_parse_in_decimal_and_binary_units(text: str | int, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "MB", "12 parsecs", "-5", "1.0000001KB", "1e9"])
def test_sizes_that_are_not_sizes_are_refused(text: str) -> None:
    with pytest.raises(UsageError, match="--extra"):
        parse_size(text, what="--extra")


def test_overrides_replace_figures_dotted_or_nested() -> None:
    table = apply_overrides(default_limits(), {"play.base": "150MB", "appstore": {"app": "3GB"}})
    assert table["play.base"].bytes == 150_000_000
    assert table["appstore.app"].bytes == 3_000_000_000
    assert "overridden" in (table["play.base"].note or "")
    assert default_limits()["play.base"].bytes == 500_000_000  # the built-in stays


def test_overrides_name_the_bad_key() -> None:
    with pytest.raises(UsageError) as unknown:
        apply_overrides(default_limits(), {"play": {"bse": "150MB"}})
    assert unknown.value.message == "limits.play.bse: no such limit"
    assert "play.base" in (unknown.value.hint or "")
    with pytest.raises(UsageError) as bad_value:
        apply_overrides(default_limits(), {"play.base": "lots"})
    assert bad_value.value.message.startswith("limits.play.base: cannot read 'lots'")


def test_selection_defaults_to_base_module_and_app_and_checks_the_store() -> None:
    table = default_limits()
    keys = [lim.key for lim in select_limits(table, "all", None)]
    assert keys[:2] == ["play.base", "play.modules-and-install-time"]
    assert "appstore.app" in keys
    assert [lim.key for lim in select_limits(table, "appstore", ["odr"])] == [
        "appstore.odr-asset-pack",
        "appstore.odr-asset-pack-pre-ios18",
    ]
    for delivery, (store, keys_for) in DELIVERIES.items():
        assert [lim.key for lim in select_limits(table, store, [delivery])] == list(keys_for)
    with pytest.raises(UsageError, match="is a play delivery, but --store is appstore"):
        select_limits(table, "appstore", ["base"])
    with pytest.raises(UsageError, match="not a delivery"):
        select_limits(table, "all", ["sideload"])
    with pytest.raises(UsageError, match="not a store"):
        select_limits(table, "steam", None)


def test_bytes_print_in_the_stores_decimal_units() -> None:
    assert format_bytes(1_500_000_000) == "1.50 GB"
    assert format_bytes(150_000_000) == "150.0 MB"
    assert format_bytes(999) == "999 B"
    assert format_bytes(-2_000) == "-2.00 kB"

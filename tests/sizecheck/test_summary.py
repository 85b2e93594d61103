"""The settings from etdeploy.toml under the flags, and summary_for_result: the size verdict
`etdeploy run` and `etdeploy farm` put in their results."""

from __future__ import annotations

import json
import subprocess
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from etdeploy.config import Config, load_config, parse_config
from etdeploy.errors import UsageError
from etdeploy.pte.reader import read_pte
from etdeploy.sizecheck.breakdown import layout_parts
from etdeploy.sizecheck.check import check_size, report_to_json
from etdeploy.sizecheck.summary import SUMMARY_SCHEMA, resolve_settings, summary_for_result
from tests.support.programs import BuiltPrograms

SUMMARY_KEYS = {
    "schema", "path", "raw_bytes", "download_bytes", "extra_bytes", "total_raw_bytes",
    "total_download_bytes", "estimate", "method", "error_bound", "download_uncertainty_bytes",
    "cached", "store", "deliveries", "budget_bytes", "verdicts",
    "passed", "config", "notes",
}  # fmt: skip
VERDICT_KEYS = {
    "key", "store", "label", "limit_bytes", "inclusive", "measure", "severity",
    "measured_bytes", "uncertainty_bytes", "headroom_bytes", "excess_bytes", "status", "text", "source", "read_on",
    "note",
}  # fmt: skip


def _config(tmp_path: Path, text: str) -> Config:
    path = tmp_path / "etdeploy.toml"
    path.write_text(text)
    return load_config(path)


def test_by_default_it_is_the_play_base_module_and_the_app(programs: BuiltPrograms) -> None:
    s = summary_for_result(programs.xnnpack, Config())
    assert set(s) == SUMMARY_KEYS and s["schema"] == SUMMARY_SCHEMA
    assert json.loads(json.dumps(s)) == s  # JSON-ready as it is
    assert s["store"] == "all" and s["deliveries"] == ["base", "app"]
    assert [v["key"] for v in s["verdicts"]] == [
        "play.base", "play.modules-and-install-time", "appstore.app", "appstore.cellular-prompt",
    ]  # fmt: skip
    for v in s["verdicts"]:
        assert set(v) == VERDICT_KEYS
        assert v["status"] == "fits" and v["excess_bytes"] == 0
        assert v["headroom_bytes"] == v["limit_bytes"] - v["measured_bytes"] - (
            0 if v["inclusive"] else 1
        )
        assert v["read_on"] == "2026-12-02" and v["source"].startswith("https://")
    assert s["passed"] is True and s["config"] is None and s["budget_bytes"] is None
    size = programs.xnnpack.stat().st_size
    assert s["raw_bytes"] == s["total_raw_bytes"] == size
    # The figure reported (measured part by part) is within 0.5% of a real `gzip -6`.
    with programs.xnnpack.open("rb") as fh:
        gz = subprocess.run(["gzip", "-6", "-c"], stdin=fh, capture_output=True, check=True)
    assert abs(s["download_bytes"] - len(gz.stdout)) / len(gz.stdout) < 0.005
    assert s["download_bytes"] == s["total_download_bytes"] < size
    play, _, app, _ = s["verdicts"]
    assert play["measured_bytes"] == s["total_download_bytes"]
    assert app["measured_bytes"] == s["total_raw_bytes"]
    assert any("older copies said 200 MB" in n for n in s["notes"])


def test_it_gives_the_verdicts_sizecheck_gives_with_the_same_file(
    programs: BuiltPrograms, tmp_path: Path
) -> None:
    config = _config(
        tmp_path,
        '[sizecheck]\nstore = "all"\ndeliveries = ["feature", "odr"]\nextra = "2MB"\n'
        'budget = "1MB"\n[limits]\n"play.feature" = "2.5MB"\n',
    )
    s = summary_for_result(programs.portable, config)
    settings = resolve_settings(config)
    report = check_size(
        [programs.portable], store=settings.store, deliveries=settings.deliveries,
        budget=settings.budget_bytes, budget_source=settings.budget_source,
        extra_bytes=settings.extra_bytes, limits=settings.limits, levels=(6,),
    )  # fmt: skip
    assert s["verdicts"] == report_to_json(report)["verdicts"]
    assert s["config"] == str(tmp_path / "etdeploy.toml")
    assert s["extra_bytes"] == 2_000_000
    assert s["total_raw_bytes"] == s["raw_bytes"] + 2_000_000
    assert s["total_download_bytes"] == s["download_bytes"] + 2_000_000
    by_key = {v["key"]: v for v in s["verdicts"]}
    assert list(by_key) == [
        "play.feature", "play.modules-and-install-time", "appstore.odr-asset-pack",
        "appstore.odr-asset-pack-pre-ios18", "budget",
    ]  # fmt: skip
    # 3.6 MB of weights download as ~3.3 MB, + 2 MB: over the overridden 2.5 MB and the budget.
    feature = by_key["play.feature"]
    assert feature["limit_bytes"] == 2_500_000 and feature["status"] == "over"
    assert feature["excess_bytes"] == s["total_download_bytes"] - 2_500_000
    assert "overridden in [limits]" in feature["note"]
    budget = by_key["budget"]
    assert budget["status"] == "over" and budget["source"] == "etdeploy.toml [sizecheck] budget"
    assert s["budget_bytes"] == 1_000_000
    assert s["passed"] is False


def test_warnings_do_not_fail_the_result(programs: BuiltPrograms) -> None:
    # Over the pre-iOS 16 App Clip figure only: a conditional limit, so a warning.
    config = parse_config(
        {"sizecheck": {"deliveries": ["app-clip"], "extra": "9MB"}}, Path("etdeploy.toml")
    )
    s = summary_for_result(programs.portable, config)
    status = {v["key"]: v["status"] for v in s["verdicts"]}
    assert status == {
        "appstore.app-clip": "fits",
        "appstore.app-clip-pre-ios16": "warning",
        "appstore.app-clip-ios17-digital": "fits",
    }
    assert s["passed"] is True


def test_it_starts_without_torch(programs: BuiltPrograms) -> None:
    code = (
        "import sys, json\nfrom etdeploy.sizecheck import summary_for_result\n"
        "from etdeploy.config import Config\n"
        f"s = summary_for_result({str(programs.xnnpack)!r}, Config())\n"
        "print(json.dumps(s['passed']), 'torch' in sys.modules, 'executorch' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["true", "False", "False"], done.stderr


def test_bad_input_is_a_usage_error(programs: BuiltPrograms, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="is a directory"):
        summary_for_result(tmp_path, Config())
    with pytest.raises(UsageError, match="not an ExecuTorch program"):
        summary_for_result(programs.weights, Config())
    with pytest.raises(UsageError, match="no such file"):
        summary_for_result(tmp_path / "gone.pte", Config())


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ('[sizecheck]\nstore = "steam"', "etdeploy.toml: sizecheck.store: 'steam' is not a store"),
        ('[sizecheck]\ndeliveries = ["sideload"]',
         "etdeploy.toml: sizecheck.deliveries: 'sideload' is not a delivery"),
        ('[sizecheck]\ndeliveries = [1]', "etdeploy.toml: sizecheck.deliveries: expected a list"),
        ('[sizecheck]\nstore = "appstore"\ndeliveries = ["base"]',
         "etdeploy.toml: sizecheck.deliveries: base is a play delivery, but sizecheck.store is "
         "appstore"),
        ('[sizecheck]\nbudget = "lots"', "etdeploy.toml: sizecheck.budget: cannot read 'lots'"),
        ('[sizecheck]\nextra = "-3MB"', "etdeploy.toml: sizecheck.extra: cannot read '-3MB'"),
        ('[limits]\n"play.bse" = "1MB"', "etdeploy.toml: limits.play.bse: no such limit"),
        ('[limits.play]\nbase = "huge"', "etdeploy.toml: limits.play.base: cannot read 'huge'"),
        ('[sizecheck]\nbudget = true', "etdeploy.toml: sizecheck.budget: expected str or int"),
    ],
)  # fmt: skip
def test_a_bad_value_in_the_file_names_its_key(tmp_path: Path, toml: str, message: str) -> None:
    path = tmp_path / "etdeploy.toml"
    path.write_text(toml + "\n")
    with pytest.raises(UsageError) as info:
        resolve_settings(load_config(path))
    assert info.value.message.startswith(message), info.value.message
    assert "\n" not in info.value.message and info.value.hint
    assert info.value.exit_code == 2


def _resolve(tmp_path: Path, toml: str, **flags: Any) -> Any:
    return resolve_settings(_config(tmp_path, toml), **flags)


def test_flags_override_the_file(tmp_path: Path) -> None:
    toml = (
        '[sizecheck]\nstore = "all"\ndeliveries = ["feature", "app-clip"]\nbudget = "10MB"\n'
        'extra = "5MB"\n'
    )
    from_file = _resolve(tmp_path, toml)
    assert from_file.deliveries == ("feature", "app-clip")
    assert from_file.budget_bytes == 10_000_000 and from_file.extra_bytes == 5_000_000
    assert from_file.budget_source == "etdeploy.toml [sizecheck] budget"
    flagged = _resolve(tmp_path, toml, budget="20MB", extra="0", deliveries=["odr"])
    assert flagged.deliveries == ("odr",) and flagged.store == "all"
    assert flagged.budget_bytes == 20_000_000 and flagged.budget_source == "--budget"
    assert flagged.extra_bytes == 0
    # --store keeps the file's deliveries of that store, or that store's default.
    assert _resolve(tmp_path, toml, store="play").deliveries == ("feature",)
    assert _resolve(tmp_path, toml, store="appstore").deliveries == ("app-clip",)
    only_play = _resolve(tmp_path, '[sizecheck]\ndeliveries = ["feature"]\n', store="appstore")
    assert only_play.deliveries == ("app",)
    # --delivery without --store may name any store, whatever the file's store says.
    any_store = _resolve(tmp_path, '[sizecheck]\nstore = "play"\n', deliveries=["app"])
    assert any_store.deliveries == ("app",)
    with pytest.raises(UsageError, match="--delivery base is a play delivery, but --store is"):
        _resolve(tmp_path, toml, store="appstore", deliveries=["base"])
    with pytest.raises(UsageError, match="--store 'steam': not a store"):
        _resolve(tmp_path, toml, store="steam")
    # A bad value in the file is reported even where a flag overrides it.
    with pytest.raises(UsageError, match=r"sizecheck\.store: 'steam' is not a store"):
        _resolve(tmp_path, '[sizecheck]\nstore = "steam"\n', store="play")
    with pytest.raises(UsageError, match=r"sizecheck\.budget: cannot read"):
        _resolve(tmp_path, '[sizecheck]\nbudget = "x"\n', budget="1MB")


def test_limits_from_the_file_apply_without_sizecheck_section(tmp_path: Path) -> None:
    settings = _resolve(tmp_path, '[limits]\n"play.base" = "200MB"\n')
    assert settings.limits["play.base"].bytes == 200_000_000
    assert settings.deliveries == ("base", "app") and settings.budget_bytes is None
    assert settings.config_path == tmp_path / "etdeploy.toml"


@pytest.mark.slow
def test_a_program_past_4_gb_is_streamed_in_constant_memory(
    programs: BuiltPrograms, tmp_path: Path
) -> None:
    # A real program followed by 4.3 GB of zeros, written sparse (no disk used): offsets past
    # 2**32, an App Store app over its "less than 4GB", a download far under Play's limits.
    big = tmp_path / "big.pte"
    raw = programs.portable.read_bytes()
    size = len(raw) + 4_300_000_000
    with big.open("wb") as fh:
        fh.write(raw)
        fh.truncate(size)
    tracemalloc.start()
    try:
        s = summary_for_result(big, Config())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 100_000_000  # chunks in flight, not the file
    assert s["raw_bytes"] == size and s["download_bytes"] < size // 100
    status = {v["key"]: v["status"] for v in s["verdicts"]}
    assert status["appstore.app"] == "over" and status["play.base"] == "fits"
    assert s["passed"] is False
    (app,) = [v for v in s["verdicts"] if v["key"] == "appstore.app"]
    assert app["excess_bytes"] == size - 4_000_000_000 + 1
    parts = layout_parts(read_pte(big))
    assert sum(p.size for p in parts) == size and parts[-1].size == 4_300_000_000


def test_the_estimate_comes_from_the_flag_over_the_file(tmp_path: Path) -> None:
    # [sizecheck] estimate, as resolve_settings reads it (config.py validates the section's
    # keys; see the report for the one line it needs).
    sampled = Config(path=tmp_path / "etdeploy.toml", sizecheck={"estimate": "sample"})
    assert resolve_settings(sampled).estimate == "sample"
    assert resolve_settings(sampled, estimate="exact").estimate == "exact"
    assert resolve_settings(Config()).estimate == "exact"
    with pytest.raises(UsageError) as info:
        resolve_settings(Config(path=tmp_path / "etdeploy.toml", sizecheck={"estimate": "fast"}))
    assert info.value.message == "etdeploy.toml: sizecheck.estimate: 'fast' is not an estimate"
    assert info.value.hint


def test_a_program_too_small_to_sample_is_measured_exactly_and_says_so(
    programs: BuiltPrograms,
) -> None:
    s = summary_for_result(programs.portable, Config(), estimate="sample")
    assert s["method"] == "exact" and s["error_bound"] == 0 and s["estimate"].startswith("exact")
    assert s["download_uncertainty_bytes"] == 0

"""Sixty nights of a farm: two planted shifts are found at their night, each naming
what changed, while a busy machine's noise raises no alarm; the single-baseline
threshold judged night by night on the same data is counted beside it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from etdeploy.cli import app
from etdeploy.history.changes import history_of
from etdeploy.history.judge import judge_tonight
from etdeploy.history.records import JobRecord, record_of
from etdeploy.results import compare_to_baseline
from etdeploy.results.baseline import BUSY_HOST
from etdeploy.results.baseline_memory import memory_growth
from etdeploy.results.result import RunResult
from tests.history.conftest import RealNights
from tests.history.nights import (
    LATENCY_MODEL,
    LATENCY_NIGHT,
    MEMORY_MODEL,
    MEMORY_NIGHT,
    NEW_EXECUTORCH,
    Doc,
    sixty_nights,
    write_night,
)
from tests.support.cdp import CHROMIUM, Browser
from tests.support.farm_fixtures import farm

pytestmark = pytest.mark.slow


def history(*args: str | Path) -> Any:
    return CliRunner().invoke(app, ["history", *map(str, args)], catch_exceptions=False)


@pytest.fixture(scope="module")
def sixty(real_nights: RealNights, tmp_path_factory: pytest.TempPathFactory) -> list[list[Doc]]:
    """The nights after the real ones, recorded with `etdeploy history record`
    into the history the real nights' farm wrote."""
    nights = sixty_nights(real_nights.nights)
    folder = tmp_path_factory.mktemp("generated")
    files = [write_night(night, folder / f"n{n:02d}.jsonl")
             for n, night in enumerate(nights) if n >= len(real_nights.nights)]  # fmt: skip
    done = history("record", *files, "--store", real_nights.history)
    assert done.exit_code == 0, done.output
    return nights


def exported(store: Path, *pattern: str) -> list[dict[str, Any]]:
    out = history("export", *pattern, "--format", "json", "--store", store)
    assert out.exit_code == 0, out.output
    return list(json.loads(out.stdout)["series"])


def test_the_farm_records_every_real_night(real_nights: RealNights) -> None:
    assert all("job(s) recorded" in output for output in real_nights.outputs)
    series = exported(real_nights.history, "latency.median_ms")
    assert {s["device"] for s in series} == {"local", "pixel-a"}
    assert {s["model"] for s in series} == {"digits", "diabetes"}


def test_both_planted_shifts_are_found_at_their_night_naming_what_changed(
    real_nights: RealNights, sixty: list[list[Doc]]
) -> None:
    series = exported(real_nights.history)
    shifted = {s["name"]: s for s in series if s["change_points"]}
    for device in ("local", "pixel-a"):
        # The +20% at its night, within one, naming the new model: in the median (the
        # figure a user reads) or the fastest iteration. On real nights of a heavily
        # loaded machine a night's median moves by up to 2x and misses the night in
        # about a third of the draws; the fastest iteration, which load cannot make
        # faster, in 3 of 80; one of the two in 1 of 80 (the report of issue 38).
        placed = [
            change
            for metric in ("latency.median_ms", "latency.min_ms", "latency.cpu_median_ms")
            for change in shifted.get(f"{LATENCY_MODEL}|portable|none|{device}|{metric}", {}).get(
                "change_points", []
            )
            if abs(change["index"] - LATENCY_NIGHT) <= 1
        ]
        assert placed, f"{LATENCY_MODEL} on {device}: no latency change point at night 40 +- 1"
        for change in placed:
            # +20% planted; the windows' medians read it as up to +42% seen on busy nights.
            assert 0.10 < change["shift"] < 0.60, change
            assert [c["input"] for c in change["changed"]] == ["model digest"]
        planned = shifted[f"{MEMORY_MODEL}|portable|none|{device}|memory.planned_bytes"]
        (change,) = planned["change_points"]
        assert abs(change["index"] - MEMORY_NIGHT) <= 1, change
        assert change["after"] == 4 * change["before"]
        assert {"input": "executorch", "before": "1.5.1", "after": NEW_EXECUTORCH} in change[
            "changed"
        ]


def test_noise_raises_no_alarm(real_nights: RealNights, sixty: list[list[Doc]]) -> None:
    """Every change point found is one of the planted ones: the busy nights, the
    noise-only series (diabetes' latency, every size and numeric) have none."""
    for s in exported(real_nights.history):
        if not s["change_points"]:
            continue
        planted = (
            (s["model"] == LATENCY_MODEL and s["metric"].startswith("latency."), LATENCY_NIGHT),
            (s["model"] == MEMORY_MODEL and "planned_bytes" in s["metric"], MEMORY_NIGHT),
        )
        assert any(match for match, _ in planted), (
            f"alarm on a noise-only series: {s['name']} {s['change_points']}"
        )
    diabetes = exported(
        real_nights.history, f"{MEMORY_MODEL}|portable|none|local|latency.median_ms"
    )
    values = [p["value"] for p in diabetes[0]["points"]]
    assert max(values) > 1.5 * min(values)  # the busy nights are there, and not alarms


def single_baseline_alarms(now: RunResult, before: RunResult) -> list[str]:
    """The farm's judgement before issue 38 (results/baseline.py as it was): latency
    over max(median x 1.10, the baseline's p90, its median + stdev), no floor and no
    spread of the current run; memory as etdeploy.results.baseline_memory."""
    found = []
    a, b = before.latency_ms, now.latency_ms
    if a is not None and b is not None and a.median is not None and b.median is not None:
        limit = max(a.median * 1.10, a.p90 or a.median, a.median + (a.stdev or 0.0))
        if b.median > limit:
            found.append("latency")
    if memory_growth(before, now, 0.10) is not None:
        found.append("memory")
    return found


def test_change_points_against_the_single_baseline_threshold(
    real_nights: RealNights, sixty: list[list[Doc]], capsys: pytest.CaptureFixture[str]
) -> None:
    """Each night judged against the one before (the old way), and against the
    history of the nights before it (`farm --baseline history`)."""
    nights = [[RunResult.from_json(doc) for doc in night] for night in sixty]
    truth = {(LATENCY_MODEL, "latency"): LATENCY_NIGHT, (MEMORY_MODEL, "memory"): MEMORY_NIGHT}

    def true_alarm(model: str, kind: str, night: int, slack: int) -> bool:
        planted = truth.get((model, kind))
        return planted is not None and planted <= night <= planted + slack

    old_true = old_false = 0
    for n in range(1, len(nights)):
        before = {r.farm.key: r for r in nights[n - 1] if r.farm}
        for result in nights[n]:
            for kind in single_baseline_alarms(result, before[result.farm.key]):  # type: ignore[union-attr]
                if true_alarm(result.job.model or "", kind, n, 0):
                    old_true += 1
                else:
                    old_false += 1
    # The one-file baseline now on the same pairs: floors, both runs' spread, and the
    # CPU time (a latency growth it does not share is told as a busy host, not failed).
    file_alarms = [(n, r) for n in range(1, len(nights))
                   for r in compare_to_baseline(nights[n], nights[n - 1])]  # fmt: skip
    new_file_false = sum(
        1 for n, r in file_alarms if r.is_regression and not true_alarm(r.key.model, r.kind, n, 0)
    )
    busy_told = sum(1 for _, r in file_alarms if r.alarm == BUSY_HOST)

    events: dict[str, list[int]] = {}  # series -> nights of its shifts: one alarm per shift
    history_false: list[str] = []
    outliers = 0
    records: list[JobRecord] = []
    for n, night in enumerate(nights):
        judged = judge_tonight(night, history_of(records))
        outliers += len(judged.outliers)
        for regression in judged.regressions:
            series = f"{regression.key.label}|{regression.part}"
            day = int(regression.message.split(" since ", 1)[1][8:10])
            # As nights are added the detector may place a shift a night later: the same shift.
            if any(abs(day - seen) <= 1 for seen in events.get(series, [])):
                continue
            events.setdefault(series, []).append(day)
            # Reported as soon as MIN_RUN nights agree, within one night of the truth.
            if not true_alarm(regression.key.model, regression.kind, n, 8):
                history_false.append(f"night {n}: {regression.line}")
        records += [record_of(r) for r in night]
    shifts = sum(len(days) for days in events.values())
    found = {s.split("|")[0] + ("|memory" if "planned" in s else "|latency") for s in events
             if "latency.m" in s or "latency.cpu" in s or "memory.planned_bytes" in s}  # fmt: skip
    with capsys.disabled():
        print(
            f"\n{len(nights)} nights x {len(nights[0])} jobs, planted: {LATENCY_MODEL} latency "
            f"+20% at night {LATENCY_NIGHT}, {MEMORY_MODEL} planned x4 at night {MEMORY_NIGHT}\n"
            f"  single baseline (before issue 38), night by night: {old_true} true alarm(s), "
            f"{old_false} false alarm(s)\n"
            f"  one-file baseline now (floor, both spreads, CPU time): {new_file_false} false "
            f"alarm(s), {busy_told} busy host(s) told\n"
            f"  history (change points): {shifts} shift(s) alarmed, {len(history_false)} "
            f"false; {outliers} single-night outlier(s) reported, not failed"
        )
    assert not history_false, history_false
    # Planned bytes on both devices. The +20% latency on at least one: judged night by
    # night, with at most 8 nights after the change, on a shared machine whose real
    # nights' medians differ by up to 2x (the whole history finds both: the test above).
    assert {"diabetes[portable] on local|memory", "diabetes[portable] on pixel-a|memory"} <= found
    assert any(f.startswith("digits") and f.endswith("|latency") for f in found), sorted(found)
    assert old_false > len(history_false)  # what the threshold costs on this data


@pytest.mark.skipif(
    not CHROMIUM.exists(), reason="/usr/bin/chromium missing (make setup installs it)"
)
def test_the_trend_page_renders_in_chromium_with_the_change_points_drawn(
    real_nights: RealNights, sixty: list[list[Doc]], tmp_path: Path
) -> None:
    page = tmp_path / "trend.html"
    drawn = history("trend", "--out", page, "--store", real_nights.history)
    assert drawn.exit_code == 0, drawn.output
    browser = Browser(tmp_path / "chromium-profile")
    try:
        browser.page("Page.navigate", url=page.as_uri())
        assert browser.wait_for("document.readyState === 'complete'", 30)
        # The planned buffers' shift: exact in every night, so its mark stands at one
        # place whatever the machine's load did to the latency series.
        name = f"{MEMORY_MODEL}|portable|none|local|memory.planned_bytes"
        figure = f"document.querySelector('figure[data-series=\"{name}\"]')"
        marks = browser.evaluate(
            f"""Array.from({figure}.querySelectorAll('line.change-point')).map(l => {{
                const box = l.getBoundingClientRect();
                const svg = l.ownerSVGElement.getBoundingClientRect();
                return {{x: (box.left - svg.left) / svg.width, height: box.height,
                         title: l.querySelector('title').textContent}}; }})"""
        )
        plotted = browser.evaluate(
            f"{figure}.querySelector('polyline').getBoundingClientRect().width"
        )
        shifted = browser.evaluate("document.querySelectorAll('figure.series.shifted').length")
        browser.screenshot(tmp_path / "trend.png")
    finally:
        browser.close()
    assert plotted > 300  # the series is drawn across the plot
    (mark,) = marks
    assert mark["height"] > 50
    # Drawn at night 50 of 60 (within one night), naming what changed.
    assert abs(mark["x"] - MEMORY_NIGHT / 59) < 1.5 / 59, mark
    assert "executorch" in mark["title"], mark
    assert shifted >= 4  # median latency and planned buffers, on both devices


def test_a_farm_night_judged_against_the_history_links_its_trend_page(
    real_nights: RealNights, sixty: list[list[Doc]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tonight (a real night: the old digits model, the old planned buffers) judged
    against sixty nights that end on the new ones: better, so no regression."""
    import xml.etree.ElementTree as ET

    monkeypatch.setenv("ETDEPLOY_HISTORY", str(real_nights.history))
    tonight = farm(real_nights.spec, "--out", tmp_path / "tonight", "--baseline", "history",
                   "--html", tmp_path / "report.html", "--junit", tmp_path / "junit.xml")  # fmt: skip
    assert tonight.exit_code == 0, tonight.output
    assert "trends in" in tonight.output
    report = (tmp_path / "report.html").read_text()
    assert 'href="report-trend.html"' in report
    assert (tmp_path / "report-trend.html").exists()
    suite = ET.parse(tmp_path / "junit.xml").getroot()
    assert suite.get("failures") == "0"

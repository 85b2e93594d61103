"""`etdeploy farm --baseline history`: a sustained shift reads REGRESSED and fails
the night, named a change point in every report; a single night out of line is an
outlier, reported and not failed.

The shifts are planted in the planned buffers, which a real night measures exactly,
not in latency, which a busy machine moves by more than a planted shift (the sixty
nights' test covers latency offline)."""

from __future__ import annotations

import copy
import datetime
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from typer.testing import Result

from etdeploy.farm import FARM_DOC_NAME
from tests.history.conftest import RealNights
from tests.history.nights import Doc, grow_planned, write_night
from tests.support.farm_fixtures import farm

pytestmark = pytest.mark.slow

EARLIER, RECENT = 14, 6  # nights of history: digits was faster, then as now


def planted_history(real: list[list[Doc]]) -> list[list[Doc]]:
    """Twenty nights before tonight, from the real ones: digits on local planned half
    the buffers until six nights ago (so tonight continues a shift), digits on the
    phone a fifth on every night (so tonight alone is out of line)."""
    nights = []
    start = datetime.datetime(2026, 11, 1)
    for n in range(EARLIER + RECENT):
        night = []
        for doc in real[n % len(real)]:
            doc = copy.deepcopy(doc)
            scale = 1.0
            if doc["farm"]["key"] == "digits|portable|none|local" and n < EARLIER:
                scale = 0.5
            if doc["farm"]["key"] == "digits|portable|none|pixel-a":
                scale = 0.2
            grow_planned(doc, scale)
            doc["started_at"] = (start + datetime.timedelta(days=n)).strftime("%Y-%m-%dT%H:%M:%SZ")
            doc["job"]["id"] = f"planted-{n}-{doc['farm']['key']}"
            night.append(doc)
        nights.append(night)
    return nights


def test_a_sustained_shift_regresses_and_one_night_out_of_line_is_only_told(
    real_nights: RealNights, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "history.sqlite"
    files = [write_night(night, tmp_path / "planted" / f"n{n}.jsonl")
             for n, night in enumerate(planted_history(real_nights.nights))]  # fmt: skip
    recorded = farm_history_record(files, store)
    assert recorded.exit_code == 0, recorded.output
    monkeypatch.setenv("ETDEPLOY_HISTORY", str(store))
    out = tmp_path / "tonight"
    tonight = farm(real_nights.spec, "--out", out, "--baseline", "history",
                   "--junit", tmp_path / "junit.xml", "--html", tmp_path / "report.html")  # fmt: skip
    assert tonight.exit_code == 1, tonight.output
    text = " ".join(tonight.output.split())
    assert "REGRESSED" in text
    assert "regression: digits[portable] on local: memory.planned_bytes" in text
    assert "a change point" in text
    assert "outlier: digits[portable] on pixel-a: memory.planned_bytes" in text

    doc = json.loads((out / FARM_DOC_NAME).read_text())
    alarms = {(a["label"], a["part"], a["alarm"]) for a in doc["regressions"]}
    assert ("digits[portable] on local", "memory.planned_bytes", "change point") in alarms
    assert ("digits[portable] on pixel-a", "memory.planned_bytes", "outlier") in alarms
    assert not any(
        a["alarm"] == "change point" and "pixel-a" in a["label"] for a in doc["regressions"]
    )

    cases = {c.get("name"): c for c in ET.parse(tmp_path / "junit.xml").getroot().iter("testcase")}
    digits = cases["digits[portable] on local"].find("failure")
    assert digits is not None and digits.get("type") == "regression"
    assert "regression, change point (memory)" in (digits.text or "")
    phone = cases["digits[portable] on pixel-a"]
    assert phone.find("failure") is None
    assert "outlier, single night, not a regression" in (phone.findtext("system-out") or "")
    report = (tmp_path / "report.html").read_text()
    assert "memory (change point)" in report and "memory (outlier)" in report


def farm_history_record(files: list[Path], store: Path) -> Result:
    from typer.testing import CliRunner

    from etdeploy.cli import app

    return CliRunner().invoke(app, ["history", "record", *map(str, files), "--store", str(store)],
                              catch_exceptions=False)  # fmt: skip


def test_a_spec_names_its_history_store_and_the_environment_overrides_it(
    real_nights: RealNights, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """farm.history: the team's store, a path relative to the spec (or a URL);
    $ETDEPLOY_HISTORY, this run's own choice, wins over it."""
    from etdeploy.history.store import open_store
    from tests.support.farm_fixtures import write_spec

    (tmp_path / "spec" / "team").mkdir(parents=True)
    spec = write_spec(tmp_path / "spec" / "n.toml", {"models": ["digits"], "devices": ["local"],
                      "iterations": 3, "warmup": 0, "history": "team/history.sqlite"})  # fmt: skip
    monkeypatch.delenv("ETDEPLOY_HISTORY", raising=False)
    night = farm(spec, "--out", tmp_path / "night")
    assert night.exit_code == 0, night.output
    with open_store(tmp_path / "spec" / "team" / "history.sqlite") as store:
        assert [r.key.model for r in store.jobs()] == ["digits"]
    assert not (tmp_path / "etdeploy-history.sqlite").exists()  # not the default beside OUT

    monkeypatch.setenv("ETDEPLOY_HISTORY", str(tmp_path / "own.sqlite"))
    again = farm(spec, "--out", tmp_path / "again")
    assert again.exit_code == 0, again.output
    with open_store(tmp_path / "own.sqlite") as store:
        assert len(store.jobs()) == 1

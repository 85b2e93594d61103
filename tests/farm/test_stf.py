"""etdeploy.farm.sources.stf: a farm claims phones from an STF/DeviceFarmer server
(the stand-in of tests/support/stf_server.py, handing out loopback phones),
reaches them with `adb connect` on the testbed's real adb server, runs its jobs,
and releases every claim: at the end, on errors, on resume after a kill, or by
the timeout it asked for."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from etdeploy.farm import RESULTS_NAME, load_farm_spec
from etdeploy.farm.sources import CLAIMS_NAME, release_leftovers
from tests.support.farm_fixtures import (
    QUICK,
    FarmTestbed,
    farm,
    lines_of,
    wait_for,
    worker_pids,
    write_spec,
)
from tests.support.interrupt import interrupted_after
from tests.support.loopback_adb import LoopbackAdbDevice
from tests.support.stf_server import StfServer, stf_server

TOKEN_ENV = "ETDEPLOY_TEST_STF_TOKEN"
TOKEN = "stf-test-token"
USER = "ci@example.org"
SERIALS = ("STF-PIXEL-A", "STF-PIXEL-B")


@pytest.fixture
def stf(bed: FarmTestbed, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[StfServer]:
    """Two loopback Pixel 8s behind a stand-in STF server; the farm's adb server is
    the testbed's. Afterwards the testbed's server forgets them."""
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    phones = {serial: LoopbackAdbDevice(tmp_path / serial) for serial in SERIALS}
    with contextlib.ExitStack() as stack:
        for phone in phones.values():
            phone.start()
            stack.callback(phone.stop)
        server = stack.enter_context(stf_server(phones))
        yield server
        for phone in phones.values():
            bed.adb.server.adb("disconnect", phone.address, check=False)


def stf_spec(path: Path, stf: StfServer, bed: FarmTestbed, *, source: dict[str, Any] | None = None,
             jobs: list[dict[str, Any]] | None = None, **farm_keys: Any) -> Path:  # fmt: skip
    """A spec whose devices stf-a and stf-b are Pixel 8s from the STF server."""
    stf_table = {
        "url": stf.url, "token_env": TOKEN_ENV, "claim_timeout_s": 600,
        "adb_port": bed.adb.server.port, "runner": str(bed.runner),
        "model": "Pixel 8", "devices": ["stf-a", "stf-b"], **(source or {}),
    }  # fmt: skip
    keys = {"models": ["digits"], "devices": ["stf-a", "stf-b"], **QUICK, "retries": 0,
            "sources": {"stf": stf_table}, **farm_keys}  # fmt: skip
    return write_spec(path, keys, jobs=jobs)


def kinds(stf: StfServer, what: str) -> list[str]:
    return [serial for kind, serial, _who in stf.events if kind == what]


@pytest.mark.slow
def test_a_farm_claims_runs_and_releases_two_stf_phones(
    bed: FarmTestbed, stf: StfServer, tmp_path: Path
) -> None:
    spec = stf_spec(tmp_path / "n.toml", stf, bed)
    out = tmp_path / "out"
    done = farm(spec, "--out", out)
    assert done.exit_code == 0, done.output
    results = {r["device"]["name"]: r for r in lines_of(out / RESULTS_NAME)}
    assert sorted(results) == ["stf-a", "stf-b"]
    addresses = {phone.address for phone in (d.phone for d in stf.devices.values())}
    for result in results.values():
        assert result["status"] == "passed" and result["device"]["transport"] == "adb"
        assert result["device"]["serial"] in addresses  # reached through remoteConnectUrl
    assert len({r["device"]["serial"] for r in results.values()}) == 2  # one phone per name

    # Claimed with the timeout the spec asked for (ms), connected, then given back.
    assert sorted(kinds(stf, "claimed")) == sorted(SERIALS)
    assert sorted(kinds(stf, "remote-connect")) == sorted(SERIALS)
    assert sorted(kinds(stf, "remote-disconnect")) == sorted(SERIALS)
    assert sorted(kinds(stf, "released")) == sorted(SERIALS) and not kinds(stf, "expired")
    claims = [r for r in stf.requests if r[:2] == ("POST", "/api/v1/user/devices")]
    assert [status for *_, status in claims] == [200, 200]
    assert stf.claims() == {} and not (out / CLAIMS_NAME).exists()
    for device in stf.devices.values():
        assert bed.adb.server.state(device.phone.address) == "absent"  # adb disconnected
    assert "claimed STF-PIXEL-" in done.output and "released STF-PIXEL-" in done.output


@pytest.mark.slow
def test_a_name_no_free_phone_matches_fails_its_jobs_alone_and_nothing_stays_claimed(
    bed: FarmTestbed, stf: StfServer, tmp_path: Path
) -> None:
    # Someone is using phone A in the STF UI; the farm must take B for stf-a.
    stf.take("STF-PIXEL-A", "someone@example.org")
    spec = stf_spec(
        tmp_path / "n.toml", stf, bed, devices=["stf-a", "galaxy"],
        source={"devices": {"stf-a": {}, "galaxy": {"model": "SM-S911B", "min_sdk": 34}}},
    )  # fmt: skip
    out = tmp_path / "out"
    done = farm(spec, "--out", out)
    assert done.exit_code == 3, done.output  # only an infrastructure error
    results = {r["device"]["name"]: r for r in lines_of(out / RESULTS_NAME)}
    assert results["stf-a"]["status"] == "passed"
    assert results["stf-a"]["device"]["serial"] == stf.devices["STF-PIXEL-B"].phone.address
    galaxy = results["galaxy"]
    assert galaxy["status"] == "error" and galaxy["error"]["infrastructure"]
    assert "no STF device matches galaxy (model=SM-S911B, min_sdk=34)" in galaxy["error"]["message"]
    assert "Pixel 8 (sdk 35, x86_64)" in galaxy["error"]["hint"]
    assert stf.claims() == {"STF-PIXEL-A": "someone@example.org"}  # theirs, untouched
    assert kinds(stf, "released") == ["STF-PIXEL-B"]


@pytest.mark.slow
def test_an_interrupted_farm_still_releases_its_phones(
    bed: FarmTestbed, stf: StfServer, tmp_path: Path
) -> None:
    for device in stf.devices.values():  # both jobs hang mid-push, holding their phones
        device.phone.faults.stall_after_send_bytes = 1 << 20
    spec = stf_spec(tmp_path / "n.toml", stf, bed)
    with interrupted_after(8):  # Ctrl-C
        done = farm(spec, "--out", tmp_path / "out")
    assert done.exit_code == 130
    assert sorted(kinds(stf, "claimed")) == sorted(SERIALS)
    assert sorted(kinds(stf, "released")) == sorted(SERIALS) and stf.claims() == {}
    assert not (tmp_path / "out" / CLAIMS_NAME).exists()


def test_a_missing_or_refused_token_is_bad_input_before_anything_is_claimed(
    bed: FarmTestbed, stf: StfServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = stf_spec(tmp_path / "n.toml", stf, bed)
    monkeypatch.delenv(TOKEN_ENV)
    done = farm(spec, "--out", tmp_path / "a")
    assert done.exit_code == 2 and f"${TOKEN_ENV} is not set" in done.output
    monkeypatch.setenv(TOKEN_ENV, "not-a-token")
    done = farm(spec, "--out", tmp_path / "b")
    assert done.exit_code == 2 and "refused the token" in done.output
    assert stf.claims() == {} and not stf.events
    assert ("GET", "/api/v1/devices", 401) in stf.requests
    assert not (tmp_path / "b" / RESULTS_NAME).exists()


def test_stf_tables_are_checked_when_the_spec_is_read(tmp_path: Path) -> None:
    def read(source: dict[str, Any], **extra: Any) -> str:
        path = write_spec(tmp_path / "s.toml", {"models": ["digits"], "devices": ["p"],
                                                 "sources": {"stf": source}}, **extra)  # fmt: skip
        done = farm(path)
        assert done.exit_code == 2, done.output
        return done.output

    good = {"url": "https://stf.example.org", "devices": ["p"]}
    assert "unknown key farm.sources.stf.tokenenv" in read({**good, "tokenenv": "X"})
    assert "not an http(s) URL" in read({**good, "url": "stf.example.org"})
    assert "farm.sources.stf.devices: no devices" in read({**good, "devices": []})
    assert "farm.sources.stf.sdk: expected int" in read({**good, "sdk": "35"})
    assert "[devices.p] also defines" in read(good, devices={"p": {"transport": "local"}})
    unknown = write_spec(tmp_path / "t.toml", {"models": ["digits"], "devices": ["p"],
                                                "sources": {"aws": {}}})  # fmt: skip
    assert "unknown device source farm.sources.aws" in farm(unknown).output
    spec = load_farm_spec(write_spec(tmp_path / "u.toml", {
        "models": ["digits"], "devices": ["p", "q"],
        "sources": {"stf": {**good, "model": "Pixel 8", "devices": {"p": {}, "q": {"sdk": 34}}}},
    }))  # fmt: skip
    (source,) = spec.sources
    assert source.devices["p"].model == source.devices["q"].model == "Pixel 8"
    assert source.devices["q"].sdk == 34 and source.token_env == "STF_TOKEN"


# -- a farm killed with its claims out -----------------------------------------------------


def start_killable_farm(spec: Path, out: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "etdeploy", "farm", "run", str(spec), "--out", str(out)],
        env={**os.environ, TOKEN_ENV: TOKEN}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def kill_mid_way(process: subprocess.Popen[bytes], out: Path, stf: StfServer) -> None:
    """SIGKILL the farm once a job has finished while both phones are claimed."""
    try:
        wait_for(lambda: (out / RESULTS_NAME).is_file() and lines_of(out / RESULTS_NAME), 180,
                 "a first job finished")  # fmt: skip
        assert sorted(stf.claims()) == sorted(SERIALS)
        os.kill(process.pid, signal.SIGKILL)
        process.wait(10)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    # Its orphaned worker (if one was running) stops on its own.
    wait_for(lambda: not worker_pids(out), 30, "the orphaned worker stopped")


# Two jobs per phone and a pause between them: the farm is killed in that pause.
MID_WAY: dict[str, Any] = {
    "models": [], "cooldown_s": 3,
    "jobs": [{"model": "digits", "backend": b} for b in ("xnnpack", "portable")],
}  # fmt: skip


@pytest.mark.slow
def test_a_killed_farm_releases_its_claims_when_resumed(
    bed: FarmTestbed, stf: StfServer, tmp_path: Path
) -> None:
    spec = stf_spec(tmp_path / "n.toml", stf, bed, **MID_WAY)
    out = tmp_path / "out"
    kill_mid_way(start_killable_farm(spec, out), out, stf)
    held = stf.claims()
    assert sorted(held) == sorted(SERIALS) and set(held.values()) == {USER}
    journal = json.loads((out / CLAIMS_NAME).read_text())["claims"]
    assert sorted(c["serial"] for c in journal) == sorted(SERIALS)
    assert all(c["remote"] for c in journal)
    events_at_kill = len(stf.events)

    again = farm(spec, "--out", out, "--resume")
    assert again.exit_code == 0, again.output
    assert "claimed by an earlier farm" in again.output
    after = stf.events[events_at_kill:]
    # The leftovers are released before anything is claimed again.
    first_claim = next(i for i, e in enumerate(after) if e[0] == "claimed")
    assert sorted(s for kind, s, _ in after[:first_claim] if kind == "released") == sorted(SERIALS)
    assert stf.claims() == {} and not (out / CLAIMS_NAME).exists()
    assert len(lines_of(out / RESULTS_NAME)) == 4 and not kinds(stf, "expired")


@pytest.mark.slow
def test_a_killed_farm_leaves_no_claim_once_its_timeout_passes(
    bed: FarmTestbed, stf: StfServer, tmp_path: Path
) -> None:
    # Idle for 8 s: longer than a job leaves its phone idle here, short enough to wait for.
    spec = stf_spec(tmp_path / "n.toml", stf, bed, source={"claim_timeout_s": 8}, **MID_WAY)
    out = tmp_path / "out"
    kill_mid_way(start_killable_farm(spec, out), out, stf)
    claims = [r for r in stf.requests if r[:2] == ("POST", "/api/v1/user/devices")]
    assert len(claims) == 2

    wait_for(lambda: not stf.claims(), 30, "STF ended the idle claims")
    assert sorted(kinds(stf, "expired")) == sorted(SERIALS) and not kinds(stf, "released")
    # The journal still names them; whoever starts on this OUT next finds them gone.
    notes = release_leftovers(load_farm_spec(spec), out)
    assert sum("was no longer ours (HTTP 403)" in note for note in notes) == 2
    assert not (out / CLAIMS_NAME).exists() and not kinds(stf, "released")

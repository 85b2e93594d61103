"""`etdeploy run digits --device mac` in host mode, end to end through a REAL
OpenSSH sshd on 127.0.0.1 (tests/support/sshd.py). No Mac is reachable here:
the sshd host is this Linux machine, so the runner pushed is the host build,
the same program a Mac gets when built there against its executorch wheel.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from etdeploy.cli import app
from etdeploy.devices.transfer import PARTIAL_MARKER
from tests.support.device_config import ssh_table, write_config
from tests.support.sshd import CuttingProxy, SshServer

pytestmark = pytest.mark.slow


def run(*args: str | Path) -> Any:
    return CliRunner().invoke(app, ["run", *map(str, args)], catch_exceptions=False)


def test_digits_runs_over_ssh_and_a_second_run_sends_nothing(
    sshd: SshServer, tmp_path: Path
) -> None:
    config = write_config(tmp_path / "etdeploy.toml", {"mac": ssh_table(sshd, tmp_path)})
    first = run(
        "digits", "--device", "mac", "--config", config, "-n", "3", "--json", tmp_path / "1.json"
    )
    assert first.exit_code == 0, first.output
    result = json.loads((tmp_path / "1.json").read_text())
    assert result["status"] == "passed"
    assert result["device"]["transport"] == "ssh" and result["device"]["os"] == "linux"
    assert result["deploy"]["bytes_sent"] > 0 and result["latency_ms"]["n"] == 3

    second = run(
        "digits", "--device", "mac", "--config", config, "-n", "1", "--json", tmp_path / "2.json"
    )
    assert second.exit_code == 0, second.output
    assert json.loads((tmp_path / "2.json").read_text())["deploy"]["bytes_sent"] == 0


def test_an_unknown_host_key_stops_the_run_with_the_fix(sshd: SshServer, tmp_path: Path) -> None:
    empty = tmp_path / "known_hosts_empty"
    empty.write_text("")
    config = write_config(
        tmp_path / "etdeploy.toml", {"mac": ssh_table(sshd, tmp_path, known_hosts=str(empty))}
    )
    done = run("digits", "--device", "mac", "--config", config)
    assert done.exit_code == 3, done.output
    assert "host key" in done.output and "hint:" in done.output and "Traceback" not in done.output


def test_a_connection_cut_during_deploy_is_exit_3_and_the_next_run_succeeds(
    sshd: SshServer, tmp_path: Path
) -> None:
    workdir = tmp_path / "remote-work"
    with CuttingProxy(sshd.port) as proxy:
        known = tmp_path / "known_hosts_proxy"
        known.write_text(sshd.known_hosts_line(port=proxy.port))
        table = ssh_table(sshd, tmp_path, port=proxy.port, known_hosts=str(known))
        config = write_config(tmp_path / "etdeploy.toml", {"mac": table})
        proxy.arm(after_bytes=3 * 1024 * 1024)  # part-way through the runner's libraries
        done = run(
            "digits",
            "--device",
            "mac",
            "--config",
            config,
            "-n",
            "1",
            "--json",
            tmp_path / "r.json",
        )
        assert done.exit_code == 3, done.output
        error = json.loads((tmp_path / "r.json").read_text())["error"]
        assert error["infrastructure"] and error["retryable"]
        assert proxy.cuts == 1

        again = run("digits", "--device", "mac", "--config", config, "-n", "1")
        assert again.exit_code == 0, again.output
    assert [p for p in workdir.rglob("*") if PARTIAL_MARKER in p.name] == []

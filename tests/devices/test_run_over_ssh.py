"""`etdeploy run digits --device mac` in host mode, end to end through a REAL
OpenSSH sshd on 127.0.0.1 (tests/support/sshd.py). No Mac is reachable here:
the sshd host is this Linux machine, so the runner pushed is the host build,
the same program a Mac gets when built there against its executorch wheel.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from etdeploy.cli import app
from etdeploy.devices.transfer import PARTIAL_MARKER
from tests.support.device_config import ssh_table, through_proxy, write_config
from tests.support.memory import assert_account
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
    # The runner measured itself on the host it was sent to.
    assert_account(result, unexplained_within=0.05)

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
        table = ssh_table(sshd, tmp_path, **through_proxy(sshd, proxy.port, tmp_path))
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
    # The cut run's job directory went with the next run.
    assert [p.name for p in workdir.iterdir() if p.name[:2] == "20"] == []


def error_line(output: str) -> str:
    lines = [x for x in output.splitlines() if x.startswith("error:")]
    assert len(lines) == 1 and "hint:" in output and "Traceback" not in output, output
    return lines[0]


def script(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


def test_a_crashing_runner_over_ssh_is_named_by_its_signal(sshd: SshServer, tmp_path: Path) -> None:
    crashing = script(tmp_path / "crash" / "executor_runner",
                      "#!/bin/sh\necho 'Model loaded in 0.5 ms.'\nkill -SEGV $$\n")  # fmt: skip
    config = write_config(tmp_path / "etdeploy.toml", {"mac": ssh_table(sshd, tmp_path)})
    done = run("digits", "--device", "mac", "--config", config, "--runner", crashing, "-n", "1")
    assert done.exit_code == 3, done.output
    line = error_line(done.output)
    assert "SIGSEGV" in line and "SIGHUP" not in line


def test_a_silent_runner_over_ssh_is_stopped_by_the_idle_timeout_and_named_so(
    sshd: SshServer, tmp_path: Path
) -> None:
    silent = script(tmp_path / "silent" / "executor_runner",
                    "#!/bin/sh\necho 'Model loaded in 0.5 ms.'\nexec sleep 600\n")  # fmt: skip
    config = write_config(tmp_path / "etdeploy.toml", {"mac": ssh_table(sshd, tmp_path)})
    done = run("digits", "--device", "mac", "--config", config, "--runner", silent, "-n", "1",
               "--idle-timeout", "3", "--deadline", "120")  # fmt: skip
    assert done.exit_code == 3, done.output
    assert "said nothing for 3 s and was stopped (--idle-timeout)" in error_line(done.output)
    assert "raise --idle-timeout" in " ".join(done.output.split())


def test_a_program_altered_on_the_host_is_detected_and_sent_again(
    sshd: SshServer, tmp_path: Path
) -> None:
    config = write_config(tmp_path / "etdeploy.toml", {"mac": ssh_table(sshd, tmp_path)})
    first = run("digits", "--device", "mac", "--config", config, "-n", "1",
                "--json", tmp_path / "1.json")  # fmt: skip
    assert first.exit_code == 0, first.output
    artifact = json.loads((tmp_path / "1.json").read_text())["artifact"]
    pte = tmp_path / "remote-work" / "programs" / f"{artifact['sha256'][:24]}.pte"
    st = pte.stat()
    pte.write_bytes(pte.read_bytes()[:-64] + bytes(64))  # same size, its mtime put back
    os.utime(pte, ns=(st.st_atime_ns, st.st_mtime_ns))
    second = run("digits", "--device", "mac", "--config", config, "-n", "1",
                 "--json", tmp_path / "2.json")  # fmt: skip
    assert second.exit_code == 0, second.output
    deploy = json.loads((tmp_path / "2.json").read_text())["deploy"]
    assert (deploy["files_sent"], deploy["bytes_sent"]) == (1, st.st_size)


def test_a_full_disk_over_ssh_is_exit_3_with_the_clean_hint_and_clean_makes_room(
    sshd: SshServer, tmp_path: Path
) -> None:
    from etdeploy.runner_build import ensure_runner
    from tests.support.tmpfs import small_tmpfs

    bundle = ensure_runner("host")
    needed = sum(p.stat().st_size for p in bundle.files)
    workdir = tmp_path / "remote-work"
    config = write_config(tmp_path / "etdeploy.toml", {"mac": ssh_table(sshd, tmp_path)})
    with small_tmpfs(workdir, needed + 3 * 1024 * 1024):
        old = workdir / "programs"
        old.mkdir()
        month_ago = time.time() - 30 * 86400
        for i in range(3):  # what earlier runs left there, unused for a month
            (old / f"{i:024x}.pte").write_bytes(os.urandom(2 * 1024 * 1024))
            os.utime(old / f"{i:024x}.pte", (month_ago, month_ago))
        done = run("digits", "--device", "mac", "--config", config, "-n", "1")
        assert done.exit_code == 3, done.output
        error_line(done.output)
        assert "etdeploy clean --device mac" in " ".join(done.output.split())
        leftovers = [p for p in workdir.rglob("*") if PARTIAL_MARKER in p.name or ".tmp" in p.name]
        assert leftovers == [] and [p for p in workdir.iterdir() if p.name[:2] == "20"] == []

        cleaned = CliRunner().invoke(
            app, ["clean", "--device", "mac", "--config", str(config), "--older-than", "7d"]
        )
        assert cleaned.exit_code == 0, cleaned.output
        assert list(old.iterdir()) == []
        again = run("digits", "--device", "mac", "--config", config, "-n", "1")
        assert again.exit_code == 0, again.output

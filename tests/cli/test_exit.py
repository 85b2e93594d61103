"""How the etdeploy process ends (etdeploy.cli._exit): with the status sys.exit would
give, after what an exit must still do (atexit handlers, the streams flushed, a
thread that is not a daemon finished), without the interpreter's teardown."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from etdeploy.cli._exit import exit_code_of


def _ended(code: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "child.py"
    script.write_text(code)
    return subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=False
    )


@pytest.mark.parametrize(("code", "status"), [(None, 0), (0, 0), (3, 3), ("bye", 1)])
def test_the_status_is_what_sys_exit_would_give(code: object, status: int) -> None:
    assert exit_code_of(code) == status


def test_atexit_handlers_run_and_what_was_printed_arrives(tmp_path: Path) -> None:
    marker = tmp_path / "atexit-ran"
    done = _ended(
        "import atexit, sys\n"
        "from etdeploy.cli._exit import end_process\n"
        f"atexit.register(lambda: open({str(marker)!r}, 'w').write('yes'))\n"
        "sys.stdout.write('result line without a newline')\n"
        "end_process(4)\n",
        tmp_path,
    )
    assert done.returncode == 4
    assert done.stdout == "result line without a newline"
    assert marker.read_text() == "yes"


def test_a_thread_that_is_not_a_daemon_is_waited_for(tmp_path: Path) -> None:
    marker = tmp_path / "thread-finished"
    done = _ended(
        "import threading, time\n"
        "from etdeploy.cli._exit import end_process\n"
        "def work():\n"
        "    time.sleep(0.3)\n"
        f"    open({str(marker)!r}, 'w').write('yes')\n"
        "threading.Thread(target=work).start()\n"
        "end_process(0)\n",
        tmp_path,
    )
    assert done.returncode == 0
    assert marker.read_text() == "yes"


def test_the_command_line_ends_with_its_documented_status() -> None:
    ok = subprocess.run(
        [sys.executable, "-m", "etdeploy", "--version"], capture_output=True, text=True, timeout=60
    )
    bad = subprocess.run(
        [sys.executable, "-m", "etdeploy", "run", "digits", "--iterations", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ok.returncode == 0 and ok.stdout.strip()
    assert bad.returncode == 2 and "error:" in bad.stderr

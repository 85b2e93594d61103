"""The CLI starts without torch, and translates errors into one line and a code."""

from __future__ import annotations

import subprocess
import sys


def _modules_loaded_by(args: list[str]) -> set[str]:
    code = (
        "import sys\nfrom etdeploy.cli import app\n"
        "try:\n    app(" + repr(args) + ")\nexcept SystemExit:\n    pass\n"
        "print('---modules---'); print('\\n'.join(sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    # The help itself may name torch ("runs without torch"): only the list after it counts.
    return set(done.stdout.split("---modules---", 1)[1].split())


def test_help_does_not_import_torch() -> None:
    loaded = _modules_loaded_by(["--help"])
    assert "etdeploy.cli" in loaded
    assert "torch" not in loaded and "executorch" not in loaded


def test_build_help_does_not_import_torch() -> None:
    loaded = _modules_loaded_by(["build", "--help"])
    assert "torch" not in loaded


def test_inspect_of_a_missing_file_is_exit_2_with_a_hint(tmp_path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "etdeploy", "inspect", str(tmp_path / "nope.pte")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "error: not a file" in done.stderr and "hint:" in done.stderr

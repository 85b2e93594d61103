"""`etdeploy explore` without its optional extra: one line naming what is missing,
the pip command that brings it, exit 2, before anything is read or imported.

"Not installed" is made real for the child process the way Python itself marks a
module unimportable: a None entry in sys.modules (the import system raises
ImportError for it, and importlib.util.find_spec refuses it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

RUN_WITHOUT = """
import sys
for name in {blocked!r}:
    sys.modules[name] = None
sys.argv = ["etdeploy", *{args!r}]
from etdeploy.cli import main
try:
    main()
finally:
    print("TORCH", "torch" in sys.modules, file=sys.stderr)
"""


def run_without(blocked: tuple[str, ...], *args: str) -> subprocess.CompletedProcess[str]:
    code = RUN_WITHOUT.format(blocked=blocked, args=list(args))
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )


@pytest.mark.parametrize(
    ("blocked", "named"),
    [
        (("model_explorer",), "ai-edge-model-explorer"),
        (("executorch_extension_model_explorer",), "executorch-extension-model-explorer"),
    ],
)
def test_without_the_extra_explore_is_one_line_with_the_pip_hint_and_exit_2(
    tmp_path: Path, blocked: tuple[str, ...], named: str
) -> None:
    result = tmp_path / "result.json"
    result.write_text("{}")
    done = run_without(blocked, "explore", str(result))
    assert done.returncode == 2, done.stderr
    told = [line for line in done.stderr.splitlines() if not line.startswith("TORCH")]
    assert told == [
        f"error: etdeploy explore needs {named}, which is not installed",
        "hint: pip install 'etdeploy[explore]' (Model Explorer and ExecuTorch's adapter for it)",
    ]
    assert "TORCH False" in done.stderr  # said before anything heavy is imported
    assert done.stdout == ""


def test_the_base_cli_never_imports_model_explorer() -> None:
    code = (
        "import sys\nimport etdeploy.cli\n"
        "print(sorted(m for m in sys.modules if 'model_explorer' in m or m == 'torch'))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "[]"

"""What starting the CLI costs (etdeploy.cli._startup, etdeploy.cli.main): only the
command at hand is imported, what dataclasses compiles is compiled once per
interpreter, and typer coerces a value it is given exactly as before."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

# A record as the report's are made, and what the cache must not change about it.
_RECORD_PROGRAM = """
import dataclasses, json, sys
import etdeploy.cli  # puts the cache in place, as `etdeploy` does
compiled = []
real_compile = compile
def counting(*args, **kwargs):
    if "__create_fn__" in str(args[0]):  # what dataclasses writes
        compiled.append(args[0])
    return real_compile(*args, **kwargs)
import builtins
builtins.compile = counting
from etdeploy.report.record import Record, omitted_if_none
@dataclasses.dataclass(frozen=True)
class Sample(Record):
    name: str
    size: int = 3
    note: str | None = omitted_if_none()
a, b = Sample("x"), Sample("x", 3)
try:
    a.name = "y"
    frozen = False
except dataclasses.FrozenInstanceError:
    frozen = True
init = Sample.__init__.__code__
print(json.dumps({
    "eq": a == b, "hash": hash(a) == hash(b), "repr": repr(a), "frozen": frozen,
    "json": a.to_json(), "compiled": len(compiled),
    "init": [init.co_code.hex(), list(init.co_varnames), init.co_filename],
}))
"""


def _record_run(cache: Path) -> dict[str, Any]:
    import json

    done = subprocess.run(
        [sys.executable, "-c", _RECORD_PROGRAM],
        env={**_environ(), "ETDEPLOY_CACHE_DIR": str(cache)},
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    return json.loads(done.stdout.splitlines()[-1])  # type: ignore[no-any-return]


def _environ() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def test_a_record_is_the_same_whether_its_code_was_compiled_now_or_cached(
    tmp_path: Path,
) -> None:
    first = _record_run(tmp_path / "cache")
    again = _record_run(tmp_path / "cache")
    assert first["compiled"] > 0 and again["compiled"] == 0  # nothing compiled the 2nd time
    assert {k: v for k, v in first.items() if k != "compiled"} == {
        k: v for k, v in again.items() if k != "compiled"
    }
    assert first["eq"] and first["hash"] and first["frozen"]
    assert first["repr"] == "Sample(name='x', size=3, note=None)"
    assert first["json"] == {"name": "x", "size": 3}


def test_a_damaged_code_cache_is_ignored_and_written_again(tmp_path: Path) -> None:
    _record_run(tmp_path / "cache")
    (cached,) = (tmp_path / "cache" / "startup").iterdir()
    data = bytearray(cached.read_bytes())
    data[len(data) // 2] ^= 0xFF
    cached.write_bytes(bytes(data))
    damaged = _record_run(tmp_path / "cache")
    assert damaged["compiled"] > 0 and damaged["eq"] and damaged["frozen"]
    assert _record_run(tmp_path / "cache")["compiled"] == 0


def test_a_command_imports_its_own_module_and_the_help_lists_every_command(
    tmp_path: Path,
) -> None:
    code = (
        "import sys\nfrom etdeploy.cli import modules_for, load_commands\n"
        "load_commands(modules_for(['run', '--help']))\n"
        "print(sorted(m for m in sys.modules if m.startswith('etdeploy.cli.')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=True)  # fmt: skip
    loaded = eval(done.stdout)  # a list literal printed above
    assert "etdeploy.cli.run" in loaded
    assert not {"etdeploy.cli.farm", "etdeploy.cli.build", "etdeploy.cli.release"} & set(loaded)
    shown = subprocess.run([sys.executable, "-m", "etdeploy", "--help"], capture_output=True,
                           text=True, timeout=120, check=True).stdout  # fmt: skip
    for name in ("build", "inspect", "bundle", "clean", "devices", "doctor", "farm",
                 "release", "run", "runner", "sizecheck"):  # fmt: skip
        assert f" {name} " in shown, name


@pytest.mark.parametrize(
    ("annotation", "text"),
    [(int, "12"), (int, "-0"), (int, "+3"), (int, "007"), (int, "1_000"), (int, " 2 "),
     (int, "1.0"), (int, "abc"), (float, "1e-5"), (float, ".5"), (float, "inf"),
     (float, " 1.5"), (float, "x"), (str, "any text"), (Path, "a/b/"), (Path, "")],
)  # fmt: skip
def test_a_value_given_is_what_typers_own_coercion_makes_of_it(annotation: type, text: str) -> None:
    """etdeploy.cli._startup skips typer's pydantic adapter for plain values: for each,
    the same value as typer's adapter, or typer's own error for a bad one."""
    import typer
    from typer import _coercion, core

    import etdeploy.cli  # noqa: F401 - puts the deferred coercion in place

    def param() -> Any:
        return core.TyperOption(
            param_decls=["--x"], type_descriptor=_coercion.resolve_type_descriptor(
                annotation, typer.models.OptionInfo()),
        )  # fmt: skip

    ours = param()
    theirs = param()
    theirs._runtime_param = _coercion.build_runtime_param(theirs.type_descriptor)

    def coerced(p: Any) -> Any:
        try:
            return ("value", p.get_runtime_param().coerce(text, param=p, ctx=None))
        except Exception as exc:  # the error typer would show
            return ("error", type(exc).__name__, str(exc))

    assert coerced(ours) == coerced(theirs)

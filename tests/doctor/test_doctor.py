"""`etdeploy doctor`: versions and their pairing, the host runner, adb servers,
devices over their real transports (a real adb server with loopback phones, a
real sshd), SSH host keys, and a .pte's compatibility with the runtimes here."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from etdeploy.cli import app
from etdeploy.doctor import FAIL, OK, WARN, pairing_check
from tests.support.adb_server import free_port
from tests.support.device_config import ssh_table, write_config
from tests.support.farm_fixtures import FarmTestbed, farm_testbed


@pytest.fixture(autouse=True)
def no_default_adb_server(monkeypatch: pytest.MonkeyPatch) -> None:
    # Whatever falls through to the environment meets a closed port on a host
    # etdeploy treats as remote: nothing is started, never a user's 5037.
    monkeypatch.setenv("ANDROID_ADB_SERVER_HOST", "127.0.0.2")
    monkeypatch.setenv("ANDROID_ADB_SERVER_PORT", str(free_port()))
    monkeypatch.delenv("ANDROID_SERIAL", raising=False)


@pytest.fixture(scope="module")
def digits_pte(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the cached digits build, with its manifest, to edit freely."""
    from etdeploy.builder import BuildOptions, build

    built = build("digits", BuildOptions(backend="xnnpack"))
    folder = tmp_path_factory.mktemp("pte")
    shutil.copy(built.pte, folder / "digits.pte")
    shutil.copy(f"{built.pte}.json", folder / "digits.pte.json")
    return folder / "digits.pte"


def doctor(*args: str | Path) -> tuple[int, dict[str, Any], dict[tuple[str, str], dict[str, str]]]:
    done = CliRunner().invoke(
        app, ["doctor", "--json", "-", *map(str, args)], catch_exceptions=False
    )
    doc = json.loads(done.stdout)
    assert doc["schema"] == "etdeploy.doctor/1" and doc["exit_code"] == done.exit_code
    return done.exit_code, doc, {(c["area"], c["name"]): c for c in doc["checks"]}


def test_doctor_starts_without_torch_even_reading_a_pte(digits_pte: Path, tmp_path: Path) -> None:
    code = (
        "import sys\nfrom etdeploy.cli import app\n"
        f"try:\n    app(['doctor', '--no-devices', '--pte', {str(digits_pte)!r}])\n"
        "except SystemExit as e:\n    print('exit', e.code)\n"
        "print('MODULES:', ' '.join(sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    loaded = set(done.stdout.split("MODULES:", 1)[-1].split())
    assert "etdeploy.doctor" in loaded and "etdeploy.pte.reader" in loaded, done.stderr
    assert "torch" not in loaded and "executorch" not in loaded
    assert "exit 0" in done.stdout or "exit None" in done.stdout


def test_versions_are_read_and_their_pair_checked(tmp_path: Path) -> None:
    exit_code, _, rows = doctor("--no-devices", "--config", write_config(tmp_path / "e.toml", {}))
    assert exit_code == 0
    assert rows[("environment", "torch")]["detail"] == metadata.version("torch")
    assert rows[("environment", "executorch")]["detail"] == metadata.version("executorch")
    pair = rows[("environment", "torch/executorch pair")]
    assert pair["status"] == OK and "tested with" in pair["detail"] and "#22724" in pair["detail"]
    assert rows[("environment", "torchao (for executorch)")]["status"] == OK
    assert (
        rows[("adb", "adb binary")]["status"] == OK
        and "protocol 1.0." in rows[("adb", "adb binary")]["detail"]
    )


def test_a_torch_executorch_mismatch_fails_and_an_unknown_release_warns() -> None:
    assert pairing_check("2.13.0+cpu", "1.5.1").status == OK
    # Any patch of a paired series: a newer 2.13 or a 2.14 is a pair, not the tested one.
    newer = pairing_check("2.13.4", "1.5.2")
    assert newer.status == OK and "not the one etdeploy is tested with" in newer.detail
    assert pairing_check("2.14.1", "1.5.1").status == OK
    wrong = pairing_check("2.12.1", "1.5.1")
    assert wrong.status == FAIL and "torch 2.13.x or 2.14.x" in wrong.detail
    assert "torch==2.13.0" in wrong.hint
    assert pairing_check("2.15.0", "1.5.1").status == FAIL
    assert pairing_check("2.14.0", "1.6.0").status == WARN


def test_a_good_pte_passes_and_a_bad_one_is_exit_2(digits_pte: Path, tmp_path: Path) -> None:
    exit_code, _, rows = doctor("--no-devices", "--pte", digits_pte)
    assert exit_code == 0
    ident = rows[("pte", "digits.pte: file identifier")]
    assert ident["status"] == OK and ident["detail"].startswith("ET12, schema version")
    assert rows[("pte", "digits.pte: vs this machine's executorch")]["status"] == OK

    data = digits_pte.read_bytes()
    cut = tmp_path / "cut.pte"
    cut.write_bytes(data[:200])
    exit_code, _, rows = doctor("--no-devices", "--pte", cut)
    assert exit_code == 2 and rows[("pte", "cut.pte")]["status"] == FAIL

    other = tmp_path / "other.pte"
    other.write_bytes(data[:4] + b"ET13" + data[8:])
    exit_code, _, rows = doctor("--no-devices", "--pte", other)
    assert exit_code == 2
    assert rows[("pte", "other.pte: file identifier")]["status"] == FAIL
    assert "ET12" in rows[("pte", "other.pte: file identifier")]["detail"]


def test_the_executorch_that_built_a_pte_is_checked_against_the_runtimes(
    digits_pte: Path, tmp_path: Path
) -> None:
    # ExecuTorch's policy (runtime/COMPATIBILITY.md): a program loads in its own
    # release and the next; nothing is promised further apart, nor for a program
    # newer than its runtime. Unpromised is a warning: the operators and delegates
    # that would really fail are checked by name (doctor --device).
    manifest = json.loads(Path(f"{digits_pte}.json").read_text())
    for version, status in (("9.9.9", WARN), ("1.5.2", WARN), ("1.4.0", OK), ("1.3.0", WARN)):
        pte = tmp_path / f"v{version}.pte"
        shutil.copy(digits_pte, pte)
        manifest["versions"]["executorch"] = version
        Path(f"{pte}.json").write_text(json.dumps(manifest))
        exit_code, _, rows = doctor("--no-devices", "--pte", pte)
        assert exit_code == 0
        row = rows[("pte", f"{pte.name}: vs this machine's executorch")]
        assert row["status"] == status, row
        if status == WARN:
            assert "COMPATIBILITY.md" in row["detail"] and "2026-12-03" in row["detail"]
    bare = tmp_path / "bare.pte"
    shutil.copy(digits_pte, bare)
    exit_code, _, rows = doctor("--no-devices", "--pte", bare)
    assert exit_code == 0 and rows[("pte", "bare.pte: built with")]["status"] == WARN


# -- devices over their transports ------------------------------------------------------------


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FarmTestbed]:
    with farm_testbed(tmp_path_factory.mktemp("doctor")) as testbed:
        yield testbed


@pytest.mark.slow
def test_reachable_devices_their_runners_and_host_keys_pass(
    bed: FarmTestbed, tmp_path: Path
) -> None:
    tables = bed.device_tables(tmp_path)
    config = write_config(
        tmp_path / "etdeploy.toml", {"pixel-a": tables["pixel-a"], "mac": tables["mac"]}
    )
    exit_code, doc, rows = doctor(
        "--config", config, "--adb-host", "127.0.0.1", "--adb-port", str(bed.adb.server.port)
    )
    assert exit_code == 0, doc
    server = rows[("adb", f"adb server 127.0.0.1:{bed.adb.server.port}")]
    assert server["status"] == OK and "serves pixel-a" in server["detail"]
    assert (
        rows[("device", "pixel-a")]["status"] == OK
        and "Pixel 8" in rows[("device", "pixel-a")]["detail"]
    )
    assert rows[("runner", "runner for pixel-a")]["status"] == OK
    assert rows[("device", "mac")]["status"] == OK and "ssh" in rows[("device", "mac")]["detail"]
    assert rows[("runner", "runner for mac")]["status"] == OK
    assert rows[("ssh", "host key for mac")]["status"] == OK
    # pixel-b is attached but not configured: listed; an x86_64 phone (an emulator)
    # gets the host build with its own glibc, no NDK needed.
    loose = rows[("runner", f"runner for {bed.adb.serial('pixel-b')}")]
    assert loose["status"] == OK and "x86_64-glibc" in loose["detail"], loose


@pytest.mark.slow
def test_unreachable_devices_unknown_host_keys_and_missing_runners_fail_with_exit_3(
    bed: FarmTestbed, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANDROID_ADB_SERVER_HOST", "127.0.0.1")
    monkeypatch.setenv("ANDROID_ADB_SERVER_PORT", str(bed.adb.server.port))
    for variable in ("ANDROID_NDK", "EXECUTORCH_ANDROID_PREFIX"):
        monkeypatch.delenv(variable, raising=False)
    # No NDK, and no compiler to make the x86_64 bundle with: pixel-b has no runner.
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-c++"))
    empty = tmp_path / "known_hosts_empty"
    empty.write_text("")
    down = free_port()
    config = write_config(tmp_path / "etdeploy.toml", {
        "pixel-b": {"transport": "adb", "serial": bed.adb.serial("pixel-b")},  # no runner
        "gone": {"transport": "adb", "serial": "127.0.0.1:1"},
        "faraway": {"transport": "adb", "serial": "x", "adb_host": "127.0.0.2", "adb_port": down},
        "mac": ssh_table(bed.sshd, tmp_path, known_hosts=str(empty)),
    })  # fmt: skip
    exit_code, doc, rows = doctor("--config", config)
    assert exit_code == 3, doc
    assert rows[("device", "pixel-b")]["status"] == OK
    runner = rows[("runner", "runner for pixel-b")]
    assert (
        runner["status"] == FAIL
        and "no-such-c++" in runner["detail"]
        and "runner =" in runner["hint"]
        and "ANDROID_NDK" in runner["hint"]
    )
    assert (
        rows[("device", "gone")]["status"] == FAIL
        and "absent" in rows[("device", "gone")]["detail"]
    )
    far = rows[("adb", f"adb server 127.0.0.2:{down}")]
    assert far["status"] == FAIL and "faraway" in far["detail"]
    assert rows[("device", "faraway")]["status"] == FAIL
    key = rows[("ssh", "host key for mac")]
    assert key["status"] == FAIL and "ssh-keyscan" in key["hint"]
    assert (
        rows[("device", "mac")]["status"] == FAIL
        and "host key" in rows[("device", "mac")]["detail"]
    )
    assert ("runner", "runner for mac") not in rows  # an unreachable host gets no runner verdict


# -- a .pte against a device's runner (--pte --device) -------------------------------------------


@pytest.fixture(scope="module")
def llm_pte() -> Path:
    """A program calling ExecuTorch's LLM custom op llama::custom_sdpa."""
    from etdeploy.builder import BuildOptions, build

    model = f"{Path(__file__).resolve().parent.parent / 'data' / 'models' / 'llm_sdpa.py'}:build"
    return build(model, BuildOptions(backend="xnnpack")).pte


@pytest.mark.slow
def test_doctor_shows_the_preflight_run_makes_before_pushing(
    digits_pte: Path, llm_pte: Path
) -> None:
    from etdeploy.runner_build import ensure_runner

    ensure_runner()
    exit_code, _, rows = doctor("--no-devices", "--pte", digits_pte, "--device", "local")
    assert exit_code == 0
    runner = rows[("preflight", "local: runner")]
    assert runner["status"] == OK and "XnnpackBackend" in runner["detail"]
    assert rows[("preflight", "local: backends")]["status"] == OK
    assert rows[("preflight", "local: version")]["status"] == OK

    exit_code, _, rows = doctor("--no-devices", "--pte", llm_pte, "--device", "local")
    assert exit_code == 2
    missing = rows[("preflight", "local: operator llama::custom_sdpa.out")]
    assert missing["status"] == FAIL and "libcustom_ops_aot_lib.so" in missing["hint"]
    selective = rows[("preflight", "local: selective build")]["detail"]
    assert (
        selective.startswith("-DEXECUTORCH_SELECT_OPS_LIST=")
        and "llama::custom_sdpa.out" in selective
    )


@pytest.mark.slow
def test_doctor_says_how_to_build_the_runner_it_would_compare_against(
    digits_pte: Path, fresh_cache: Path
) -> None:
    exit_code, _, rows = doctor("--no-devices", "--pte", digits_pte, "--device", "local")
    assert exit_code == 0
    row = rows[("preflight", "local: runner")]
    assert row["status"] == WARN and "not built yet" in row["detail"]
    assert "etdeploy runner build" in row["hint"]
    assert not list((fresh_cache / "runners").glob("*/bundle.json"))  # doctor built nothing


def test_doctor_device_needs_a_pte() -> None:
    done = CliRunner().invoke(app, ["doctor", "--device", "local"], catch_exceptions=False)
    assert done.exit_code == 2 and "--pte" in done.output


@pytest.mark.slow
def test_doctor_compares_a_pte_with_a_phones_runner(
    bed: FarmTestbed, tmp_path: Path, llm_pte: Path
) -> None:
    tables = bed.device_tables(tmp_path)
    config = write_config(tmp_path / "etdeploy.toml", {"pixel-a": tables["pixel-a"]})
    exit_code, doc, rows = doctor(
        "--no-devices", "--config", config, "--pte", llm_pte, "--device", "pixel-a",
        "--adb-host", "127.0.0.1", "--adb-port", str(bed.adb.server.port),
    )  # fmt: skip
    assert exit_code == 2, doc
    assert rows[("preflight", "pixel-a: operator llama::custom_sdpa.out")]["status"] == FAIL
    assert rows[("preflight", "pixel-a: backends")]["status"] == OK


def test_a_devices_table_hint_is_valid_toml_for_a_serial_too() -> None:
    import tomllib

    from etdeploy.doctor import devices_table

    assert devices_table("pixel8") == "[devices.pixel8]"
    header = devices_table("127.0.0.1:41281")
    assert header == '[devices."127.0.0.1:41281"]'
    parsed = tomllib.loads(f'{header}\nrunner = "bundle"\n')
    assert parsed == {"devices": {"127.0.0.1:41281": {"runner": "bundle"}}}

"""`etdeploy run` as a CI log holds it: every number whole, the result on stdout
with --json -, a FAIL that says what would pass, a profile that reads, and a
device that does not answer told apart from a typo."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from etdeploy.report.console import passing_setting
from etdeploy.results.result import BudgetStage, Thresholds, Verdict
from tests.cli.conftest import assert_one_line_error, etdeploy
from tests.support.adb_server import AdbTestbed, adb_testbed
from tests.support.device_config import write_config
from tests.support.processes import processes_naming

pytestmark = pytest.mark.slow

QUICK = ("--device", "local", "-n", "3", "--warmup", "1")


def test_a_piped_run_keeps_every_number_and_name_whole(tmp_path: Path) -> None:
    done = etdeploy("run", "digits", *QUICK, "--json", tmp_path / "r.json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    result = json.loads((tmp_path / "r.json").read_text())
    worst = result["verdict"]["worst"]
    row = next(line for line in done.stdout.splitlines() if line.startswith("│ logits "))
    # The table row holds the worst sample's name and numbers exactly as written.
    for cell in (worst["sample"], f"{worst['max_abs']:.2e}", f"{worst['max_rel']:.2e}",
                 f"{worst['sqnr_db']:.1f}", f"{worst['cosine']:.6f}"):  # fmt: skip
        assert f" {cell} " in row, (cell, row)
    assert "…" not in done.stdout
    # The latency line is one line, each value with its unit.
    (latency,) = [line for line in done.stdout.splitlines() if line.startswith("latency:")]
    assert latency.endswith(")") and not re.search(r"\d\s*$", latency.split("stdev")[0])
    assert done.stdout.rstrip().splitlines()[-1].startswith("PASS ")


def test_json_dash_puts_the_result_alone_on_stdout(tmp_path: Path) -> None:
    done = etdeploy("run", "digits", *QUICK, "--json", "-", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)  # the document and nothing else
    assert result["status"] == "passed" and result["schema"] == "etdeploy.result/2"
    assert [line for line in done.errors if line.startswith("PASS ")]
    assert list(tmp_path.iterdir()) == []


def _nudged(pte: Path, out: Path, factor: float) -> Path:
    """`pte` with its classifier's weights scaled by `factor`: a lowering that is
    a little off, as a bad kernel would be."""
    from etdeploy.pte.reader import read_pte

    data = bytearray(pte.read_bytes())
    weight = max(
        (c for c in read_pte(pte).constant_tensors
         if c.dtype == "float" and len(c.sizes) == 2 and c.offset),
        key=lambda c: c.nbytes,
    )  # fmt: skip
    span = slice(weight.offset, weight.offset + weight.nbytes)
    values = np.frombuffer(bytes(data[span]), dtype=np.float32) * np.float32(factor)
    data[span] = values.astype(np.float32).tobytes()
    out.write_bytes(bytes(data))
    return out


def test_a_failed_run_names_the_tightest_tolerance_that_passes_and_it_does(
    tmp_path: Path,
) -> None:
    built = etdeploy("build", "digits", "-b", "portable", "-o", tmp_path / "d.pte", cwd=tmp_path)
    assert built.returncode == 0, built.stderr
    nudged = _nudged(tmp_path / "d.pte", tmp_path / "nudged.pte", 1.002)
    failed = etdeploy("run", "digits", "--pte", nudged, *QUICK, cwd=tmp_path)
    assert failed.returncode == 1, failed.stderr
    line = failed.stdout.rstrip().splitlines()[-1]
    found = re.search(r"the tightest tolerance that passes is --atol (\S+) --rtol 0(;|$)", line)
    assert line.startswith("FAIL ") and found, line
    passing = etdeploy("run", "digits", "--pte", nudged, *QUICK, "--atol", found.group(1),
                       "--rtol", "0", cwd=tmp_path)  # fmt: skip
    assert passing.returncode == 0, passing.stdout


def test_a_profile_reads_in_a_log(tmp_path: Path) -> None:
    done = etdeploy("run", "digits", *QUICK, "--profile", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    # ExecuTorch's Inspector warns about every kwarg it cannot map: none of it shows.
    assert "Warning" not in done.stderr and "warnings.warn" not in done.stderr
    lines = done.stdout.splitlines()
    call = next(line for line in lines if line.startswith("│ DELEGATE_CALL "))
    assert "convolution, relu, view_copy, linear" in call and "conv1, conv2, fc" in call
    kernel = next(line for line in lines if line.startswith("│ Convolution (NHWC, F32) IGEMM #"))
    assert "delegate kernel" in kernel and "(in the delegate call)" in kernel
    assert any("time per operator" in line for line in lines)
    total = next(line for line in lines if re.match(r"│ Convolution \(NHWC, F32\) IGEMM +│", line))
    assert re.search(r"│ +2 │", total)  # two convolutions, one total
    (kept,) = [line for line in lines if line.startswith("profile: ETDump kept at ")]
    assert Path(kept.removeprefix("profile: ETDump kept at ")).is_file()


@pytest.fixture(scope="module")
def one_phone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AdbTestbed]:
    with adb_testbed(tmp_path_factory.mktemp("adb"), ("p8",)) as testbed:
        yield testbed


def test_no_device_answering_is_exit_3_with_what_is_attached(
    one_phone: AdbTestbed, tmp_path: Path
) -> None:
    server = ("--adb-host", "127.0.0.1", "--adb-port", str(one_phone.server.port))
    missing = etdeploy("run", "digits", "--device", "pixel9", *server, cwd=tmp_path)
    assert_one_line_error(missing, 3, "no attached device matches 'pixel9'")
    assert one_phone.serial("p8") in missing.errors[-1]  # what is attached instead

    config = write_config(tmp_path / "etdeploy.toml", {"tablet": {"transport": "adb"}})
    absent = etdeploy("run", "digits", "--device", "tablet", "--config", config, *server,
                      cwd=tmp_path)  # fmt: skip
    assert_one_line_error(absent, 3, "no attached device matches 'tablet'")

    typo = etdeploy("run", "digits", "--device", "tablte", "--config", config, *server,
                    cwd=tmp_path)  # fmt: skip
    assert_one_line_error(typo, 3, "no attached device matches 'tablte'")
    assert typo.errors[-1].startswith("hint: did you mean --device tablet? ")


def _stage(rule: str, **numbers: object) -> BudgetStage:
    values: dict[str, object] = {"max_abs": 0.5, "sqnr_db": 30.0, "cosine": 0.999}
    values.update(numbers)
    return BudgetStage(
        stage="quantization", measured="quantized eager vs float eager", rule=rule,
        limit="-", passed=False, reason="-", **values,  # type: ignore[arg-type]
    )  # fmt: skip


LIMITS = Thresholds(atol=1e-4, rtol=1e-4, min_sqnr_db=15.0, min_top1=0.9, min_cosine=0.99,
                    max_abs=None, quant_steps=1.0, quant_rtol=0.01)  # fmt: skip


@pytest.mark.parametrize(
    ("stage", "said"),
    [
        (_stage("accuracy", sqnr_db=12.36), "passes with --min-sqnr 12.3"),
        (_stage("accuracy", sqnr_db=12.36, top1_agreement=0.875),
         "passes with --min-sqnr 12.3 --min-top1 0.87"),
        (_stage("allclose", max_abs=0.0012345), "the tightest tolerance that passes is --atol 0.00124 --rtol 0"),
        (_stage("allclose", max_abs=float("nan")), "no tolerance passes: an output is NaN or infinite"),
    ],
)  # fmt: skip
def test_the_loosest_setting_said_is_rounded_so_that_it_passes(
    stage: BudgetStage, said: str
) -> None:
    verdict = Verdict(passed=False, reason="-", budget=(stage,), thresholds=LIMITS)
    assert passing_setting(verdict) == said


@pytest.mark.parametrize(
    ("stop", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["sigint", "sigterm"]
)
def test_a_run_stopped_by_a_signal_cleans_up_writes_its_result_and_exits_128_plus_it(
    tmp_path: Path, stop: signal.Signals, code: int
) -> None:
    """SIGTERM (a CI cancelling the job) unwinds as Ctrl-C does: the runner is killed,
    the job's directory removed, the device lock released, the result written."""
    from etdeploy.devices.local import LocalDevice
    from etdeploy.devices.lock import device_lock

    workdir = tmp_path / "device"
    config = write_config(
        tmp_path / "etdeploy.toml", {"here": {"transport": "local", "workdir": str(workdir)}}
    )
    result = tmp_path / "r.json"
    with open(tmp_path / "stderr.log", "wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "etdeploy", "run", "digits", "-d", "here", "--config", str(config),
             "-n", "30000000", "--deadline", "600", "--json", str(result)],
            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=stderr,
            # SIGINT at its default, as in a terminal, even under a background `make test &`.
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not processes_naming(str(workdir), "etdeploy_runner"):
            assert time.monotonic() < deadline and process.poll() is None, "no runner started"
            time.sleep(0.1)
        process.send_signal(stop)
        exited = process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    said = (tmp_path / "stderr.log").read_text()
    assert exited == code, said
    assert (
        said.rstrip().splitlines()[-1] == f"interrupted by {stop.name}" and "Traceback" not in said
    )
    error = json.loads(result.read_text())["error"]
    assert error["kind"] == "Interruption" and stop.name in error["message"]
    assert processes_naming(str(workdir), "etdeploy_runner") == []
    assert sorted(p.name for p in workdir.iterdir() if not p.name.startswith(".")) == [
        "inputs", "programs", "runners",
    ]  # fmt: skip
    with device_lock(LocalDevice("here", workdir=workdir), timeout_s=0.5):
        pass

"""`run --profile`: the runner's ETDump, read with the build's ETRecord, names
the slowest operators and delegate calls."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from etdeploy.devices.local import LocalDevice
from etdeploy.pipeline import RunJob, run_job

pytestmark = pytest.mark.slow


def test_profile_names_the_delegate_call_its_operators_and_modules(tmp_path: Path) -> None:
    result = run_job(
        RunJob(model="digits", iterations=5, warmup=1, profile=True), LocalDevice(workdir=tmp_path)
    ).to_json()
    profile = result["profile"]
    assert profile["etrecord"] is True
    # Warm-up and timed executions are all traced.
    assert profile["executions_ms"]["count"] == 6
    (call,) = profile["delegate_calls"]
    assert call["backend"] == "XnnpackBackend"
    assert "aten.convolution.default" in call["op_types"]
    assert "conv1" in (call["module"] or "") and "fc" in (call["module"] or "")
    assert call["count"] == 6
    assert 0 < call["share"] <= 1.5
    # Time per operator kind: XNNPACK's kernels, each kind once, the call itself not
    # counted again (its kernels are its time).
    totals = {t["name"]: t for t in profile["operators"]}
    assert totals["Convolution (NHWC, F32) IGEMM"]["instances"] == 2
    assert "DELEGATE_CALL" not in totals
    assert all(t["backend"] == "XnnpackBackend" for t in totals.values())
    # XNNPACK's own kernels appear as delegated events under the call.
    assert any(e["delegated"] and "Convolution" in e["name"] for e in profile["events"])
    assert Path(result["etdump"]).is_file()


def test_without_an_etrecord_events_keep_their_runtime_names(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from etdeploy.cli import app

    built = CliRunner().invoke(app, ["build", "digits", "-o", str(tmp_path / "d.pte")])
    assert built.exit_code == 0, built.output
    # A plain build leaves the ETRecord in the cache; --etrecord puts it beside the copy.
    assert not (tmp_path / "d.etrecord").exists()
    result = run_job(
        RunJob(model="digits", pte=tmp_path / "d.pte", iterations=2, warmup=0, profile=True),
        LocalDevice(workdir=tmp_path / "device"),
    ).to_json()
    assert result["profile"]["etrecord"] is False
    assert result["profile"]["delegate_calls"][0]["op_types"] == []


def test_an_etrecord_written_beside_a_copy_names_the_operators_again(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from etdeploy.cli import app

    built = CliRunner().invoke(
        app, ["build", "digits", "--etrecord", "-o", str(tmp_path / "d.pte")]
    )
    assert built.exit_code == 0, built.output
    assert (tmp_path / "d.etrecord").is_file()
    result = run_job(
        RunJob(model="digits", pte=tmp_path / "d.pte", iterations=2, warmup=0, profile=True),
        LocalDevice(workdir=tmp_path / "device"),
    ).to_json()
    assert result["profile"]["etrecord"] is True
    assert "aten.convolution.default" in result["profile"]["delegate_calls"][0]["op_types"]


# A residual CNN's delegate call: XNNPACK took the whole network, so the call's
# ETRecord names every module in it (ResNet-18's, as torchvision names them).
RESNET_MODULES = [
    "conv1", "bn1", "relu", "maxpool", "layer1", "layer1.0", "layer1.0.conv1",
    "layer1.0.bn1", "layer1.0.conv2", "layer1.0.bn2", "layer1.1", "layer2", "layer2.0",
    "layer2.0.downsample", "layer3", "layer3.0", "layer4", "layer4.0", "layer4.1",
    "avgpool", "fc",
]  # fmt: skip


def test_an_events_many_modules_become_a_count_and_what_they_share() -> None:
    from etdeploy.profile import modules_label

    assert modules_label(None) == "-"
    assert modules_label("head, head.0") == "head, head.0"
    assert modules_label(", ".join(RESNET_MODULES)) == "21 modules: conv1 … fc"
    block = ["layer2", "layer2.0", "layer2.0.conv1", "layer2.0.bn1", "layer2.0.downsample"]
    assert modules_label(", ".join(block)) == "5 modules in layer2"


def test_the_piped_profile_table_stays_narrow_for_a_whole_network_call() -> None:
    import io

    from etdeploy.cli._app import PIPED_WIDTH
    from etdeploy.report.console import RunConsole
    from etdeploy.results.result import RunResult
    from tests.results.docs import load_sample

    doc = load_sample("passed_xnnpack")
    call = {
        "name": "DELEGATE_CALL", "delegated": False, "backend": "XnnpackBackend",
        "op_types": ["aten.convolution.default", "aten.relu.default", "aten.add.Tensor",
                     "aten.linear.default"],
        "module": ", ".join(RESNET_MODULES), "count": 6,
        "p50_ms": 4.2, "avg_ms": 4.3, "max_ms": 5.0, "share": 0.98,
    }  # fmt: skip
    doc["profile"] = {
        "executions_ms": {"count": 6, "median": 4.3}, "events": [call],
        "delegate_calls": [call], "etrecord": True, "operators": [],
    }  # fmt: skip
    out = io.StringIO()
    # As piped: a console as wide as its content (etdeploy.cli._app).
    printer = RunConsole(Console(file=out, width=PIPED_WIDTH), Console(file=io.StringIO()))
    printer._render_profile(RunResult.from_json(doc))
    lines = [line.rstrip() for line in out.getvalue().splitlines()]
    assert any("21 modules: conv1 … fc" in line for line in lines)
    assert max(len(line) for line in lines) < 160  # was 560 columns with every module named

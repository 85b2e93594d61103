"""Every command that writes a document takes `--json PATH|-` with one meaning (a file,
or the document alone on stdout with the tables on stderr), and one `run` writes the
JUnit and HTML reports a one-model CI check needs, without a farm spec."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

from tests.cli.conftest import etdeploy
from tests.support.farm_fixtures import write_spec


def test_one_run_writes_junit_and_html_beside_its_json(tmp_path: Path) -> None:
    done = etdeploy("run", "digits", "-n", "1", "--junit", "junit.xml", "--html", "run.html",
                    "--json", "-", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    case = ET.parse(tmp_path / "junit.xml").getroot().find(".//testcase")
    assert case is not None and case.find("failure") is None
    assert "digits" in (case.get("name") or "")
    # The task-accuracy block the accuracy guide promises in JUnit, as the console has it.
    said = case.findtext("system-out") or ""
    assert "task accuracy: classification of logits on 360 labelled samples" in said
    top1 = result["accuracy"]["scores"][0]
    assert f"top-1: float eager {top1['eager']:.2%}, device {top1['device']:.2%}" in said
    assert "device vs float eager: " in said and "ACCURACY " in said
    assert f"throughput: {result['throughput']['samples']} samples" in said
    page = (tmp_path / "run.html").read_text()
    assert result["job"]["id"] in page or "digits" in page
    assert "Task accuracy" in page


def test_build_json_dash_is_the_manifest_alone_on_stdout(tmp_path: Path) -> None:
    done = etdeploy("build", "digits", "-b", "portable", "--json", "-", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    (built,) = doc["builds"]
    assert doc["schema"] == "etdeploy.build/1" and built["manifest"]["backend"] == "portable"
    assert Path(tmp_path / built["pte"]).is_file() or Path(built["pte"]).is_file()
    assert "delegated" in done.stderr  # the table, on stderr


def test_inspect_json_dash_is_a_document_with_its_schema(tmp_path: Path) -> None:
    built = etdeploy("build", "digits", "-b", "portable", "-o", "d.pte", cwd=tmp_path)
    assert built.returncode == 0, built.stderr
    done = etdeploy("inspect", "d.pte", "--json", "-", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["schema"] == "etdeploy.inspect/1"
    assert doc["manifest"]["backend"] == "portable" and doc["pte"]


def test_farm_json_dash_prints_the_farm_document_not_a_file_named_dash(tmp_path: Path) -> None:
    spec = write_spec(
        tmp_path / "farm.toml",
        {"models": ["digits"], "devices": ["here"], "iterations": 1, "warmup": 0},
        {"here": {"transport": "local", "workdir": str(tmp_path / "device")}},
    )
    done = etdeploy("farm", "run", spec, "--out", "out", "--json", "-", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["schema"] == "etdeploy.farm/1"
    assert not (tmp_path / "-").exists()
    assert "1 passed" in done.stderr


def test_clean_json_takes_a_path_like_the_other_commands(tmp_path: Path) -> None:
    done = etdeploy("clean", "--dry-run", "--json", "clean.json", cwd=tmp_path,
                    ETDEPLOY_CACHE_DIR=str(tmp_path / "cache"))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "clean.json").read_text())["schema"] == "etdeploy.clean/1"

"""etdeploy.farm.merge and `etdeploy farm merge`: the shards of a farm, run
separately, become the reports one unsharded run writes; a job found twice keeps
its latest result; a job no shard reported is "not run"; and the CI template's
command lines are the ones run here."""

from __future__ import annotations

import dataclasses
import glob
import json
import shlex
import shutil
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from etdeploy.farm import FARM_DOC_NAME, RESULTS_NAME, load_farm_spec, select_shard
from etdeploy.farm.merge import merge_sources, write_merged
from etdeploy.results import farm_document, validate_farm
from etdeploy.results.result import FarmPlacement, RunResult, Shard
from tests.results.docs import RESULTS
from tests.support.farm_fixtures import (
    MODELS,
    REPO,
    FarmTestbed,
    farm,
    lines_of,
    write_spec,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - 3.10
    import tomli as tomllib

NIGHTLY = REPO / "tests" / "data" / "farm" / "nightly.toml"
WORKFLOW = REPO / "examples" / "ci" / "github-actions-nightly-farm.yml"


def quick_nightly(root: Path, bed: FarmTestbed) -> Path:
    """The example nightly spec with its matrix, excludes and explicit job as
    written, on this machine's devices (pixel8 and mac: the two loopback phones,
    local: here; the sshd would cost a minute more and adds nothing to a merge)
    and with one timed iteration, no warm-up and no cooldown. Its folder layout
    is the example's, so "../models/two_io.py:build" still reads."""
    data = tomllib.loads(NIGHTLY.read_text())
    settings = dict(data["farm"])
    jobs = [{**job, "iterations": 1, "job_timeout_s": 600} for job in settings.pop("job")]
    settings["models"] = [
        m if isinstance(m, str) else {**m, "iterations": 1} for m in settings["models"]
    ]
    settings.update(iterations=1, warmup=0, cooldown_s=0, backoff_s=0.5, job_timeout_s=600,
                    lock_timeout_s=600)  # fmt: skip
    tables = bed.device_tables(root)
    (root / "models").mkdir(parents=True, exist_ok=True)
    shutil.copy(MODELS / "two_io.py", root / "models" / "two_io.py")
    (root / "farm").mkdir(exist_ok=True)
    shutil.copytree(NIGHTLY.parent / "samples", root / "farm" / "samples", dirs_exist_ok=True)
    sizecheck = "\n".join(
        ["", "[sizecheck]", *(f'{k} = "{v}"' for k, v in data["sizecheck"].items())]
    )
    return write_spec(root / "farm" / "nightly.toml", settings,
                      {"pixel8": tables["pixel-a"], "mac": tables["pixel-b"]}, jobs=jobs,
                      extra=sizecheck + "\n")  # fmt: skip


def workflow_commands(values: dict[str, str]) -> dict[str, list[str]]:
    """The etdeploy command lines of the CI template, by subcommand, as argv after
    `etdeploy`, with its ${{ ... }} expressions and $VARIABLES given `values`."""
    import yaml

    workflow = yaml.safe_load(WORKFLOW.read_text())
    found: dict[str, list[str]] = {}
    for job in workflow["jobs"].values():
        for step in job["steps"]:
            command = step.get("run", "")
            if command.startswith("etdeploy farm "):
                for name, value in values.items():
                    command = command.replace(name, value)
                argv = shlex.split(command)
                found[argv[2]] = argv[1:]
    return found


def verdicts(doc: dict[str, Any]) -> dict[str, tuple[Any, ...]]:
    """Per job key, what a reader of the report acts on."""
    return {
        r["farm"]["key"]: (
            r["status"], r["exit_code"], (r.get("verdict") or {}).get("passed"),
            (r.get("error") or {}).get("kind"), r["device"]["name"],
        )
        for r in doc["results"]
    }  # fmt: skip


def junit_cases(path: Path) -> dict[str, str]:
    suite = ET.parse(path).getroot().find("testsuite")
    assert suite is not None
    outcome = {}
    for case in suite.iter("testcase"):
        tags = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        outcome[case.get("name", "")] = tags[0] if tags else "passed"
    return outcome


@pytest.mark.slow
def test_four_shards_of_the_nightly_spec_merge_into_the_reports_of_one_unsharded_run(
    bed: FarmTestbed, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec_path = quick_nightly(tmp_path / "repo", bed)
    spec = load_farm_spec(spec_path)
    assert len(spec.jobs) == 15 and len(spec.skipped) == 3  # the example's matrix, unchanged
    whole = farm("run", spec_path, "--out", tmp_path / "whole", "--junit", tmp_path / "whole.xml")
    # As written, on devices that answer, the example passes: portable+int8 is skipped.
    assert whole.exit_code == 0, whole.output
    assert whole.output.count("skipped digits[portable+int8] on") == 3

    # The CI template's commands, as its shard and merge jobs run them.
    monkeypatch.chdir(tmp_path)
    shard_runs = []
    for index in range(4):
        commands = workflow_commands(
            {"${{ matrix.shard }}": str(index), "$FARM_SPEC": str(spec_path)}
        )
        shard_runs.append(farm(*commands["run"][1:]))
        # upload-artifact keeps these files; download-artifact puts them in farm-out/farm-shard-N/.
        kept = tmp_path / "farm-out" / f"farm-shard-{index}"
        kept.mkdir(parents=True)
        for name in (RESULTS_NAME, FARM_DOC_NAME, "junit.xml"):
            shutil.copy(tmp_path / "farm-out" / f"shard-{index}" / name, kept / name)
    assert all(run.exit_code in (0, 1, 2, 3) for run in shard_runs), [r.output for r in shard_runs]
    sizes = [len(lines_of(tmp_path / "farm-out" / f"shard-{i}" / RESULTS_NAME)) for i in range(4)]
    assert sizes == [len(select_shard(spec.jobs, i, 4)) for i in range(4)] and sum(sizes) == 15

    argv = []
    for arg in workflow_commands({"$FARM_SPEC": str(spec_path)})["merge"][1:]:
        argv += sorted(glob.glob(arg)) if "*" in arg else [arg]  # as the shell expands it
    merged = farm(*argv)
    assert merged.exit_code == whole.exit_code == 0, merged.output
    assert (
        "not run" not in merged.output
        and "15 passed, 0 failed, 0 error(s), 3 skipped" in merged.output
    )

    whole_doc = json.loads((tmp_path / "whole" / FARM_DOC_NAME).read_text())
    merged_doc = json.loads((tmp_path / "farm-merged" / FARM_DOC_NAME).read_text())
    validate_farm(merged_doc)
    assert verdicts(merged_doc) == verdicts(whole_doc)  # same jobs, same verdicts
    assert merged_doc["summary"] == whole_doc["summary"]
    assert merged_doc["matrix"] == whole_doc["matrix"]  # with --spec: the spec's order
    assert merged_doc["skipped"] == whole_doc["skipped"] and len(whole_doc["skipped"]) == 3
    assert merged_doc["not_run"] == merged_doc["merge"]["not_run"] == []
    assert merged_doc["merge"]["duplicates"] == []
    assert sorted(s["shard"]["index"] for s in merged_doc["merge"]["sources"]) == [0, 1, 2, 3]
    assert junit_cases(tmp_path / "farm-merged" / "junit.xml") == junit_cases(
        tmp_path / "whole.xml"
    )
    # The merged folder is a farm's folder: it merges again, and serves as a baseline.
    assert len(lines_of(tmp_path / "farm-merged" / RESULTS_NAME)) == 15
    html = (tmp_path / "farm-merged" / "report.html").read_text()
    assert html.count('data-status="passed"') == sum(
        1 for r in whole_doc["results"] if r["status"] == "passed"
    )


# -- without running a farm: results as a farm's log and farm.json hold them ---------------


def placed(status: str, key: str, shard: tuple[int, int], started_at: str) -> RunResult:
    """A real result (tests/data/results: a passed run, a runner timeout) as the
    farm recorded it for `key` in `shard`."""
    name = {"passed": "passed_xnnpack", "error": "error_runner_timeout"}[status]
    result = RunResult.from_json(json.loads((RESULTS / f"{name}.json").read_text()))
    model, _backend, _quant, device = key.split("|")
    return dataclasses.replace(
        result,
        job=dataclasses.replace(result.job, model=model),
        device=dataclasses.replace(result.device, name=device),
        farm=FarmPlacement(key, Shard(*shard), "n.toml"),
        started_at=started_at,
    )


def planned(key: str) -> dict[str, str | None]:
    model, backend, quant, device = key.split("|")
    return {"model": model, "backend": backend, "quantization": None if quant == "none" else quant,
            "device": device}  # fmt: skip


def shard_dir(root: Path, index: int, count: int, planned_keys: list[str], results: list[RunResult],
              *, finished: bool = True) -> Path:  # fmt: skip
    """OUT of one shard: its log, and its farm.json when it finished."""
    out = root / f"shard-{index}"
    out.mkdir(parents=True)
    (out / RESULTS_NAME).write_text("".join(json.dumps(r.to_json()) + "\n" for r in results))
    if finished:
        matrix = [planned(k) for k in planned_keys]
        doc = farm_document(results, started_at="2026-12-03T01:00:00Z",
                            finished_at="2026-12-03T02:00:00Z", matrix=matrix)  # fmt: skip
        doc["shard"] = {"index": index, "count": count}
        (out / FARM_DOC_NAME).write_text(json.dumps(doc))
    return out


def test_a_job_in_two_shards_keeps_the_result_that_started_last(tmp_path: Path) -> None:
    a, b = "digits|xnnpack|none|local", "digits|xnnpack|none|pixel8"
    early = placed("error", a, (0, 2), "2026-12-03T01:00:00Z")
    late = placed("passed", a, (0, 2), "2026-12-03T01:30:00Z")
    first = shard_dir(tmp_path, 0, 2, [a], [early])
    # Shard 0 run again on another host, later; then shard 1.
    again = shard_dir(tmp_path / "rerun", 0, 2, [a], [late])
    second = shard_dir(tmp_path, 1, 2, [b], [placed("passed", b, (1, 2), "2026-12-03T01:10:00Z")])
    # Given newest first: the start time decides, not the order of the arguments.
    outcome = merge_sources([again, first, second])
    assert [r.status for r in outcome.results] == ["passed", "passed"]
    (duplicate,) = outcome.duplicates
    assert (
        duplicate.key == a and duplicate.kept == str(again) and duplicate.dropped == (str(first),)
    )
    assert outcome.exit_code == 0 and not outcome.not_run
    assert any("given more than once" in w for w in outcome.warnings)


def test_a_lost_shard_is_listed_as_not_run_and_fails_the_merge(tmp_path: Path) -> None:
    spec_path = write_spec(tmp_path / "n.toml", {"models": ["digits"],
                                                  "devices": [f"phone{i}" for i in range(8)]})  # fmt: skip
    spec = load_farm_spec(spec_path)
    shards = [select_shard(spec.jobs, i, 2) for i in range(2)]
    assert len(shards[0]) >= 1 and len(shards[1]) >= 3
    done = shard_dir(tmp_path, 0, 2, [j.key for j in shards[0]],
                     [placed("passed", j.key, (0, 2), "2026-12-03T01:00:00Z") for j in shards[0]])  # fmt: skip
    # Shard 1 was killed after its first job: a log line, no farm.json.
    killed = shard_dir(tmp_path, 1, 2, [], [placed("passed", shards[1][0].key, (1, 2),
                                                   "2026-12-03T01:05:00Z")], finished=False)  # fmt: skip

    without_spec = merge_sources([done, killed])
    # Without the spec the killed shard's plan is unknown, and the merge says so.
    assert not without_spec.not_run and len(without_spec.results) == len(shards[0]) + 1
    assert any("has no farm.json" in w for w in without_spec.warnings)

    out = tmp_path / "merged"
    result = farm("merge", done, killed, "--spec", spec_path, "--out", out,
                  "--junit", tmp_path / "j.xml", "--html", tmp_path / "r.html")  # fmt: skip
    assert result.exit_code == 3, result.output  # nothing failed, but jobs are missing
    lost = [j.key for j in shards[1][1:]]
    assert f"{len(lost)} not run" in result.output
    doc = json.loads((out / FARM_DOC_NAME).read_text())
    validate_farm(doc)
    assert [
        f"{p['model']}|{p['backend']}|none|{p['device']}" for p in doc["merge"]["not_run"]
    ] == lost
    assert doc["finished_at"] is None  # a shard never finished
    root = ET.parse(tmp_path / "j.xml").getroot()
    suite = root.find("testsuite")
    assert suite is not None and suite.get("tests") == str(len(spec.jobs))
    assert suite.get("skipped") == root.get("skipped") == str(len(lost))
    skipped = [c for c in suite.iter("testcase") if c.find("skipped") is not None]
    assert [c.get("name") for c in skipped] == [
        f"digits[xnnpack] on {k.split('|')[3]}" for k in lost
    ]
    why = "not run: no result: shard 1 of 2 did not report it"
    assert {c.find("skipped").get("message") for c in skipped} == {why}  # type: ignore[union-attr]
    # The suite's own output elements still close it (the strict Ant schema's order).
    assert [child.tag for child in suite][-2:] == ["system-out", "system-err"]
    # The HTML report lists them too: a cell each, and the reason in its table.
    html = (tmp_path / "r.html").read_text()
    assert html.count('data-status="not-run"') == len(lost)
    assert html.count("<td>no result: shard 1 of 2 did not report it</td>") == len(lost)
    assert f"{len(lost)} not run</span>" in html


def test_bad_sources_are_usage_errors(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    result = farm("merge", empty, "--out", tmp_path / "m")
    assert result.exit_code == 2 and "no farm results" in result.output
    result = farm("merge", tmp_path / "nowhere", "--out", tmp_path / "m")
    assert result.exit_code == 2 and "no such results folder" in result.output
    a = "digits|xnnpack|none|local"
    source = shard_dir(tmp_path, 0, 1, [a], [placed("passed", a, (0, 1), "2026-12-03T01:00:00Z")])
    with pytest.raises(Exception, match="one of the sources"):
        write_merged(merge_sources([source]), source)

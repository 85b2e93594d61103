"""etdeploy.settings: each run setting is declared once, and the command line,
etdeploy.toml, a farm spec and the job all take it from that declaration."""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from etdeploy import settings
from etdeploy.cli import app
from etdeploy.config import config_settings, load_config, parse_config
from etdeploy.errors import UsageError
from etdeploy.farm.spec import JOB_SETTING_TYPES, parse_farm_spec
from etdeploy.pipeline.job import RunJob


def _sample(entry: settings.Declared, folder: Path) -> tuple[Any, Any]:
    """A TOML value the setting accepts, and the value the job then holds (a path is
    the file's own: relative to its folder)."""
    kind = entry.value_type
    if entry.name == "output_kinds":
        return {"logits": "classifier"}, ("logits=classifier",)
    if entry.name == "localize_budget_bytes":
        return "2MB", 2_000_000
    if entry.name == "shapes":
        return ["min,max"], ("min,max",)
    if entry.is_list:
        return ["x:0=1..4"], (str(folder / "x:0=1..4") if entry.option.path else "x:0=1..4",)
    if kind is bool:
        return True, True
    if kind is int:
        return 7, 7
    if kind is float:
        return 0.5, 0.5
    if kind is Path:
        return "runner", folder / "runner"
    assert kind is str, entry
    return "portable", "portable"


CONFIGURABLE = [d for d in settings.declared(RunJob) if d.option.section]


@pytest.mark.parametrize("entry", CONFIGURABLE, ids=lambda d: d.name)
def test_every_configurable_setting_is_read_from_its_table_and_reaches_the_job(
    entry: settings.Declared, tmp_path: Path
) -> None:
    given, held = _sample(entry, tmp_path)
    config = parse_config({entry.option.section: {entry.key: given}}, tmp_path / "etdeploy.toml")
    job = RunJob(model="digits", **config_settings(config))
    assert getattr(job, entry.name) == held


@pytest.mark.parametrize("entry", CONFIGURABLE, ids=lambda d: d.name)
def test_a_value_of_the_wrong_type_names_its_key(entry: settings.Declared) -> None:
    accepted = entry.toml_type if isinstance(entry.toml_type, tuple) else (entry.toml_type,)
    wrong = [1.5] if str in accepted else "a string"
    with pytest.raises(UsageError) as info:
        parse_config({entry.option.section: {entry.key: wrong}})
    assert f"{entry.option.section}.{entry.key}: expected" in info.value.message
    assert info.value.hint


def test_every_flag_of_run_is_a_declared_setting_or_one_of_runs_own() -> None:
    """The options of `etdeploy run` are the declarations', not a second list."""
    command = typer_command("run")
    flags = {opt for param in command.params for opt in param.opts if opt.startswith("--")}
    declared = {d.flag for d in settings.declared(RunJob) if d.flag}
    own = {"--adb-host", "--adb-port", "--json", "--junit", "--html", "--config", "--verbose",
           "--quiet"}  # fmt: skip
    assert declared <= flags
    assert flags - declared == own


def typer_command(name: str) -> Any:
    import typer

    group = typer.main.get_command(app)
    return group.commands[name]  # type: ignore[attr-defined]


def test_a_farm_job_takes_exactly_the_settings_declared_for_farms() -> None:
    farm = {key for key, entry in settings.farm_settings().items()}
    assert set(JOB_SETTING_TYPES) == farm | {"job_timeout_s", "retries"}
    # Matrix axes are the farm's own keys, never a per-job setting.
    assert not {"device", "backend", "quantize"} & farm


def test_flags_lie_over_the_file_which_lies_over_the_defaults(tmp_path: Path) -> None:
    path = tmp_path / "etdeploy.toml"
    path.write_text(
        '[run]\niterations = 20\nwarmup = 1\ninputs = ["samples/"]\n'
        '[verify]\noutput_kinds = {logits = "classifier"}\n'
    )
    job = RunJob.resolve(
        "digits", load_config(path), {"iterations": 5, "output_kinds": ["probs=regression"]}
    )
    assert (job.iterations, job.warmup, job.deadline_s) == (5, 1, 120.0)
    # Paths in a file are the file's; a flag names some outputs and the file the others.
    assert job.inputs == (str(tmp_path / "samples/"),)
    assert job.declared_kinds() == {"logits": "classifier", "probs": "regression"}


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"iterations": 0}, "--iterations / -n must be at least 1, got 0"),
        ({"warmup": -1}, "--warmup must be 0 or more, got -1"),
        ({"deadline_s": 0.0}, "--deadline must be positive, got 0"),
        ({"min_top1": 1.5}, "--min-top1 must be between 0 and 1, got 1.5"),
        ({"localize_budget_bytes": "lots"}, "--localize-budget: cannot read 'lots' as a size"),
        ({"output_kinds": ["logits"]}, "cannot read --output-kind 'logits'"),
    ],
)
def test_a_flag_out_of_range_is_named_with_a_hint(flags: dict[str, Any], message: str) -> None:
    from etdeploy.config import Config

    with pytest.raises(UsageError) as info:
        RunJob.resolve("digits", Config(), flags)
    assert message in info.value.message
    assert info.value.hint


def test_a_file_value_out_of_range_names_its_key(tmp_path: Path) -> None:
    path = tmp_path / "etdeploy.toml"
    path.write_text("[run]\nwarmup = -2\n")
    with pytest.raises(UsageError, match=r"etdeploy\.toml: run\.warmup must be 0 or more"):
        load_config(path)


def test_a_farm_value_out_of_range_names_where_it_is_written(tmp_path: Path) -> None:
    spec = {"farm": {"models": [{"model": "digits", "iterations": 0}], "devices": ["local"]}}
    with pytest.raises(UsageError, match=r"farm\.toml: farm\.models\[0\]\.iterations must be"):
        parse_farm_spec(spec, tmp_path / "farm.toml")


def test_zero_iterations_on_the_command_line_is_one_error_line_and_exit_2() -> None:
    done = CliRunner().invoke(app, ["run", "digits", "-n", "0"])
    assert done.exit_code == 2
    assert "--iterations / -n must be at least 1, got 0" in done.output
    assert "Traceback" not in done.output


def test_the_declarations_types_are_ones_the_command_line_and_toml_can_carry() -> None:
    for entry in settings.declared(RunJob):
        kind = entry.value_type
        assert kind in (bool, int, float, str, Path) or typing.get_args(kind) == (str, ...), entry

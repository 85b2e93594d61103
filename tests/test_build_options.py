"""etdeploy.build_options: each build option and each default is declared once, and the
release spec, the farm spec, the command line and etdeploy.toml all take them from
that declaration (these tests enumerate what each of them accepts and compare)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from etdeploy import numerics, settings
from etdeploy.build_options import BuildOptions, CacheChoice, ProgramOptions
from etdeploy.builder.tap_plan import TapPlan
from etdeploy.declaration import Declared, declared, shown_value
from etdeploy.errors import UsageError
from etdeploy.farm import spec as farm_spec
from etdeploy.pipeline.job import RunJob
from etdeploy.pipeline.llm import verify_tokens
from etdeploy.release.spec import VARIANT_KEYS, Variant, load_spec

PROGRAM_OPTIONS = {entry.name: entry for entry in declared(ProgramOptions)}
BUILD_OPTIONS = {entry.name: entry for entry in declared(BuildOptions)}


def option_of(cls: type, name: str) -> object:
    return next(f for f in dataclasses.fields(cls) if f.name == name).metadata["option"]


@pytest.mark.parametrize("cls", [settings.RunSettings, RunJob, BuildOptions, Variant])
def test_every_class_that_takes_a_build_option_holds_its_one_declaration(cls: type) -> None:
    """A field declared again in a subclass would carry an Option of its own."""
    for name in PROGRAM_OPTIONS:
        assert option_of(cls, name) is option_of(ProgramOptions, name), (cls, name)
    if issubclass(cls, CacheChoice):
        assert option_of(cls, "use_cache") is option_of(CacheChoice, "use_cache")


def test_the_release_spec_takes_every_build_option_but_the_cache() -> None:
    assert set(VARIANT_KEYS) == set(BUILD_OPTIONS) - {"use_cache"}
    assert set(VARIANT_KEYS) == {d.key for d in BUILD_OPTIONS.values() if d.option.release}


def test_etdeploy_toml_build_table_is_the_program_options() -> None:
    assert set(settings.by_key("build")) == {d.key for d in PROGRAM_OPTIONS.values()}


def test_the_farm_takes_each_program_option_as_a_job_setting_or_an_axis_of_its_matrix() -> None:
    axes = {d.option.farm_axis: d for d in PROGRAM_OPTIONS.values() if d.option.farm_axis}
    assert set(axes) == {"backends", "quantize"}
    for name, entry in PROGRAM_OPTIONS.items():
        if entry.option.farm_axis:
            assert farm_spec.FARM_KEYS[entry.option.farm_axis] is list, name
            assert farm_spec._ENTRY_KEYS[entry.key] is str, name
        else:
            assert entry.option.farm, name
            assert farm_spec.JOB_SETTING_TYPES[entry.key] == entry.toml_type, name
    # No build option enters the farm by a key of its own: what the farm's tables take
    # under a build option's name is what its declaration says.
    build_keys = {d.key for d in BUILD_OPTIONS.values()}
    in_farm = (set(farm_spec.FARM_KEYS) | set(farm_spec._ENTRY_KEYS)) & build_keys
    assert in_farm == {d.key for d in PROGRAM_OPTIONS.values()}


def test_build_takes_its_options_from_the_declarations() -> None:
    """`etdeploy build`'s flags: the build options' (help and all), and its own outputs."""
    from etdeploy.cli.build import BUILD_SETTINGS
    from tests.test_settings import typer_command

    command = typer_command("build")
    by_flag = {param.opts[0]: param for param in command.params if param.opts[0].startswith("--")}
    options = {d.flag: d for d in (*declared(RunJob), *BUILD_OPTIONS.values()) if d.flag}
    derived = {options[flag].flag for flag in options if options[flag].name in BUILD_SETTINGS}
    own = {"--output", "--force", "--etrecord", "--config", "--json", "--verbose", "--quiet"}
    assert derived <= set(by_flag)
    assert set(by_flag) - derived == own
    for flag in derived:
        help_text = by_flag[flag].help or ""
        assert help_text.startswith(options[flag].help.rstrip(".")), flag


def test_a_help_text_never_restates_a_default() -> None:
    """The value is the declaration's (the field's default or its fallback) and the help
    shows it from there; a hand-written "(default 0.9)" would go stale."""
    for entry in (*declared(RunJob), *BUILD_OPTIONS.values()):
        assert not re.search(r"default[^:]?\s*[\d.]", entry.option.help), entry.name
        assert not re.search(r"\(default\b[^:]", entry.option.help), entry.name
        if entry.shown_default is not None:
            assert entry.help.endswith(f"(default {entry.shown_default})."), entry.name


def fallback(name: str) -> object:
    entry: Declared = next(d for d in declared(RunJob) if d.name == name)
    return entry.option.fallback


def test_each_default_a_run_falls_back_to_is_the_declared_one() -> None:
    thresholds = numerics.DEFAULT_THRESHOLDS
    assert thresholds.atol == fallback("atol") and thresholds.rtol == fallback("rtol")
    assert thresholds.min_sqnr_db == fallback("min_sqnr_db")
    assert thresholds.min_top1 == fallback("min_top1")
    assert thresholds.min_cosine == fallback("min_cosine")
    assert thresholds.quant_steps == fallback("quant_steps")
    assert TapPlan().budget_bytes == fallback("localize_budget_bytes")
    assert fallback("min_token_agreement") == verify_tokens.DEFAULT_MIN_TOKEN_AGREEMENT
    assert fallback("max_kld") == verify_tokens.DEFAULT_MAX_KLD
    assert fallback("max_ppl_increase") == verify_tokens.DEFAULT_MAX_PPL_INCREASE
    # ... and the modules that apply them hold the declared objects, not numbers of
    # their own (a second literal would be another float object).
    for module, name in ((numerics, "FP32_ATOL"), (numerics, "INT8_MIN_TOP1"), (numerics, "MIN_COSINE"),
                         (verify_tokens, "DEFAULT_MAX_KLD")):  # fmt: skip
        assert getattr(module, name) is getattr(settings, name), name


def test_the_help_shows_the_declared_defaults() -> None:
    from tests.test_settings import typer_command

    helps = {param.opts[0]: param.help or "" for param in typer_command("run").params}
    assert "(default 1e-4)" in helps["--atol"]
    assert "(default 0.9)" in helps["--min-top1"]
    assert "(default 64MiB)" in helps["--localize-budget"]
    assert "(default 0.95)" in helps["--min-token-agreement"]
    assert "(default 128)" in helps["--max-seq-len"]
    assert shown_value(1e-4) == "1e-4" and shown_value(64 << 20, size=True) == "64MiB"


RELEASE = """
[release]
name = "tiny"
model = "lm"
fallback = "q4"
[release.variants.q4]
{body}
"""


def test_a_release_variant_takes_the_language_model_options(tmp_path: Path) -> None:
    path = tmp_path / "release.toml"
    path.write_text(
        RELEASE.format(body="max_seq_len = 256\ngroup_size = 64\nquantize_embeddings = true")
    )
    variant = load_spec(path).variant("q4")
    assert (variant.max_seq_len, variant.group_size, variant.quantize_embeddings) == (256, 64, True)
    assert variant.backend == BuildOptions().backend


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ("max_seq_len = 1", "release.variants.q4.max_seq_len must be 2 or more, got 1"),
        ('group_size = "64"', "release.variants.q4.group_size: expected an integer"),
        (
            'random_calibration = "yes"',
            "release.variants.q4.random_calibration: expected true or false",
        ),
        ("use_cache = false", "release.variants.q4.use_cache: unknown key"),
    ],
)
def test_a_bad_build_option_in_a_release_names_its_key(
    tmp_path: Path, body: str, named: str
) -> None:
    path = tmp_path / "release.toml"
    path.write_text(RELEASE.format(body=body))
    with pytest.raises(UsageError) as caught:
        load_spec(path)
    assert named in caught.value.message and caught.value.hint

"""Every setting of a run, declared once.

`RunSettings` is the typed settings object of one run: each field carries its default,
its help text, its flag, its etdeploy.toml key and whether a farm spec may set it
(`Option`, in the field's metadata: etdeploy.declaration). The options a program is
built with are etdeploy.build_options.ProgramOptions', which RunSettings derives from.
A default a run falls back to when a setting is left unset (a tolerance, a gate, the
localize budget) is declared here beside its setting, and read from here by the code
that applies it. Everything else is derived from these declarations and never listed
again:

- `etdeploy run`'s options (etdeploy.cli._settings builds them from the fields), and
  the help's defaults (etdeploy.declaration.Declared.help);
- etdeploy.toml's [run], [build] and [verify] keys and their types (etdeploy.config);
- a farm spec's job settings (etdeploy.farm.spec), a release spec's variants
  (etdeploy.release.spec);
- the job itself: etdeploy.pipeline.job.RunJob is RunSettings plus what one invocation
  names (the model, a --pte, a --reference).

Values arrive in three layers, each over the one before: the defaults here, the
config file (`from_tables`), the flags (`from_flags`). A value is checked once, in
`RunSettings.__post_init__`, whichever layer gave it, and an error names the flag.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from etdeploy.build_options import ProgramOptions
from etdeploy.declaration import (
    ACCURACY_PANEL,
    BUILD,
    DEVICE_PANEL,
    INPUTS_PANEL,
    JOB,
    LM_PANEL,
    LOCALIZE_PANEL,
    MACHINE,
    MODEL_PANEL,
    TIMING_PANEL,
    VERIFY_PANEL,
    Declared,
    Option,
    TomlType,
    expect_type,
    setting,
    size_value,
    strings_value,
)
from etdeploy.declaration import declared as declared_in
from etdeploy.errors import UsageError
from etdeploy.results.result_verdict import OUTPUT_KINDS

# Re-exported: where a setting's declaration is read, it is read from here.
__all__ = [
    "ACCURACY_PANEL",
    "BUILD",
    "DEFAULT_MAX_KLD",
    "DEFAULT_MAX_PPL_INCREASE",
    "DEFAULT_MIN_TOKEN_AGREEMENT",
    "DEVICE_PANEL",
    "FP32_ATOL",
    "FP32_RTOL",
    "INPUTS_PANEL",
    "INT8_MIN_SQNR_DB",
    "INT8_MIN_TOP1",
    "JOB",
    "LM_PANEL",
    "LOCALIZE_BUDGET_BYTES",
    "LOCALIZE_PANEL",
    "MACHINE",
    "MIN_COSINE",
    "MODEL_PANEL",
    "QUANT_STEPS",
    "SECTIONS",
    "TIMING_PANEL",
    "VERIFY_PANEL",
    "Declared",
    "Option",
    "RunSettings",
    "TomlType",
    "by_key",
    "declared",
    "defaults",
    "expect_type",
    "farm_settings",
    "from_farm_table",
    "from_flags",
    "from_tables",
    "layered",
    "setting",
]  # fmt: skip

# The etdeploy.toml tables run settings live in.
SECTIONS = ("build", "run", "verify")

# What verification falls back to when a tolerance is left unset (etdeploy.numerics
# applies them): fp32 arithmetic reassociated by a backend stays within 1e-4; what
# quantization may cost against the float model is a budget the user sets.
FP32_ATOL = 1e-4
FP32_RTOL = 1e-4
INT8_MIN_SQNR_DB = 15.0
INT8_MIN_TOP1 = 0.9
MIN_COSINE = 0.99
# A quantized output may land one grid point away from the reference's.
QUANT_STEPS = 1.0
# The language-model gates' defaults (etdeploy.pipeline.llm.verify_tokens applies
# them). The device is held to the quantized eager program, which computes what the
# backend computes: a correct 8da4w build of the test model agrees on every
# teacher-forced token with a mean KLD near 2e-4 (docs/guides/language-models.md); a
# wrong weight or a wrong model departs by orders of magnitude more.
DEFAULT_MIN_TOKEN_AGREEMENT = 0.95
DEFAULT_MAX_KLD = 0.01
# Device perplexity over float eager's: what quantization may cost, relative.
DEFAULT_MAX_PPL_INCREASE = 0.25
# run --localize (etdeploy.builder.tap_plan): tapped values stay alive in the planned
# arena until the method returns, and each is pulled back over the device's transport.
# 64 MiB is our choice for a phone: extra arena a mid-range phone has to spare, and
# seconds over USB.
LOCALIZE_BUDGET_BYTES = 64 << 20


def _drop(value: object, where: str) -> float:
    from etdeploy.accuracy import parse_drop

    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise UsageError(f"{where}: expected a drop such as 0.5pp, got {value!r}", f"fix {where}")
    return parse_drop(value, where)


def _output_kinds(value: object, where: str) -> tuple[str, ...]:
    """[verify] output_kinds = {logits = "classifier"}, or ["logits=classifier"] as the
    flag and farm jobs write them."""
    if isinstance(value, Mapping):
        items = []
        for name, kind in value.items():
            if not isinstance(kind, str):
                raise UsageError(f"{where}.{name}: expected str, got {kind!r}", f"fix {where}")
            items.append(f"{name}={kind}")
        return tuple(items)
    return strings_value(value, where)


@dataclass(frozen=True, kw_only=True)
class RunSettings(ProgramOptions):
    """The knobs of one run: the options its program is built with (ProgramOptions) and
    the rest. Field order is the order of `etdeploy run --help` within each panel."""

    device: str = setting(
        "local", "local, a devices.NAME table of etdeploy.toml, a serial, or a model name (pixel8).",
        flags=("--device", "-d"), metavar="NAME", panel=DEVICE_PANEL, section="run", scope=MACHINE,
    )  # fmt: skip
    inputs: tuple[str, ...] = setting(
        (), "Real samples: .npy .npz .pt .bin .png .jpg files, dirs or globs.",
        flags=("--inputs", "-i"), metavar="PATH", panel=INPUTS_PANEL, section="run", farm=True,
        path=True, scope=BUILD,
    )  # fmt: skip
    preprocess: str | None = setting(
        None, "For images: resize=HxW, scale=1/255, mean=a/b/c, std=a/b/c, layout=nchw|nhwc (comma-separated).",
        flags=("--preprocess",), metavar="SPEC", panel=INPUTS_PANEL, section="run", farm=True,
        scope=BUILD,
    )  # fmt: skip
    # A second reference: executorch's Python runtime on this machine tells a lowering
    # that changed the numerics from a device that differs from the host.
    host_check: bool = setting(
        False, "Also run the .pte in executorch's Python runtime here.",
        flags=("--host-check",), panel=INPUTS_PANEL, section="run", farm=True, scope=BUILD,
    )  # fmt: skip
    iterations: int = setting(
        10, "Timed executions.",
        flags=("--iterations", "-n"), metavar="N", panel=TIMING_PANEL, section="run", farm=True,
        low=1, example="10",
    )  # fmt: skip
    warmup: int = setting(
        3, "Untimed executions first.",
        flags=("--warmup",), metavar="N", panel=TIMING_PANEL, section="run", farm=True,
        low=0, example="3",
    )  # fmt: skip
    deadline_s: float = setting(
        120.0, "Seconds before the runner is killed; a call that also runs other samples gets more in proportion to its executions.",
        flags=("--deadline",), metavar="SECONDS", panel=TIMING_PANEL, section="run", farm=True,
        above=0, example="120",
    )  # fmt: skip
    idle_timeout_s: float | None = setting(
        None, "Seconds of runner silence that count as hung.",
        flags=("--idle-timeout",), metavar="SECONDS", panel=TIMING_PANEL, section="run", farm=True,
        above=0, example="30",
    )  # fmt: skip
    profile: bool = setting(
        False, "Record an ETDump and show the slowest operators, the time per operator and where the ETDump is kept.",
        flags=("--profile",), panel=TIMING_PANEL, farm=True, negatable=False,
    )  # fmt: skip
    atol: float | None = setting(
        None, "float32 absolute tolerance.",
        fallback=FP32_ATOL, flags=("--atol",), metavar="X", panel=VERIFY_PANEL, section="run", farm=True,
        low=0, example="1e-4",
    )  # fmt: skip
    rtol: float | None = setting(
        None, "float32 relative tolerance.",
        fallback=FP32_RTOL, flags=("--rtol",), metavar="X", panel=VERIFY_PANEL, section="run", farm=True,
        low=0, example="1e-4",
    )  # fmt: skip
    output_kinds: tuple[str, ...] = setting(
        (), "How an output is judged: KIND is classifier, regression, embedding, mask or other.",
        flags=("--output-kind",), metavar="NAME=KIND", panel=VERIFY_PANEL, section="verify",
        farm=True, parse=_output_kinds, toml=(dict, list),
    )  # fmt: skip
    min_sqnr_db: float | None = setting(
        None, "Quantization's accuracy budget: SQNR in dB vs the float model.",
        fallback=INT8_MIN_SQNR_DB, flags=("--min-sqnr",), metavar="DB", panel=VERIFY_PANEL, section="verify", farm=True,
    )  # fmt: skip
    min_top1: float | None = setting(
        None, "... top-1 agreement of declared classifiers, 0-1.",
        fallback=INT8_MIN_TOP1, flags=("--min-top1",), metavar="X", panel=VERIFY_PANEL, section="verify", farm=True,
        low=0, high=1, example="0.9",
    )  # fmt: skip
    min_cosine: float | None = setting(
        None, "... cosine of declared embeddings.",
        fallback=MIN_COSINE, flags=("--min-cosine",), metavar="X", panel=VERIFY_PANEL, section="verify", farm=True,
        low=0, high=1, example="0.99",
    )  # fmt: skip
    max_abs_error: float | None = setting(
        None, "... largest abs error vs the float model (default: no limit).",
        flags=("--max-abs-error",), metavar="X", panel=VERIFY_PANEL, section="verify", farm=True,
        low=0, example="0.05",
    )  # fmt: skip
    quant_steps: float | None = setting(
        None, "A quantized program on the device: error allowed in quantization steps.",
        fallback=QUANT_STEPS, flags=("--quant-steps",), metavar="N", panel=VERIFY_PANEL, section="verify", farm=True,
        low=0, example="1",
    )  # fmt: skip
    # Memory (etdeploy.memory): the peak a run may reach, over a device's own
    # [devices.NAME] max_memory, which is over [run]'s (RunJob.resolve).
    max_memory_bytes: int | None = setting(
        None, "Fail the run (exit 1) when its peak memory, in any phase, passes SIZE, e.g. 300MB (default: the device's max_memory in etdeploy.toml, else [run] max_memory).",
        flags=("--max-memory",), metavar="SIZE", panel=VERIFY_PANEL, section="run",
        key="max_memory", farm=True, parse=size_value, toml=(str, int), above=0, example="300MB",
    )  # fmt: skip
    # (A bundle's job keeps its limit; a device's own [devices.NAME] max_memory still
    # lies between a flag and it: RunJob.resolve.)
    shapes: tuple[str, ...] = setting(
        (), "Also run a dynamic program at these points of its range, each judged and measured: min, mid, max, a size (8), or INPUT:DIM=SIZE; comma-separated, e.g. min,mid,max.",
        flags=("--shapes",), metavar="POINTS", panel=VERIFY_PANEL, section="run", farm=True,
        scope=BUILD,  # each point's eager reference needs the model
    )  # fmt: skip
    # Task accuracy (etdeploy.accuracy): labels with the samples score eager and device.
    labels: Path | None = setting(
        None, "Labels of the samples: a CSV of sample,label rows or a .npy in sample order (a labelled .npz or a folder a class carries its own).",
        flags=("--labels",), metavar="FILE", panel=ACCURACY_PANEL, section="run", farm=True,
        path=True, scope=BUILD,  # a bundle carries its samples' labels
    )  # fmt: skip
    task: str | None = setting(
        None, "What the labels score: classification (top-1), classification:5 (and top-5), regression; @OUTPUT names the output (default: the model's task, else classification of the first output).",
        flags=("--task",), metavar="KIND", panel=ACCURACY_PANEL, section="verify", farm=True,
    )  # fmt: skip
    min_accuracy: float | None = setting(
        None, "Fail when the device's top-1 on the labelled samples is below this fraction.",
        flags=("--min-accuracy",), metavar="X", panel=ACCURACY_PANEL, section="verify",
        farm=True, low=0, high=1, example="0.95",
    )  # fmt: skip
    max_accuracy_drop: float | None = setting(
        None, "Fail when the device's top-1 is below eager's by more than this, significantly (the drop's 95% interval lies beyond it), e.g. 0.5pp.",
        flags=("--max-accuracy-drop",), metavar="PP", panel=ACCURACY_PANEL, section="verify",
        farm=True, parse=_drop, toml=(str, int, float), low=0, high=1, example="0.5pp",
    )  # fmt: skip
    # Language models (etdeploy.pipeline.llm): a folder with config.json as MODEL takes that road.
    max_new_tokens: int = setting(
        16, "Tokens generated greedily after each prompt.",
        flags=("--max-new-tokens",), metavar="N", panel=LM_PANEL, section="run", farm=True,
        low=1, example="16",
    )  # fmt: skip
    min_token_agreement: float | None = setting(
        None, "Teacher-forced next-token agreement of the device with the quantized eager program, 0-1.",
        fallback=DEFAULT_MIN_TOKEN_AGREEMENT, flags=("--min-token-agreement",), metavar="X", panel=LM_PANEL, section="verify",
        farm=True, low=0, high=1, example="0.95",
    )  # fmt: skip
    max_kld: float | None = setting(
        None, "Mean KL divergence of the device's next-token distributions from the quantized eager program's, nats.",
        fallback=DEFAULT_MAX_KLD, flags=("--max-kld",), metavar="X", panel=LM_PANEL, section="verify", farm=True,
        low=0, example="0.01",
    )  # fmt: skip
    max_ppl_increase: float | None = setting(
        None, "How far the device's perplexity on the prompts may exceed float eager's, as a fraction (0.1: 10% more).",
        fallback=DEFAULT_MAX_PPL_INCREASE, flags=("--max-ppl-increase",), metavar="X", panel=LM_PANEL, section="verify",
        farm=True, low=0, example="0.25",
    )  # fmt: skip
    runner: Path | None = setting(
        None, "A runner bundle dir, or an executor_runner binary (upstream's works).",
        flags=("--runner",), metavar="PATH", panel=DEVICE_PANEL, section="run", farm=True,
        path=True, scope=MACHINE,
    )  # fmt: skip
    cpu_threads: int | None = setting(
        None, "The runner's thread pool size (default: the performant cores).",
        flags=("--cpu-threads",), metavar="N", panel=DEVICE_PANEL, section="run", farm=True,
    )  # fmt: skip
    lock_timeout_s: float = setting(
        600.0, "Seconds to wait for a device another job holds.",
        flags=("--lock-timeout",), metavar="SECONDS", panel=DEVICE_PANEL, section="run",
        low=0, example="600", scope=MACHINE,
    )  # fmt: skip
    keep: bool = setting(
        False, "Keep the job's directory on the device.",
        flags=("--keep",), panel=DEVICE_PANEL, section="run", scope=MACHINE,
    )  # fmt: skip
    verify_remote: bool = setting(
        False, "Hash every file already on the device instead of trusting its digest records.",
        flags=("--verify-remote",), panel=DEVICE_PANEL, negatable=False, scope=MACHINE,
    )  # fmt: skip
    # run --localize (etdeploy.pipeline.localize): a tapped sibling of the program, run on
    # the same device, names the operator where it departs from eager.
    localize: bool = setting(
        False, "Name the operator where the device starts to depart from eager: a tapped twin of the program runs on the same device.",
        flags=("--localize",), panel=LOCALIZE_PANEL, section="run", farm=True, scope=BUILD,
    )  # fmt: skip
    localize_samples: int = setting(
        0, "Localise on N more samples after the most divergent one.",
        flags=("--localize-samples",), metavar="N", panel=LOCALIZE_PANEL, section="run", farm=True,
        low=0, example="2", scope=BUILD,
    )  # fmt: skip
    localize_budget_bytes: int | None = setting(
        None, "Bytes of tapped values pulled whole; summaries (min, max, mean, std...) beyond.",
        fallback=LOCALIZE_BUDGET_BYTES, flags=("--localize-budget",), metavar="SIZE", panel=LOCALIZE_PANEL, section="run",
        key="localize_budget", farm=True, parse=size_value, toml=(str, int), low=0, example="64MB",
        scope=BUILD,
    )  # fmt: skip
    localize_module: str | None = setting(
        None, "Tap only inside this module path, e.g. encoder.layers.3 (globs allowed).",
        flags=("--localize-module",), metavar="PATH", panel=LOCALIZE_PANEL, section="run",
        farm=True, scope=BUILD,
    )  # fmt: skip

    def __post_init__(self) -> None:
        super().__post_init__()  # every setting within its range (ProgramOptions')
        self.declared_kinds()  # a malformed --output-kind fails here

    def declared_kinds(self) -> dict[str, str]:
        """--output-kind NAME=KIND as a mapping."""
        kinds: dict[str, str] = {}
        for item in self.output_kinds:
            name, sep, kind = item.partition("=")
            if not sep or not name or not kind:
                raise UsageError(
                    f"cannot read --output-kind {item!r}", "write NAME=KIND, e.g. logits=classifier"
                )
            if kind.strip() not in OUTPUT_KINDS:
                raise UsageError(
                    f"--output-kind {item!r}: {kind.strip()!r} is not one of {', '.join(OUTPUT_KINDS)}",
                    "e.g. --output-kind logits=classifier",
                )
            kinds[name.strip()] = kind.strip()
        return kinds


def declared(cls: type = RunSettings) -> Iterator[Declared]:
    """Every declared setting of `cls` (RunSettings: every setting of a run)."""
    return declared_in(cls)


def by_key(section: str) -> dict[str, Declared]:
    """The settings etdeploy.toml's [section] takes, by key."""
    return {d.key: d for d in declared() if d.option.section == section}


def farm_settings() -> dict[str, Declared]:
    """The settings a farm job takes, by key."""
    return {d.key: d for d in declared() if d.option.farm}


def defaults() -> dict[str, object]:
    return {d.name: d.default for d in declared()}


# The functions below give field values by name, as RunSettings and RunJob take them by
# keyword (each value was converted to its field's type by Declared.from_given).


def from_tables(
    tables: Mapping[str, Mapping[str, object]], label: str, base: Path | None
) -> dict[str, Any]:
    """Field values from etdeploy.toml's [build], [run] and [verify] (checked, converted;
    paths relative to the file's folder `base`)."""
    values: dict[str, Any] = {}
    for section in SECTIONS:
        known = by_key(section)
        for key, value in tables.get(section, {}).items():
            entry = known[key]  # etdeploy.config refused unknown keys
            values[entry.name] = entry.from_given(value, f"{label}: {section}.{key}", base)
    return values


def from_farm_table(
    table: Mapping[str, object], where: str, label: str, base: Path | None
) -> dict[str, Any]:
    """Field values from a farm spec's table of job settings (keys already checked)."""
    known = farm_settings()
    return {
        known[key].name: known[key].from_given(value, f"{label}: {where}.{key}", base)
        for key, value in table.items()
        if key in known
    }


def from_flags(given: Mapping[str, object], cls: type[RunSettings] = RunSettings) -> dict[str, Any]:
    """Field values from the flags given (None or an empty list: not given)."""
    values: dict[str, Any] = {}
    for entry in declared(cls):
        value = given.get(entry.name)
        if value is None or (entry.is_list and not value):
            continue
        if entry.option.inverted:
            value = not value
        values[entry.name] = entry.from_given(value, entry.spelled)
    return values


def layered(*layers: Mapping[str, object]) -> dict[str, Any]:
    """Layers of field values, each over the ones before; --output-kind adds to the
    file's kinds rather than replacing them (a flag names some outputs)."""
    merged: dict[str, Any] = {}
    for layer in layers:
        for name, value in layer.items():
            if name == "output_kinds" and name in merged and isinstance(value, tuple):
                value = (*merged[name], *value)
            merged[name] = value
    return merged

"""Every setting of a run, declared once.

`RunSettings` is the typed settings object of one run: each field carries its default,
its help text, its flag, its etdeploy.toml key and whether a farm spec may set it
(`Option`, in the field's metadata). Everything else is derived from it and never
listed again:

- `etdeploy run`'s options (etdeploy.cli._settings builds them from the fields);
- etdeploy.toml's [run], [build] and [verify] keys and their types (etdeploy.config);
- a farm spec's job settings (etdeploy.farm.spec);
- the job itself: etdeploy.pipeline.job.RunJob is RunSettings plus what one invocation
  names (the model, a --pte, a --reference).

Values arrive in three layers, each over the one before: the defaults here, the
config file (`from_tables`), the flags (`from_flags`). A value is checked once, in
`RunSettings.__post_init__`, whichever layer gave it, and an error names the flag.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from etdeploy.errors import UsageError
from etdeploy.results.result_verdict import OUTPUT_KINDS
from etdeploy.units import parse_size

# What a setting's value may be in a TOML file: the types tomllib gives.
TomlType = type | tuple[type, ...]
# A given value (a flag's text, a TOML value) to the field's value; `where` names
# where it was written ("--localize-budget", "etdeploy.toml: run.localize_budget").
Parser = Callable[[Any, str], Any]

# Panels of `etdeploy run --help`.
MODEL_PANEL = "Model and build"
INPUTS_PANEL = "Inputs and reference"
DEVICE_PANEL = "Device"
TIMING_PANEL = "Timing and profiling"
VERIFY_PANEL = "Verification"
LOCALIZE_PANEL = "Localization"
ACCURACY_PANEL = "Task accuracy"
LM_PANEL = "Language models (a Hugging Face causal-LM folder as MODEL)"

# The etdeploy.toml tables run settings live in.
SECTIONS = ("build", "run", "verify")

# What a job bundle (etdeploy.bundle) does with a setting, its Option's `scope`:
# JOB travels in the bundle and applies where it runs (iterations, tolerances...);
# MACHINE belongs to the machine that runs it (its device, runner, lock) and never
# travels; BUILD is spent making the bundle (the build, the inputs, the references),
# so a run of a bundle refuses it as a flag.
JOB, MACHINE, BUILD = "job", "machine", "build"


@dataclass(frozen=True)
class Option:
    """How a setting is given: on the command line, in etdeploy.toml, in a farm spec."""

    help: str
    #: Its flags, the long one first ("--iterations", "-n"); none: not a flag.
    flags: tuple[str, ...] = ()
    metavar: str | None = None
    panel: str | None = None
    #: The etdeploy.toml table that holds it ("run", "build", "verify"); None: no key.
    section: str | None = None
    #: Its key there and in a farm spec; None: the field's own name.
    key: str | None = None
    #: Whether a farm spec's [farm], model entries and [[farm.job]] may set it.
    farm: bool = False
    #: Turns a given value into the field's value (sizes, NAME=KIND tables).
    parse: Parser | None = None
    #: The TOML types it accepts when `parse` takes more than the field's own type.
    toml: TomlType | None = None
    #: A path: in a file, relative to that file's folder.
    path: bool = False
    #: A boolean flag comes as --x/--no-x (else the flag alone turns it on).
    negatable: bool = True
    #: The flag turns the setting off (--no-cache sets use_cache to False).
    inverted: bool = False
    #: The range a number must be in: at least `low`, more than `above`, at most `high`.
    low: float | None = None
    above: float | None = None
    high: float | None = None
    #: A value to show in a hint ("10" for --iterations).
    example: str | None = None
    #: What a job bundle does with it: JOB, MACHINE or BUILD (see above).
    scope: str = JOB


def setting(default: Any, help: str, **option: Any) -> Any:
    """A dataclass field with its Option (see Option for the keywords)."""
    return field(default=default, metadata={"option": Option(help, **option)})


def _size(value: Any, where: str) -> int:
    return parse_size(value, what=where)


def _drop(value: Any, where: str) -> float:
    from etdeploy.accuracy import parse_drop

    return parse_drop(value, where)


def _output_kinds(value: Any, where: str) -> tuple[str, ...]:
    """[verify] output_kinds = {logits = "classifier"}, or ["logits=classifier"] as the
    flag and farm jobs write them."""
    if isinstance(value, Mapping):
        items = []
        for name, kind in value.items():
            if not isinstance(kind, str):
                raise UsageError(f"{where}.{name}: expected str, got {kind!r}", f"fix {where}")
            items.append(f"{name}={kind}")
        return tuple(items)
    return _strings(value, where)


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise UsageError(f"{where}: expected a list of strings, got {value!r}", f"fix {where}")
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise UsageError(f"{where}[{i}]: expected str, got {item!r}", f"fix {where}")
    return tuple(value)


@dataclass(frozen=True, kw_only=True)
class RunSettings:
    """The knobs of one run. Field order is the order of `etdeploy run --help`."""

    device: str = setting(
        "local", "local, a devices.NAME table of etdeploy.toml, a serial, or a model name (pixel8).",
        flags=("--device", "-d"), metavar="NAME", panel=DEVICE_PANEL, section="run", scope=MACHINE,
    )  # fmt: skip
    backend: str = setting(
        "xnnpack", "xnnpack (default), portable, coreml, vulkan.",
        flags=("--backend", "-b"), metavar="NAME", panel=MODEL_PANEL, section="build", scope=BUILD,
    )  # fmt: skip
    quantize: str | None = setting(
        None, "int8 (calibrated on real samples) or int8-dynamic; for a language model folder 8da4w.",
        flags=("--quantize",), metavar="MODE", panel=MODEL_PANEL, section="build", scope=BUILD,
    )  # fmt: skip
    calibration: tuple[str, ...] = setting(
        (), "Real calibration samples for int8: files, dirs or globs.",
        flags=("--calibration",), metavar="PATH", panel=MODEL_PANEL, section="build", farm=True,
        path=True, scope=BUILD,
    )  # fmt: skip
    dynamic: tuple[str, ...] = setting(
        (), "A dynamic dim, e.g. x:0=1..16.",
        flags=("--dynamic",), metavar="INPUT:DIM=MIN..MAX", panel=MODEL_PANEL, section="build",
        farm=True, scope=BUILD,
    )  # fmt: skip
    # Program-data separation: like backend and quantize, a build option.
    external_weights: bool = setting(
        False, "Build MODEL with its weights in a .ptd beside the .pte (pushed content-addressed).",
        flags=("--external-weights",), panel=MODEL_PANEL, section="build", farm=True, scope=BUILD,
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
        10, "Timed executions (default 10).",
        flags=("--iterations", "-n"), metavar="N", panel=TIMING_PANEL, section="run", farm=True,
        low=1, example="10",
    )  # fmt: skip
    warmup: int = setting(
        3, "Untimed executions first (default 3).",
        flags=("--warmup",), metavar="N", panel=TIMING_PANEL, section="run", farm=True,
        low=0, example="3",
    )  # fmt: skip
    deadline_s: float = setting(
        120.0, "Seconds before the runner is killed (default 120); a call that also runs other samples gets more in proportion to its executions.",
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
        None, "float32 absolute tolerance (default 1e-4).",
        flags=("--atol",), metavar="X", panel=VERIFY_PANEL, section="run", farm=True,
        low=0, example="1e-4",
    )  # fmt: skip
    rtol: float | None = setting(
        None, "float32 relative tolerance (default 1e-4).",
        flags=("--rtol",), metavar="X", panel=VERIFY_PANEL, section="run", farm=True,
        low=0, example="1e-4",
    )  # fmt: skip
    output_kinds: tuple[str, ...] = setting(
        (), "How an output is judged: KIND is classifier, regression, embedding, mask or other.",
        flags=("--output-kind",), metavar="NAME=KIND", panel=VERIFY_PANEL, section="verify",
        farm=True, parse=_output_kinds, toml=(dict, list),
    )  # fmt: skip
    min_sqnr_db: float | None = setting(
        None, "Quantization's accuracy budget: SQNR in dB vs the float model (default 15).",
        flags=("--min-sqnr",), metavar="DB", panel=VERIFY_PANEL, section="verify", farm=True,
    )  # fmt: skip
    min_top1: float | None = setting(
        None, "... top-1 agreement of declared classifiers, 0-1 (default 0.9).",
        flags=("--min-top1",), metavar="X", panel=VERIFY_PANEL, section="verify", farm=True,
        low=0, high=1, example="0.9",
    )  # fmt: skip
    min_cosine: float | None = setting(
        None, "... cosine of declared embeddings (default 0.99).",
        flags=("--min-cosine",), metavar="X", panel=VERIFY_PANEL, section="verify", farm=True,
        low=0, high=1, example="0.99",
    )  # fmt: skip
    max_abs_error: float | None = setting(
        None, "... largest abs error vs the float model (default: no limit).",
        flags=("--max-abs-error",), metavar="X", panel=VERIFY_PANEL, section="verify", farm=True,
        low=0, example="0.05",
    )  # fmt: skip
    quant_steps: float | None = setting(
        None, "A quantized program on the device: error allowed in quantization steps (default 1).",
        flags=("--quant-steps",), metavar="N", panel=VERIFY_PANEL, section="verify", farm=True,
        low=0, example="1",
    )  # fmt: skip
    # Memory (etdeploy.memory): the peak a run may reach, over a device's own
    # [devices.NAME] max_memory, which is over [run]'s (RunJob.resolve).
    max_memory_bytes: int | None = setting(
        None, "Fail the run (exit 1) when its peak memory, in any phase, passes SIZE, e.g. 300MB (default: the device's max_memory in etdeploy.toml, else [run] max_memory).",
        flags=("--max-memory",), metavar="SIZE", panel=VERIFY_PANEL, section="run",
        key="max_memory", farm=True, parse=_size, toml=(str, int), above=0, example="300MB",
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
    max_seq_len: int = setting(
        128, "The program's context: KV-cache positions (default 128).",
        flags=("--max-seq-len",), metavar="N", panel=LM_PANEL, section="build", farm=True,
        low=2, example="128", scope=BUILD,
    )  # fmt: skip
    group_size: int = setting(
        32, "8da4w's 4-bit weight group along each linear's input: a multiple of 32 "
        "dividing every layer's input, e.g. 32, 64 or 128 (default 32).",
        flags=("--group-size",), metavar="N", panel=LM_PANEL, section="build", farm=True,
        low=1, example="32", scope=BUILD,
    )  # fmt: skip
    quantize_embeddings: bool = setting(
        False, "Also quantize the token embedding table to int8 (per row).",
        flags=("--quantize-embeddings",), panel=LM_PANEL, section="build", farm=True,
        scope=BUILD,
    )  # fmt: skip
    max_new_tokens: int = setting(
        16, "Tokens generated greedily after each prompt (default 16).",
        flags=("--max-new-tokens",), metavar="N", panel=LM_PANEL, section="run", farm=True,
        low=1, example="16",
    )  # fmt: skip
    min_token_agreement: float | None = setting(
        None, "Teacher-forced next-token agreement of the device with the quantized eager program, 0-1 (default 0.95).",
        flags=("--min-token-agreement",), metavar="X", panel=LM_PANEL, section="verify",
        farm=True, low=0, high=1, example="0.95",
    )  # fmt: skip
    max_kld: float | None = setting(
        None, "Mean KL divergence of the device's next-token distributions from the quantized eager program's, nats (default 0.01).",
        flags=("--max-kld",), metavar="X", panel=LM_PANEL, section="verify", farm=True,
        low=0, example="0.01",
    )  # fmt: skip
    max_ppl_increase: float | None = setting(
        None, "Device perplexity over float eager's on the prompts, relative (default 0.25: +25%).",
        flags=("--max-ppl-increase",), metavar="X", panel=LM_PANEL, section="verify",
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
        600.0, "Seconds to wait for a device another job holds (default 600).",
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
        0, "Localise on N more samples after the most divergent one (default 0).",
        flags=("--localize-samples",), metavar="N", panel=LOCALIZE_PANEL, section="run", farm=True,
        low=0, example="2", scope=BUILD,
    )  # fmt: skip
    localize_budget_bytes: int | None = setting(
        None, "Bytes of tapped values pulled whole (default 64MiB); summaries (min, max, mean, std...) beyond.",
        flags=("--localize-budget",), metavar="SIZE", panel=LOCALIZE_PANEL, section="run",
        key="localize_budget", farm=True, parse=_size, toml=(str, int), low=0, example="64MB",
        scope=BUILD,
    )  # fmt: skip
    localize_module: str | None = setting(
        None, "Tap only inside this module path, e.g. encoder.layers.3 (globs allowed).",
        flags=("--localize-module",), metavar="PATH", panel=LOCALIZE_PANEL, section="run",
        farm=True, scope=BUILD,
    )  # fmt: skip

    def __post_init__(self) -> None:
        for entry in declared(type(self)):
            value = getattr(self, entry.name)
            if entry.flag is not None:
                entry.check_range(value, entry.spelled)
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


# -- the fields and what they accept ---------------------------------------------------------


@dataclass(frozen=True)
class Declared:
    """One setting: its field, its Option and its resolved Python type."""

    name: str
    option: Option
    annotation: Any
    default: Any

    @property
    def key(self) -> str:
        return self.option.key or self.name

    @property
    def flag(self) -> str | None:
        return self.option.flags[0] if self.option.flags else None

    @property
    def spelled(self) -> str:
        """How an error names the setting: every spelling of its flag (--iterations / -n)."""
        return " / ".join(self.option.flags) or self.name

    @property
    def value_type(self) -> Any:
        """The type without None: `float` for `float | None`."""
        return _without_none(self.annotation)

    @property
    def optional(self) -> bool:
        return _without_none(self.annotation) is not self.annotation

    @property
    def is_list(self) -> bool:
        return typing.get_origin(self.value_type) is tuple

    @property
    def toml_type(self) -> TomlType:
        """What a TOML file may give for it."""
        if self.option.toml is not None:
            return self.option.toml
        kind = self.value_type
        if self.is_list:
            return list
        if kind is float:
            return (int, float)
        if kind is Path:
            return str
        return typing.cast(type, kind)

    def check_range(self, value: Any, where: str) -> None:
        """A number within the setting's range, or a UsageError naming `where`."""
        option = self.option
        if value is None or isinstance(value, bool) or not isinstance(value, int | float):
            return
        if option.low is not None and value < option.low:
            bound = "at least 1" if option.low == 1 else f"{option.low:g} or more"
        elif option.above is not None and value <= option.above:
            bound = "positive" if option.above == 0 else f"more than {option.above:g}"
        elif option.high is not None and value > option.high:
            bound = f"between {option.low or 0:g} and {option.high:g}"
        else:
            return
        example = f"; e.g. {self.flag} {option.example}" if option.example and self.flag else ""
        told = option.help.rstrip(".")
        raise UsageError(f"{where} must be {bound}, got {value:g}", f"{told}{example}")

    def from_given(self, value: Any, where: str, base: Path | None = None) -> Any:
        """A value from a file (base: its folder) or a flag, as the field holds it."""
        converted = self._converted(value, where, base)
        self.check_range(converted, where)
        return converted

    def _converted(self, value: Any, where: str, base: Path | None) -> Any:
        if self.option.parse is not None:
            return self.option.parse(value, where)
        if self.is_list:
            items = _strings(value, where)
            if base is not None and self.option.path:
                items = tuple(_relative_to(base, item) for item in items)
            return items
        kind = self.value_type
        if kind is Path:
            return Path(_relative_to(base, value) if base is not None else value)
        if kind is float and not isinstance(value, bool):
            return float(value)
        return value


def _without_none(annotation: Any) -> Any:
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def _relative_to(base: Path, value: str) -> str:
    path = Path(value).expanduser()
    return value if path.is_absolute() else str(base / path)


S = TypeVar("S", bound=RunSettings)


def declared(cls: type[RunSettings] = RunSettings) -> Iterator[Declared]:
    """Every field of `cls` that carries an Option, in declaration order."""
    found = _DECLARED.get(cls)
    if found is None:
        # Worked out once a class: resolving its hints evaluates every annotation's text.
        found = _DECLARED[cls] = _declared(cls)
    return iter(found)


_DECLARED: dict[type[RunSettings], tuple[Declared, ...]] = {}


def _declared(cls: type[RunSettings]) -> tuple[Declared, ...]:
    hints = typing.get_type_hints(cls)
    found = []
    for f in dataclasses.fields(cls):
        option = f.metadata.get("option")
        if isinstance(option, Option):
            default = f.default if f.default is not dataclasses.MISSING else None
            found.append(Declared(f.name, option, hints[f.name], default))
    return tuple(found)


def by_key(section: str) -> dict[str, Declared]:
    """The settings etdeploy.toml's [section] takes, by key."""
    return {d.key: d for d in declared() if d.option.section == section}


def farm_settings() -> dict[str, Declared]:
    """The settings a farm job takes, by key."""
    return {d.key: d for d in declared() if d.option.farm}


def defaults() -> dict[str, Any]:
    return {d.name: d.default for d in declared()}


def expect_type(value: Any, expected: TomlType, key: str, label: str) -> None:
    """A TOML value of the expected type, or a UsageError naming its key and file."""
    # bool is an int in Python; a boolean where a number belongs is a mistake.
    ok = False if isinstance(value, bool) and expected is not bool else isinstance(value, expected)
    if not ok:
        names = (
            expected.__name__
            if isinstance(expected, type)
            else " or ".join(t.__name__ for t in expected)
        )
        shown = "a table" if isinstance(value, dict) else repr(value)
        raise UsageError(f"{label}: {key}: expected {names}, got {shown}", f"fix {key} in {label}")


def from_tables(
    tables: Mapping[str, Mapping[str, Any]], label: str, base: Path | None
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
    table: Mapping[str, Any], where: str, label: str, base: Path | None
) -> dict[str, Any]:
    """Field values from a farm spec's table of job settings (keys already checked)."""
    known = farm_settings()
    return {
        known[key].name: known[key].from_given(value, f"{label}: {where}.{key}", base)
        for key, value in table.items()
        if key in known
    }


def from_flags(given: Mapping[str, Any], cls: type[RunSettings] = RunSettings) -> dict[str, Any]:
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


def layered(*layers: Mapping[str, Any]) -> dict[str, Any]:
    """Layers of field values, each over the ones before; --output-kind adds to the
    file's kinds rather than replacing them (a flag names some outputs)."""
    merged: dict[str, Any] = {}
    for layer in layers:
        for name, value in layer.items():
            if name == "output_kinds" and name in merged:
                value = (*merged[name], *value)
            merged[name] = value
    return merged

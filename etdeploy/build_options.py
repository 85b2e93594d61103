"""What a program is built with, declared once.

`ProgramOptions` are the options every road that builds a program takes: `etdeploy run`
and `etdeploy build` (flags and etdeploy.toml's [build]), a release variant
([release.variants.NAME]), a farm job ([farm], a model entry, [[farm.job]]; the backend
and quantization as the matrix's axes). `BuildOptions` adds what only a build is asked
for (noise calibration, the cache). etdeploy.settings.RunSettings derives from
ProgramOptions, etdeploy.release.spec.Variant from BuildOptions, and the farm spec reads
the declarations (etdeploy.declaration); none of them lists an option again.

The language-model options (max_seq_len, group_size, quantize_embeddings) belong here
too: a Hugging Face causal-LM folder as MODEL is built with them
(etdeploy.pipeline.llm), every other model without them.
"""

from __future__ import annotations

from dataclasses import dataclass

from etdeploy.declaration import BUILD, LM_PANEL, MODEL_PANEL, check_ranges, setting

# What --quantize takes, declared once: a program's modes (etdeploy.builder.quantize
# makes them) and a language model's (etdeploy.pipeline.llm.lm_export: why only 8da4w
# is there). Each road refuses the other's with its own one-line error.
PROGRAM_QUANTIZATIONS = ("int8", "int8-dynamic")
LM_QUANTIZATIONS = ("8da4w",)
QUANTIZATIONS = PROGRAM_QUANTIZATIONS + LM_QUANTIZATIONS


@dataclass(frozen=True)
class ProgramOptions:
    """The options a run, a release variant and a farm job build a program with. Field
    order is their order in `etdeploy run --help` (and a build's backend may be given
    first, unnamed: BuildOptions("portable"); every other option is named)."""

    backend: str = setting(
        "xnnpack", "xnnpack, portable, coreml, vulkan.",
        flags=("--backend", "-b"), metavar="NAME", panel=MODEL_PANEL, section="build",
        farm_axis="backends", release=True, scope=BUILD,
    )  # fmt: skip
    quantize: str | None = setting(
        None, "int8 (calibrated on real samples) or int8-dynamic; for a language model folder 8da4w.",
        flags=("--quantize",), metavar="MODE", panel=MODEL_PANEL, section="build",
        farm_axis="quantize", release=True, scope=BUILD,
    )  # fmt: skip
    calibration: tuple[str, ...] = setting(
        (), "Real calibration samples for int8: files, dirs or globs.",
        flags=("--calibration",), metavar="PATH", panel=MODEL_PANEL, section="build", farm=True,
        release=True, path=True, scope=BUILD,
    )  # fmt: skip
    dynamic: tuple[str, ...] = setting(
        (), "A dynamic dim, e.g. x:0=1..16.",
        flags=("--dynamic",), metavar="INPUT:DIM=MIN..MAX", panel=MODEL_PANEL, section="build",
        farm=True, release=True, scope=BUILD,
    )  # fmt: skip
    # Program-data separation: the weights in a .ptd beside the .pte.
    external_weights: bool = setting(
        False, "Build MODEL with its weights in a .ptd beside the .pte (pushed content-addressed).",
        flags=("--external-weights",), panel=MODEL_PANEL, section="build", farm=True,
        release=True, scope=BUILD,
    )  # fmt: skip
    # Language models (etdeploy.pipeline.llm): a folder with config.json as MODEL.
    max_seq_len: int = setting(
        128, "The program's context: KV-cache positions.",
        flags=("--max-seq-len",), metavar="N", panel=LM_PANEL, section="build", farm=True,
        release=True, low=2, example="128", scope=BUILD,
    )  # fmt: skip
    group_size: int = setting(
        32, "8da4w's 4-bit weight group along each linear's input: a multiple of 32 "
        "dividing every layer's input, e.g. 32, 64 or 128.",
        flags=("--group-size",), metavar="N", panel=LM_PANEL, section="build", farm=True,
        release=True, low=1, example="32", scope=BUILD,
    )  # fmt: skip
    quantize_embeddings: bool = setting(
        False, "Also quantize the token embedding table to int8 (per row).",
        flags=("--quantize-embeddings",), panel=LM_PANEL, section="build", farm=True,
        release=True, scope=BUILD,
    )  # fmt: skip

    def __post_init__(self) -> None:
        check_ranges(self)


@dataclass(frozen=True, kw_only=True)
class CacheChoice:
    """Whether a build may be served from the content-addressed cache: how a program is
    made, not what it is, so a release variant does not set it (`release build
    --no-cache` does)."""

    use_cache: bool = setting(
        True, "Rebuild the .pte even when cached.",
        flags=("--no-cache",), panel=MODEL_PANEL, negatable=False, inverted=True, scope=BUILD,
    )  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class BuildOptions(ProgramOptions, CacheChoice):
    """What one build is asked for (etdeploy.builder.build)."""

    # A run calibrates on its own samples (or on noise with --random); only `etdeploy
    # build` and a release variant ask for noise calibration by name.
    random_calibration: bool = setting(
        False, "Calibrate int8 on noise (recorded in the manifest).",
        flags=("--random-calibration",), panel=MODEL_PANEL, release=True, negatable=False,
        scope=BUILD,
    )  # fmt: skip

    def key_fields(self) -> dict[str, object]:
        """What a build's cache key takes from its options (the language-model options
        build another road, etdeploy.pipeline.llm, with its own key)."""
        fields: dict[str, object] = {
            "backend": self.backend,
            "quantize": self.quantize,
            "random_calibration": self.random_calibration,
            "dynamic": sorted(self.dynamic),
        }
        if self.external_weights:  # only then: every other build keeps its cache key
            fields["external_weights"] = True
        return fields

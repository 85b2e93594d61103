"""What a model factory returns. Users import this: `from etdeploy.model import ModelSpec`.

A factory may return `(module, example_inputs)` or a ModelSpec, which can also carry
dynamic shapes, names and paths to real sample inputs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# {input name: {dim index: (min, max)}}
DynamicDims = dict[str, dict[int, tuple[int, int]]]


@dataclass
class ModelSpec:
    module: Any  # torch.nn.Module; typed loosely so this file imports without torch
    example_inputs: tuple[Any, ...]
    name: str = "model"
    input_names: list[str] | None = None
    output_names: list[str] | None = None
    dynamic: DynamicDims = field(default_factory=dict)
    # Real sample inputs for verification and calibration: files or directories.
    samples: list[Path] = field(default_factory=list)
    # Real calibration inputs for int8 (defaults to `samples`).
    calibration: list[Path] = field(default_factory=list)
    # How each output is judged, by output name: "classifier" (top-k agreement),
    # "regression" (SQNR and abs error), "embedding" (cosine), "mask" or "other".
    # An output not named here has its kind guessed from its shape, and a guess
    # is never held to a metric only that kind needs.
    output_kinds: dict[str, str] = field(default_factory=dict)
    # The answers of `samples` (a CSV of sample,label rows or a .npy in sample order),
    # when the samples do not carry them (a labelled .npz, a folder a class).
    labels: Path | None = None
    # What the labels score (etdeploy.accuracy.parse_task): "classification",
    # "classification:5" (top-1 and top-5), "regression"; "@OUTPUT" names the output.
    task: str | None = None
    # The classes in the order of the output's scores, for labels given by name.
    label_names: list[str] = field(default_factory=list)
    # A causal language model's tokenizer (module a Hugging Face *ForCausalLM):
    # tokenizer.json or tokenizer.model, or the folder holding it. `samples` are then
    # its prompts (text files). None: the folder the model was loaded from.
    tokenizer: Path | None = None

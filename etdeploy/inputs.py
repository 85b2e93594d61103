"""Real inputs: files -> tensors (one tuple per sample) -> raw runner files, and back.

A sample is one file (.npy, .npz, .pt) or, for a directory or glob, each file in
it. Tensors are written in the runner's format: contiguous, default dim
order, native little-endian bytes of exactly the method input's size.
"""

from __future__ import annotations

import glob
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from etdeploy.errors import InputError

SAMPLE_SUFFIXES = (".npy", ".npz", ".pt")

NUMPY_DTYPES = {
    "float32": np.float32, "float64": np.float64, "float16": np.float16,
    "int8": np.int8, "uint8": np.uint8, "int16": np.int16, "int32": np.int32,
    "int64": np.int64, "bool": np.bool_,
}


@dataclass(frozen=True)
class Sample:
    name: str
    arrays: tuple[np.ndarray, ...]


def expand_sample_paths(paths: Sequence[Path | str]) -> list[Path]:
    """Files, directories (their sample files, sorted) and globs -> sample files."""
    files: list[Path] = []
    for item in paths:
        text = str(item)
        if any(ch in text for ch in "*?["):
            matched = sorted(Path(p) for p in glob.glob(text))
            if not matched:
                raise InputError(f"no inputs match {text}", "check the glob pattern")
            files.extend(p for p in matched if p.is_file())
            continue
        path = Path(text)
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if p.suffix in SAMPLE_SUFFIXES and p.is_file())
            if not found:
                raise InputError(
                    f"no input files in {path}", f"put {', '.join(SAMPLE_SUFFIXES)} files there"
                )
            files.extend(found)
        elif path.is_file():
            files.append(path)
        else:
            raise InputError(f"input not found: {path}", "check the path given with --inputs")
    return files


def load_sample(path: Path, input_names: Sequence[str]) -> Sample:
    """One sample file -> one array per method input."""
    suffix = path.suffix.lower()
    try:
        if suffix == ".npy":
            arrays: tuple[np.ndarray, ...] = (np.load(path, allow_pickle=False),)
        elif suffix == ".npz":
            with np.load(path, allow_pickle=False) as archive:
                keys = list(archive.keys())
                if input_names and all(n in keys for n in input_names):
                    arrays = tuple(archive[n] for n in input_names)
                else:
                    arrays = tuple(archive[k] for k in keys)
        elif suffix == ".pt":
            import torch

            loaded = torch.load(path, weights_only=True)
            items = loaded if isinstance(loaded, (tuple, list)) else (loaded,)
            if not all(isinstance(t, torch.Tensor) for t in items):
                raise InputError(f"{path} holds no tensor or tuple of tensors", "torch.save a tensor or a tuple")
            arrays = tuple(t.detach().contiguous().numpy() for t in items)
        else:
            raise InputError(
                f"cannot read inputs from {path.name}",
                f"use {', '.join(SAMPLE_SUFFIXES)}",
            )
    except InputError:
        raise
    except Exception as exc:
        raise InputError(f"cannot read {path}: {exc}", "is it a valid .npy/.npz/.pt file?") from exc
    return Sample(path.stem, arrays)


def load_samples(paths: Sequence[Path | str], input_names: Sequence[str]) -> list[Sample]:
    return [load_sample(p, input_names) for p in expand_sample_paths(paths)]


def check_against(sample: Sample, expected: Sequence[dict[str, Any]], names: Sequence[str]) -> None:
    """Shapes and dtypes against the method's input metadata, before anything runs."""
    if len(sample.arrays) != len(expected):
        raise InputError(
            f"sample {sample.name} has {len(sample.arrays)} input(s); the program takes {len(expected)}",
            f"inputs are: {', '.join(names)}",
        )
    for i, (array, meta) in enumerate(zip(sample.arrays, expected, strict=True)):
        name = names[i] if i < len(names) else f"input {i}"
        want_dtype, want_shape = meta.get("dtype"), meta.get("shape")
        dynamic = meta.get("dynamic", {}) or {}
        shape_ok = len(array.shape) == len(want_shape) and all(
            given == want or (str(d) in dynamic and dynamic[str(d)][0] <= given <= dynamic[str(d)][1])
            for d, (given, want) in enumerate(zip(array.shape, want_shape, strict=True))
        )
        if str(array.dtype) != want_dtype or not shape_ok:
            raise InputError(
                f"input {name!r} of sample {sample.name}: expected {want_dtype}{list(want_shape)}, "
                f"given {array.dtype}{list(array.shape)}",
                "convert the sample (dtype, layout) to what the model was exported with",
            )


def to_tensors(sample: Sample) -> tuple[Any, ...]:
    import torch

    return tuple(torch.from_numpy(np.ascontiguousarray(a)) for a in sample.arrays)


def write_raw(array: np.ndarray, path: Path) -> None:
    """The runner's input format: contiguous little-endian bytes."""
    data = np.ascontiguousarray(array)
    if data.dtype.byteorder == ">":
        data = data.astype(data.dtype.newbyteorder("<"))
    tmp = path.with_name(f".{path.name}.tmp")
    data.tofile(tmp)
    tmp.replace(path)


def read_raw(path: Path, dtype: str, shape: Sequence[int]) -> np.ndarray:
    raw = np.fromfile(path, dtype=NUMPY_DTYPES[dtype])
    expected = int(np.prod(shape)) if shape else 1
    if raw.size != expected:
        raise InputError(
            f"{path.name} holds {raw.size} {dtype} values; shape {list(shape)} needs {expected}",
            "the output file does not match the expected shape",
        )
    return raw.reshape(shape)

"""Real inputs: files -> arrays (one tuple per sample) -> raw runner files, and back.

A sample is one file, or each file of a directory or glob:
- `.npy` (one input), `.npz` (arrays by input name, else in order), `.pt` (a
  tensor or a tuple of tensors saved with torch.save);
- `.bin`, raw bytes in the method input's dtype and shape: `NAME.bin` for a
  one-input method, `NAME.<input>.bin` per input for several (grouped by NAME);
- `.png`/`.jpg`/`.jpeg`, an image converted for a one-input method by a
  preprocessing spec (see `parse_preprocess`), by default resized to the input's
  height and width and scaled to [0, 1].

Raw runner files are the tensor's bytes, contiguous in its default dim order,
little-endian, exactly the method input's size (the runner refuses any other).
"""

from __future__ import annotations

import functools
import glob
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from etdeploy.errors import EtdeployError, InputError
from etdeploy.extras import require_build_extra
from etdeploy.npz import read_npy

ARRAY_SUFFIXES = (".npy", ".npz", ".pt")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
RAW_SUFFIX = ".bin"
SAMPLE_SUFFIXES = (*ARRAY_SUFFIXES, RAW_SUFFIX, *IMAGE_SUFFIXES)

NUMPY_DTYPES = {
    "float32": np.float32, "float64": np.float64, "float16": np.float16,
    "int8": np.int8, "uint8": np.uint8, "int16": np.int16, "int32": np.int32,
    "int64": np.int64, "bool": np.bool_,
}  # fmt: skip

# What the runner knows of an input: {"name", "dtype", "shape", "dynamic"}.
InputMeta = Mapping[str, Any]


@dataclass(frozen=True)
class Sample:
    name: str
    arrays: tuple[np.ndarray, ...]


@dataclass(frozen=True)
class Preprocess:
    """How an image becomes a tensor: resize, scale, normalise, lay out."""

    size: tuple[int, int] | None = None  # (height, width); None: the input's own
    # None: 1/255 for a float input (pixels to [0, 1]), 1 for an integer one
    # (a uint8 input takes the pixels as they are).
    scale: float | None = None
    mean: tuple[float, ...] = (0.0,)
    std: tuple[float, ...] = (1.0,)
    layout: str | None = None  # nchw | nhwc; None: guessed from the input's shape
    color: str | None = None  # rgb | gray; None: from the channel count


def parse_preprocess(text: str | None) -> Preprocess:
    """`resize=224x224,scale=1/255,mean=0.485/0.456/0.406,std=0.229/0.224/0.225,layout=nchw`.

    Every key is optional; unknown keys and unreadable values are errors that
    name the key.
    """
    if not text:
        return Preprocess()
    values: dict[str, Any] = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        try:
            if not sep:
                raise ValueError("expected KEY=VALUE")
            if key == "resize":
                height, width = (int(v) for v in value.lower().split("x"))
                values["size"] = (height, width)
            elif key == "scale":
                top, _, bottom = value.partition("/")
                values["scale"] = float(top) / float(bottom or 1)
            elif key in ("mean", "std"):
                values[key] = tuple(float(v) for v in value.split("/"))
                if key == "std" and any(v == 0 for v in values[key]):
                    raise ValueError("std must not be 0")
            elif key == "layout":
                if value not in ("nchw", "nhwc"):
                    raise ValueError("use nchw or nhwc")
                values["layout"] = value
            elif key == "color":
                if value not in ("rgb", "gray"):
                    raise ValueError("use rgb or gray")
                values["color"] = value
            else:
                raise ValueError("keys are resize, scale, mean, std, layout, color")
        except ValueError as exc:
            raise InputError(
                f"--preprocess {item!r}: {exc}",
                "e.g. --preprocess resize=224x224,scale=1/255,mean=0.485/0.456/0.406,layout=nchw",
            ) from None
    return Preprocess(**values)


def expand_sample_paths(paths: Sequence[Path | str]) -> list[Path]:
    """Files, directories (their sample files, sorted) and globs -> sample files."""
    files: list[Path] = []
    for item in paths:
        text = str(item)
        if any(ch in text for ch in "*?["):
            matched = sorted(Path(p) for p in glob.glob(text) if Path(p).is_file())
            if not matched:
                raise InputError(f"no inputs match {text}", "check the glob pattern")
            files.extend(matched)
            continue
        path = Path(text)
        if path.is_dir():
            # scandir: an entry knows whether it is a file without a stat of its own.
            with os.scandir(path) as entries:
                found = [
                    path / entry.name
                    for entry in sorted(entries, key=lambda e: e.name)
                    if os.path.splitext(entry.name)[1].lower() in SAMPLE_SUFFIXES
                    and entry.is_file()
                ]
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


def load_samples(
    paths: Sequence[Path | str],
    inputs: Sequence[InputMeta | str],
    preprocess: Preprocess | None = None,
) -> list[Sample]:
    """Every sample the paths hold. `inputs` is the method's input metadata (or,
    where only names are known, the names: then .bin and images cannot be read)."""
    metas = [m if isinstance(m, Mapping) else {"name": m} for m in inputs]
    names = [str(m.get("name", f"input_{i}")) for i, m in enumerate(metas)]
    # Samples in file order; raw .bin files of one sample are grouped by their stem.
    order: list[Path | tuple[Path, str]] = []
    raw_groups: dict[tuple[Path, str], dict[str, Path]] = {}
    for path in expand_sample_paths(paths):
        if path.suffix.lower() != RAW_SUFFIX:
            order.append(path)
            continue
        stem, _, input_name = path.stem.rpartition(".")
        if len(metas) <= 1 or not stem:
            stem, input_name = path.stem, names[0] if names else ""
        key = (path.parent, stem)
        if key not in raw_groups:
            raw_groups[key] = {}
            order.append(key)
        raw_groups[key][input_name] = path
    samples = []
    for item in order:
        if isinstance(item, tuple):
            samples.append(load_raw_sample(item[1], raw_groups[item], metas))
        elif item.suffix.lower() in IMAGE_SUFFIXES:
            samples.append(load_image(item, metas, preprocess or Preprocess()))
        else:
            samples.append(load_array_sample(item, names))
    return samples


def load_array_sample(path: Path, input_names: Sequence[str]) -> Sample:
    """One .npy, .npz or .pt file -> one array per method input."""
    suffix = path.suffix.lower()
    try:
        if suffix == ".npy":
            arrays: tuple[np.ndarray, ...] = (read_npy(path),)
        elif suffix == ".npz":
            with np.load(path, allow_pickle=False) as archive:
                keys = list(archive.keys())
                if input_names and all(n in keys for n in input_names):
                    arrays = tuple(archive[n] for n in input_names)
                else:
                    arrays = tuple(archive[k] for k in keys)
        elif suffix == ".pt":
            require_build_extra(f"reading {path.name} (a torch.save file)")
            import torch

            loaded = torch.load(path, weights_only=True)
            items = loaded if isinstance(loaded, (tuple, list)) else (loaded,)
            if not all(isinstance(t, torch.Tensor) for t in items):
                raise InputError(
                    f"{path} holds no tensor or tuple of tensors", "torch.save a tensor or a tuple"
                )
            arrays = tuple(t.detach().contiguous().numpy() for t in items)
        else:
            raise InputError(
                f"cannot read inputs from {path.name}", f"use {', '.join(SAMPLE_SUFFIXES)}"
            )
    except EtdeployError:
        raise  # ours already says what is wrong (a bad file, no torch for a .pt)
    except Exception as exc:
        raise InputError(f"cannot read {path}: {exc}", "is it a valid .npy/.npz/.pt file?") from exc
    return Sample(path.stem, arrays)


def load_raw_sample(stem: str, files: Mapping[str, Path], inputs: Sequence[InputMeta]) -> Sample:
    """Raw .bin files: the dtype and shape are the method's (no dynamic dims)."""
    arrays = []
    for i, meta in enumerate(inputs):
        name = str(meta.get("name", f"input_{i}"))
        path = files.get(name) if len(inputs) > 1 else next(iter(files.values()))
        if path is None:
            raise InputError(
                f"raw sample {stem} has no file for input {name!r}",
                f"name raw files {stem}.<input>.bin, one per input ({', '.join(str(m.get('name')) for m in inputs)})",
            )
        if "dtype" not in meta or "shape" not in meta:
            raise InputError(
                f"cannot read raw {path.name}: the input's dtype and shape are unknown", "use .npy"
            )
        if meta.get("dynamic"):
            raise InputError(
                f"raw {path.name}: input {name!r} has dynamic dims, so its shape is not fixed",
                "use .npy, which carries the shape",
            )
        arrays.append(read_raw(path, str(meta["dtype"]), list(meta["shape"])))
    return Sample(stem, tuple(arrays))


def load_image(path: Path, inputs: Sequence[InputMeta], spec: Preprocess) -> Sample:
    """An image -> the method's one input, by `spec` (resize, scale, mean/std, layout)."""
    from PIL import Image, UnidentifiedImageError

    if len(inputs) != 1:
        raise InputError(
            f"image {path.name}: the method takes {len(inputs)} inputs; images feed one-input methods",
            "save each sample as .npz with one array per input",
        )
    meta = inputs[0]
    shape = list(meta.get("shape") or [])
    dtype_name = str(meta.get("dtype", "float32"))
    if len(shape) not in (3, 4) or dtype_name in ("int32", "int64", "bool"):
        # Tokens, features, audio: no layout or resize turns a picture into those.
        shown = f"{dtype_name}[{', '.join(str(d) for d in shape)}]"
        raise InputError(
            f"image {path.name}: input {meta.get('name', 'input_0')!r} is {shown}, not an image",
            "give its samples as .npy or .npz arrays of that dtype and shape; images feed "
            "inputs shaped [N, C, H, W] or [N, H, W, C]",
        )
    layout = spec.layout or _guess_layout(shape)
    if layout is None:
        raise InputError(
            f"image {path.name}: cannot tell the layout of input shape {shape}",
            "say it: --preprocess layout=nchw (or nhwc)",
        )
    batched = len(shape) == 4
    chw = shape[1:] if batched else shape
    channels, height, width = (
        (chw[0], chw[1], chw[2]) if layout == "nchw" else (chw[2], chw[0], chw[1])
    )
    if spec.size is not None:
        height, width = spec.size
    color = spec.color or ("gray" if channels == 1 else "rgb")
    try:
        with Image.open(path) as image:
            converted = image.convert("L" if color == "gray" else "RGB")
            resized = converted.resize((width, height), Image.Resampling.BILINEAR)
            pixels = np.asarray(resized, dtype=np.float32)
    except (OSError, UnidentifiedImageError) as exc:
        raise InputError(f"cannot read image {path}: {exc}", "is it a PNG or JPEG file?") from exc
    if pixels.ndim == 2:
        pixels = pixels[:, :, None]
    mean = np.asarray(spec.mean, dtype=np.float32)
    std = np.asarray(spec.std, dtype=np.float32)
    if mean.size not in (1, pixels.shape[2]) or std.size not in (1, pixels.shape[2]):
        raise InputError(
            f"image {path.name}: mean/std have {mean.size}/{std.size} values for {pixels.shape[2]} channel(s)",
            "give one value, or one per channel: mean=0.485/0.456/0.406",
        )
    dtype = str(meta.get("dtype", "float32"))
    scale = (
        spec.scale if spec.scale is not None else (1 / 255 if dtype.startswith("float") else 1.0)
    )
    tensor = (pixels * scale - mean) / std
    if layout == "nchw":
        tensor = tensor.transpose(2, 0, 1)
    if batched:
        tensor = tensor[None]
    if not dtype.startswith("float"):
        tensor = np.rint(tensor)
    return Sample(path.stem, (np.ascontiguousarray(tensor.astype(dtype)),))


def _guess_layout(shape: Sequence[int]) -> str | None:
    chw = list(shape[1:]) if len(shape) == 4 else list(shape)
    if len(chw) != 3:
        return None
    if chw[0] in (1, 3) and chw[2] not in (1, 3):
        return "nchw"
    if chw[2] in (1, 3) and chw[0] not in (1, 3):
        return "nhwc"
    return "nchw" if chw[0] in (1, 3) else None


def shape_text(shape: Sequence[int], dynamic: Mapping[str, Sequence[int]] | None = None) -> str:
    """A shape as etdeploy writes it, a dynamic dim as its declared range: [1, 2..64]."""
    ranges = {str(k): v for k, v in (dynamic or {}).items()}
    return "[" + ", ".join(
        f"{ranges[str(d)][0]}..{ranges[str(d)][1]}" if str(d) in ranges else str(size)
        for d, size in enumerate(shape)
    ) + "]"  # fmt: skip


@functools.cache
def dtype_name(dtype: np.dtype[Any]) -> str:
    """str(dtype), remembered: numpy 2 works it out in Python (numpy/_core/_dtype.py,
    read 2026-12-05), ~6 us a call, twice a sample on a run of a thousand."""
    return str(dtype)


def check_against(sample: Sample, expected: Sequence[InputMeta], what: str = "sample") -> None:
    """Count, dtypes and shapes against the method's inputs, before anything runs.
    A dynamic dim may take any size within its range, and the error names the range.
    `what` names the samples in the error: "sample", "calibration sample"."""
    names = [str(m.get("name", f"input_{i}")) for i, m in enumerate(expected)]
    if len(sample.arrays) != len(expected):
        raise InputError(
            f"{what} {sample.name} has {len(sample.arrays)} input(s); the program takes {len(expected)}",
            f"its inputs are: {', '.join(names)}",
        )
    for name, array, meta in zip(names, sample.arrays, expected, strict=True):
        want_dtype, want_shape = str(meta.get("dtype")), list(meta.get("shape") or [])
        dynamic = {str(k): v for k, v in (meta.get("dynamic") or {}).items()}
        outside = [
            d
            for d, (given, want) in enumerate(zip(array.shape, want_shape, strict=False))
            if given != want
            and not (str(d) in dynamic and dynamic[str(d)][0] <= given <= dynamic[str(d)][1])
        ]
        if (
            dtype_name(array.dtype) == want_dtype
            and len(array.shape) == len(want_shape)
            and not outside
        ):
            continue
        why = ""
        if len(array.shape) == len(want_shape) and outside and str(outside[0]) in dynamic:
            low, high = dynamic[str(outside[0])][:2]
            why = f" (dim {outside[0]} is {array.shape[outside[0]]}, outside its declared range {low}..{high})"
        raise InputError(
            f"input {name!r} of {what} {sample.name}: expected "
            f"{want_dtype}{shape_text(want_shape, dynamic)}, given "
            f"{array.dtype}{shape_text(array.shape)}{why}",
            "trim or pad the sample into that range, or rebuild with a wider "
            "--dynamic INPUT:DIM=MIN..MAX"
            if why
            else "convert the sample (dtype, shape, layout) to what the model was exported with",
        )


def to_tensors(sample: Sample) -> tuple[Any, ...]:
    import torch

    return tuple(torch.from_numpy(np.ascontiguousarray(a)) for a in sample.arrays)


def raw_bytes(array: np.ndarray) -> bytes:
    """The runner's input format: contiguous, little-endian."""
    data = np.ascontiguousarray(array)
    if data.dtype.byteorder == ">":
        data = data.astype(data.dtype.newbyteorder("<"))
    return data.tobytes()


def read_raw(path: Path, dtype: str, shape: Sequence[int]) -> np.ndarray:
    """A raw tensor file back into an array of `dtype` and `shape`."""
    if dtype not in NUMPY_DTYPES:
        raise InputError(
            f"{path.name}: dtype {dtype} is not supported here",
            f"supported: {', '.join(NUMPY_DTYPES)}",
        )
    itemsize = np.dtype(NUMPY_DTYPES[dtype]).itemsize
    need = (int(np.prod(shape)) if shape else 1) * itemsize
    have = path.stat().st_size
    if have != need:
        raise InputError(
            f"{path.name} has {have} bytes; {dtype}{list(shape)} needs {need}",
            f"a raw file must hold exactly {need} bytes: the tensor, contiguous, little-endian",
        )
    raw: np.ndarray = np.fromfile(path, dtype=NUMPY_DTYPES[dtype])
    return raw.reshape(shape)

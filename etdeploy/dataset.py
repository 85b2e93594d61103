"""A labelled test set: real samples and the answer each should get.

Where the labels come from, in order:
- `--labels FILE`: a CSV of `sample,label` rows (a header row is allowed), or a .npy of
  one label per sample in sample order;
- an .npz with `y` among its arrays: a whole set in one file, sample i being `x[i]`
  (or each input's array by name, [i]) and its label `y[i]`;
- an ImageFolder-style tree given as --inputs: one folder a class, the classes
  numbered in sorted order, the folder names the label names.
Labels may be class indices, or class names when the model names its classes.

Nothing here imports torch.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from etdeploy.errors import InputError
from etdeploy.inputs import (
    SAMPLE_SUFFIXES,
    InputMeta,
    Preprocess,
    Sample,
    load_samples,
)


@dataclass(frozen=True)
class Labels:
    values: np.ndarray  # one per sample: class indices, or regression targets
    source: str  # where they were read, for the report
    names: tuple[str, ...] = ()  # class names, when known


@dataclass(frozen=True)
class Labelled:
    samples: list[Sample]
    labels: Labels | None


def load_labelled(
    paths: Sequence[str | Path],
    metas: Sequence[InputMeta],
    preprocess: Preprocess | None,
    labels_file: str | Path | None = None,
    label_names: Sequence[str] = (),
) -> Labelled:
    """The samples `paths` hold, with their labels when the paths or `labels_file` carry them."""
    samples: list[Sample] = []
    carried: list[np.ndarray] = []
    names: tuple[str, ...] = tuple(label_names)
    sources: list[str] = []
    for item in paths:
        path = Path(item)
        if path.suffix.lower() == ".npz" and path.is_file() and _has_labels(path):
            found, y = _npz_set(path, metas)
            samples += found
            carried.append(y)
            sources.append(path.name)
        elif path.is_dir() and _is_class_tree(path):
            found, y, classes = _class_tree(path, metas, preprocess, names)
            samples += found
            carried.append(y)
            names = names or classes
            sources.append(f"{path.name}/ (a folder a class)")
        else:
            samples += load_samples([item], metas, preprocess)
            carried.append(np.empty(0))  # marks samples without labels
    if labels_file is not None:
        labels = read_labels_file(Path(labels_file), [s.name for s in samples], names)
        return Labelled(samples, labels)
    if not sources:
        return Labelled(samples, None)
    if any(part.size == 0 for part in carried):
        raise InputError(
            "some inputs carry labels and others do not",
            "give every sample a label (a labelled .npz, a folder a class) or give --labels",
        )
    return Labelled(samples, Labels(np.concatenate(carried), ", ".join(sources), names))


def _has_labels(path: Path) -> bool:
    with np.load(path, allow_pickle=False) as archive:
        return "y" in archive.files


def _npz_set(path: Path, metas: Sequence[InputMeta]) -> tuple[list[Sample], np.ndarray]:
    """x[i] (or each input's own array [i]) and y[i] of a labelled .npz."""
    names = [str(m.get("name", f"input_{i}")) for i, m in enumerate(metas)]
    with np.load(path, allow_pickle=False) as archive:
        keys = names if all(n in archive.files for n in names) else ["x"]
        if not all(k in archive.files for k in keys):
            raise InputError(
                f"{path.name} has y (labels) but no x or arrays named {', '.join(names)}",
                "save the samples as x (one input) or by input name, stacked on a first axis",
            )
        arrays = [archive[k] for k in keys]
        y = archive["y"]
    count = len(y)
    if any(len(a) != count for a in arrays):
        raise InputError(
            f"{path.name}: {', '.join(f'{k} has {len(a)}' for k, a in zip(keys, arrays, strict=True))} "
            f"samples but y has {count} labels",
            "stack one sample per row of x and one label per row of y",
        )
    samples = []
    for i in range(count):
        row = tuple(
            _as_input(a[i], metas[k] if k < len(metas) else {}) for k, a in enumerate(arrays)
        )
        samples.append(Sample(f"{path.stem}[{i}]", row))
    return samples, y


def _as_input(array: np.ndarray, meta: InputMeta) -> np.ndarray:
    """A row of a stacked set, with the batch dim of one the input has put back."""
    shape = list(meta.get("shape") or [])
    if shape and len(shape) == array.ndim + 1 and shape[0] == 1:
        return array[None]
    return array


def _is_class_tree(path: Path) -> bool:
    entries = [p for p in path.iterdir() if not p.name.startswith(".")]
    return bool(entries) and all(p.is_dir() for p in entries)


def _class_tree(
    path: Path,
    metas: Sequence[InputMeta],
    preprocess: Preprocess | None,
    label_names: Sequence[str],
) -> tuple[list[Sample], np.ndarray, tuple[str, ...]]:
    classes = tuple(sorted(p.name for p in path.iterdir() if p.is_dir() and p.name[0] != "."))
    order = tuple(label_names) or classes
    unknown = [c for c in classes if c not in order]
    if unknown:
        raise InputError(
            f"{path}: folder {unknown[0]!r} is not one of the model's classes",
            f"name each folder after a class: {', '.join(order[:10])}",
        )
    samples: list[Sample] = []
    labels: list[int] = []
    for name in classes:
        files = sorted(p for p in (path / name).iterdir() if p.suffix.lower() in SAMPLE_SUFFIXES)
        for sample in load_samples(files, metas, preprocess) if files else []:
            samples.append(Sample(f"{name}/{sample.name}", sample.arrays))
            labels.append(order.index(name))
    return samples, np.asarray(labels, dtype=np.int64), order


def read_labels_file(path: Path, sample_names: Sequence[str], names: Sequence[str]) -> Labels:
    """A labels file for `sample_names`: CSV rows `sample,label` or a .npy in sample order."""
    if not path.is_file():
        raise InputError(f"labels file not found: {path}", "check the path given with --labels")
    if path.suffix.lower() == ".npy":
        values = np.load(path, allow_pickle=False)
        if len(values) != len(sample_names):
            raise InputError(
                f"{path.name} has {len(values)} labels for {len(sample_names)} samples",
                "one label per sample, in the order the samples are read (sorted file names)",
            )
        return Labels(values, path.name, tuple(names))
    rows = _csv_rows(path)
    by_name = dict(rows)
    # A row may name a sample by its file's stem; os.path, not Path: a thousand names.
    stems = [os.path.splitext(os.path.basename(n))[0] for n in sample_names]
    missing = [
        n
        for n, stem in zip(sample_names, stems, strict=True)
        if n not in by_name and stem not in by_name
    ]
    if missing:
        raise InputError(
            f"{path.name} has no label for sample {missing[0]!r} "
            f"({len(missing)} of {len(sample_names)} samples unlabelled)",
            "one row per sample: its file name (without the extension) and its label",
        )
    extra = set(by_name) - set(sample_names) - set(stems)
    if extra:
        raise InputError(
            f"{path.name} labels {len(extra)} sample(s) that are not among the inputs, "
            f"e.g. {sorted(extra)[0]!r}",
            "label exactly the samples given with --inputs",
        )
    texts = [
        by_name.get(n, by_name.get(stem, "")) for n, stem in zip(sample_names, stems, strict=True)
    ]
    return Labels(_label_values(texts, names, path.name), path.name, tuple(names))


def _csv_rows(path: Path) -> list[tuple[str, str]]:
    import csv  # here: a run without a labels file never reads one (~0.003 s to import)

    with open(path, newline="") as handle:
        rows = [r for r in csv.reader(handle) if r and not r[0].startswith("#")]
    if rows and rows[0][:2] in (["sample", "label"], ["name", "label"], ["file", "label"]):
        rows = rows[1:]
    bad = [i for i, r in enumerate(rows) if len(r) != 2]
    if bad:
        raise InputError(
            f"{path.name} row {bad[0] + 1} has {len(rows[bad[0]])} fields, expected 2",
            "write one `sample,label` row per sample",
        )
    names = [r[0].strip() for r in rows]
    if len(set(names)) != len(names):
        raise InputError(f"{path.name} labels a sample twice", "give each sample one row")
    return [(r[0].strip(), r[1].strip()) for r in rows]


def _label_values(texts: Sequence[str], names: Sequence[str], source: str) -> np.ndarray:
    """Labels as written: whole numbers are class indices, decimals regression targets,
    words class names (which the model must name)."""
    try:
        return np.asarray([int(t) for t in texts], dtype=np.int64)
    except ValueError:
        pass
    try:
        return np.asarray([float(t) for t in texts], dtype=np.float64)
    except ValueError:
        pass
    unknown = sorted({t for t in texts if t not in names})
    if unknown:
        hint = (
            f"the model's classes are: {', '.join(names[:10])}"
            if names
            else "label by class index, or name the classes in the model (ModelSpec.label_names)"
        )
        raise InputError(f"{source}: label {unknown[0]!r} is not a class of the model", hint)
    return np.asarray([list(names).index(t) for t in texts], dtype=np.int64)

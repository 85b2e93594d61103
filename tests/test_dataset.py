"""etdeploy.dataset: where a test set's labels come from, and what is refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from etdeploy.dataset import load_labelled
from etdeploy.errors import InputError

IMAGE = {"name": "image", "dtype": "float32", "shape": [1, 1, 8, 8]}


def _images(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).random((n, 1, 8, 8)).astype(np.float32)


def test_a_labelled_npz_is_a_whole_set_with_the_batch_dim_put_back(tmp_path: Path) -> None:
    np.savez(tmp_path / "test.npz", x=_images(5), y=np.arange(5))
    found = load_labelled([tmp_path / "test.npz"], [IMAGE], None)
    assert [s.name for s in found.samples] == [f"test[{i}]" for i in range(5)]
    assert found.samples[2].arrays[0].shape == (1, 1, 8, 8)
    assert found.labels is not None and found.labels.values.tolist() == [0, 1, 2, 3, 4]
    assert found.labels.source == "test.npz"


def test_a_folder_a_class_numbers_the_classes_in_sorted_order(tmp_path: Path) -> None:
    for name, count in (("cat", 2), ("dog", 3)):
        (tmp_path / "set" / name).mkdir(parents=True)
        for i in range(count):
            np.save(tmp_path / "set" / name / f"{i}.npy", _images(1, i)[0][None])
    found = load_labelled([tmp_path / "set"], [IMAGE], None)
    assert found.labels is not None
    assert found.labels.names == ("cat", "dog")
    assert found.labels.values.tolist() == [0, 0, 1, 1, 1]
    assert [s.name for s in found.samples][:2] == ["cat/0", "cat/1"]


def test_a_csv_labels_samples_by_name_in_any_order(tmp_path: Path) -> None:
    for name in ("b", "a", "c"):
        np.save(tmp_path / f"{name}.npy", _images(1)[0][None])
    (tmp_path / "labels.csv").write_text("sample,label\nc,7\na,1\nb,4\n")
    found = load_labelled([tmp_path / "a.npy", tmp_path / "b.npy", tmp_path / "c.npy"], [IMAGE],
                          None, tmp_path / "labels.csv")  # fmt: skip
    assert found.labels is not None and found.labels.values.tolist() == [1, 4, 7]


def test_class_names_are_labels_when_the_model_names_its_classes(tmp_path: Path) -> None:
    np.save(tmp_path / "a.npy", _images(1)[0][None])
    (tmp_path / "labels.csv").write_text("a,dog\n")
    found = load_labelled(
        [tmp_path / "a.npy"], [IMAGE], None, tmp_path / "labels.csv", ["cat", "dog"]
    )
    assert found.labels is not None and found.labels.values.tolist() == [1]


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ("a,1\n", "has no label for sample 'b'"),
        ("a,1\nb,2\nz,3\n", "labels 1 sample(s) that are not among the inputs, e.g. 'z'"),
        ("a,1\nb\n", "row 2 has 1 fields, expected 2"),
        ("a,1\na,2\nb,3\n", "labels a sample twice"),
        ("a,cat\nb,dog\n", "label 'cat' is not a class of the model"),
    ],
)
def test_labels_that_do_not_match_the_samples_are_named(
    tmp_path: Path, rows: str, message: str
) -> None:
    for name in ("a", "b"):
        np.save(tmp_path / f"{name}.npy", _images(1)[0][None])
    (tmp_path / "labels.csv").write_text(rows)
    with pytest.raises(InputError) as info:
        load_labelled(
            [tmp_path / "a.npy", tmp_path / "b.npy"], [IMAGE], None, tmp_path / "labels.csv"
        )
    assert message in info.value.message
    assert info.value.hint


def test_a_npy_of_labels_must_have_one_per_sample(tmp_path: Path) -> None:
    np.save(tmp_path / "a.npy", _images(1)[0][None])
    np.save(tmp_path / "labels.npy", np.arange(3))
    with pytest.raises(InputError, match=r"has 3 labels for 1 samples"):
        load_labelled([tmp_path / "a.npy"], [IMAGE], None, tmp_path / "labels.npy")


def test_a_set_whose_x_and_y_disagree_in_count_is_refused(tmp_path: Path) -> None:
    np.savez(tmp_path / "test.npz", x=_images(5), y=np.arange(4))
    with pytest.raises(InputError, match=r"x has 5 samples but y has 4 labels"):
        load_labelled([tmp_path / "test.npz"], [IMAGE], None)


def test_a_plain_sample_has_no_labels(tmp_path: Path) -> None:
    np.save(tmp_path / "a.npy", _images(1)[0][None])
    assert load_labelled([tmp_path / "a.npy"], [IMAGE], None).labels is None

"""Real inputs: every sample format becomes arrays checked against the method's
inputs before anything runs, and the raw runner format round-trips."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from etdeploy.errors import InputError
from etdeploy.inputs import (
    check_against,
    load_samples,
    parse_preprocess,
    raw_bytes,
    read_raw,
)

IMAGE_INPUT = {"name": "image", "dtype": "float32", "shape": [1, 3, 4, 6], "dynamic": {}}
TWO_INPUTS = [
    {"name": "left", "dtype": "float32", "shape": [2, 6], "dynamic": {}},
    {"name": "right", "dtype": "int64", "shape": [2, 3], "dynamic": {}},
]


def test_npz_arrays_are_taken_by_input_name_whatever_their_order(tmp_path: Path) -> None:
    left = np.arange(12, dtype=np.float32).reshape(2, 6)
    right = np.arange(6, dtype=np.int64).reshape(2, 3)
    np.savez(tmp_path / "a.npz", right=right, left=left)
    (sample,) = load_samples([tmp_path / "a.npz"], TWO_INPUTS)
    assert sample.name == "a"
    assert np.array_equal(sample.arrays[0], left) and np.array_equal(sample.arrays[1], right)


def test_a_directory_is_one_sample_per_file_in_name_order(tmp_path: Path) -> None:
    for name in ("b", "a", "c"):
        np.save(tmp_path / f"{name}.npy", np.zeros((1, 3, 4, 6), np.float32))
    (tmp_path / "notes.txt").write_text("not a sample")
    assert [s.name for s in load_samples([tmp_path], [IMAGE_INPUT])] == ["a", "b", "c"]


def test_pt_files_hold_a_tensor_or_a_tuple(tmp_path: Path) -> None:
    import torch

    torch.save((torch.ones(2, 6), torch.zeros(2, 3, dtype=torch.int64)), tmp_path / "t.pt")
    (sample,) = load_samples([tmp_path / "t.pt"], TWO_INPUTS)
    check_against(sample, TWO_INPUTS)


def test_raw_bin_files_take_dtype_and_shape_from_the_method(tmp_path: Path) -> None:
    left = np.linspace(0, 1, 12, dtype=np.float32).reshape(2, 6)
    right = np.arange(6, dtype=np.int64).reshape(2, 3)
    (tmp_path / "s0.left.bin").write_bytes(raw_bytes(left))
    (tmp_path / "s0.right.bin").write_bytes(raw_bytes(right))
    (sample,) = load_samples([tmp_path], TWO_INPUTS)
    assert sample.name == "s0"
    assert np.array_equal(sample.arrays[0], left) and np.array_equal(sample.arrays[1], right)


def test_a_raw_file_of_the_wrong_size_says_how_many_bytes_it_needs(tmp_path: Path) -> None:
    (tmp_path / "x.bin").write_bytes(b"\0" * 10)
    with pytest.raises(InputError, match=r"x.bin has 10 bytes; float32\[1, 3, 4, 6\] needs 288"):
        load_samples([tmp_path / "x.bin"], [IMAGE_INPUT])


def test_a_raw_sample_missing_one_input_names_it(tmp_path: Path) -> None:
    (tmp_path / "s0.left.bin").write_bytes(raw_bytes(np.zeros((2, 6), np.float32)))
    with pytest.raises(InputError, match="no file for input 'right'"):
        load_samples([tmp_path], TWO_INPUTS)


def test_an_image_is_resized_scaled_and_laid_out_for_the_input(tmp_path: Path) -> None:
    pixels = np.zeros((8, 12, 3), dtype=np.uint8)
    pixels[..., 0] = 255  # pure red
    Image.fromarray(pixels).save(tmp_path / "red.png")
    (sample,) = load_samples([tmp_path / "red.png"], [IMAGE_INPUT])
    (array,) = sample.arrays
    assert array.shape == (1, 3, 4, 6) and array.dtype == np.float32
    assert np.allclose(array[0, 0], 1.0) and np.allclose(array[0, 1:], 0.0)


def test_preprocess_normalises_per_channel_and_can_lay_out_nhwc(tmp_path: Path) -> None:
    Image.fromarray(np.full((4, 6, 3), 255, np.uint8)).save(tmp_path / "white.png")
    spec = parse_preprocess("scale=1/255,mean=0.5/0.5/0.0,std=0.5/0.25/1,layout=nhwc")
    meta = {"name": "image", "dtype": "float32", "shape": [1, 4, 6, 3]}
    (sample,) = load_samples([tmp_path / "white.png"], [meta], spec)
    assert sample.arrays[0].shape == (1, 4, 6, 3)
    assert np.allclose(sample.arrays[0][0, 0, 0], [1.0, 2.0, 1.0])


def test_a_grayscale_input_gets_one_channel(tmp_path: Path) -> None:
    Image.fromarray(np.full((16, 16, 3), 128, np.uint8)).save(tmp_path / "grey.jpg")
    meta = {"name": "image", "dtype": "float32", "shape": [1, 1, 8, 8]}
    (sample,) = load_samples([tmp_path / "grey.jpg"], [meta])
    assert sample.arrays[0].shape == (1, 1, 8, 8)
    assert np.allclose(sample.arrays[0], 128 / 255, atol=0.01)


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("resize=abc", "resize=abc"),
        ("std=0", "std must not be 0"),
        ("layout=chw", "nchw or nhwc"),
        ("gamma=2", "keys are"),
    ],
)
def test_a_bad_preprocess_spec_names_the_item(text: str, complaint: str) -> None:
    with pytest.raises(InputError, match=complaint):
        parse_preprocess(text)


def test_a_shape_mismatch_names_the_input_expected_and_given(tmp_path: Path) -> None:
    np.savez(
        tmp_path / "s.npz", left=np.zeros((2, 5), np.float32), right=np.zeros((2, 3), np.int64)
    )
    (sample,) = load_samples([tmp_path / "s.npz"], TWO_INPUTS)
    with pytest.raises(InputError) as caught:
        check_against(sample, TWO_INPUTS)
    assert (
        caught.value.message
        == "input 'left' of sample s: expected float32[2, 6], given float32[2, 5]"
    )


def test_a_dtype_mismatch_is_refused_too(tmp_path: Path) -> None:
    np.savez(
        tmp_path / "s.npz", left=np.zeros((2, 6), np.float64), right=np.zeros((2, 3), np.int64)
    )
    (sample,) = load_samples([tmp_path / "s.npz"], TWO_INPUTS)
    with pytest.raises(InputError, match="expected float32"):
        check_against(sample, TWO_INPUTS)


def test_a_dynamic_dim_takes_any_size_in_its_range() -> None:
    from etdeploy.inputs import Sample

    meta = [{"name": "x", "dtype": "float32", "shape": [4, 5], "dynamic": {"0": [1, 16]}}]
    check_against(Sample("ok", (np.zeros((9, 5), np.float32),)), meta)
    with pytest.raises(InputError, match="given float32\\[17, 5\\]"):
        check_against(Sample("big", (np.zeros((17, 5), np.float32),)), meta)


def test_a_size_outside_a_declared_range_is_reported_with_the_range() -> None:
    from etdeploy.inputs import Sample

    # The .pte's shape is the dim's upper bound (64); the declared range is what the
    # user wrote (--dynamic tokens:1=2..64), and what the error must say.
    meta = [{"name": "tokens", "dtype": "int64", "shape": [1, 64], "dynamic": {"1": [2, 64]}}]
    with pytest.raises(InputError) as caught:
        check_against(Sample("long", (np.zeros((1, 100), np.int64),)), meta)
    assert caught.value.message == (
        "input 'tokens' of sample long: expected int64[1, 2..64], given int64[1, 100] "
        "(dim 1 is 100, outside its declared range 2..64)"
    )
    assert "--dynamic" in (caught.value.hint or "")
    # A static dim that differs is not a range problem: no range, no --dynamic hint.
    with pytest.raises(InputError) as static:
        check_against(Sample("wide", (np.zeros((2, 10), np.int64),)), meta)
    assert "expected int64[1, 2..64], given int64[2, 10]" in static.value.message
    assert "outside" not in static.value.message and "--dynamic" not in (static.value.hint or "")


def test_a_missing_path_and_an_empty_glob_are_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="input not found"):
        load_samples([tmp_path / "nope.npy"], [IMAGE_INPUT])
    with pytest.raises(InputError, match="no inputs match"):
        load_samples([str(tmp_path / "*.npy")], [IMAGE_INPUT])


def test_raw_round_trip_keeps_values_and_shape(tmp_path: Path) -> None:
    array = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    (tmp_path / "a.bin").write_bytes(raw_bytes(array.astype(">i4")))  # big-endian in, little out
    assert np.array_equal(read_raw(tmp_path / "a.bin", "int32", [2, 3, 4]), array)


def test_an_integer_image_input_takes_the_pixels_as_they_are(tmp_path: Path) -> None:
    Image.fromarray(np.full((4, 6, 3), 200, np.uint8)).save(tmp_path / "grey.png")
    meta = {"name": "image", "dtype": "uint8", "shape": [1, 3, 4, 6]}
    (sample,) = load_samples([tmp_path / "grey.png"], [meta])
    assert sample.arrays[0].dtype == np.uint8 and np.all(sample.arrays[0] == 200)


def test_a_picture_given_to_a_token_model_says_the_input_is_not_an_image(
    tmp_path: Path,
) -> None:
    Image.fromarray(np.full((4, 6, 3), 200, np.uint8)).save(tmp_path / "cat.png")
    tokens = {"name": "tokens", "dtype": "int64", "shape": [1, 32]}
    with pytest.raises(InputError) as caught:
        load_samples([tmp_path / "cat.png"], [tokens])
    assert caught.value.message == "image cat.png: input 'tokens' is int64[1, 32], not an image"
    # No layout or resize turns a picture into tokens: the hint says what to give instead.
    assert "layout" not in (caught.value.hint or "") and ".npy" in (caught.value.hint or "")

"""`etdeploy build --external-weights`: the weights in a .ptd beside the .pte (ExecuTorch's
program-data separation), for XNNPACK and the portable kernels; the pair recorded, copied
and cached together; the .ptd's bytes untouched by a change to the code alone."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from etdeploy.builder import BuildOptions, build, data_path
from etdeploy.builder.ptd import check_pair, program_data_keys, read_data_keys
from etdeploy.errors import InputError, UsageError
from etdeploy.pte.reader import read_pte

pytestmark = pytest.mark.slow


def variant(directory: Path, scale: float) -> str:
    """digits behind a different output scale: new code, the same trained weights."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "scaled_digits.py"
    path.write_text(
        "def build():\n"
        "    import torch\n"
        "    from etdeploy.model.examples import digits\n\n"
        "    spec = digits.build()\n\n"
        "    class Scaled(torch.nn.Module):\n"
        "        def __init__(self, net):\n"
        "            super().__init__()\n"
        "            self.net = net\n\n"
        "        def forward(self, image):\n"
        f"            return self.net(image) * {scale!r}\n\n"
        "    spec.module = Scaled(spec.module).eval()\n"
        "    return spec\n"
    )
    return f"{path}:build"


@pytest.mark.parametrize("backend", ["xnnpack", "portable"])
def test_the_weights_go_to_a_ptd_beside_the_pte_and_the_manifest_records_it(backend: str) -> None:
    inside = build("digits", BuildOptions(backend=backend))
    outside = build("digits", BuildOptions(backend=backend, external_weights=True))

    assert outside.pte != inside.pte  # another cache entry; the plain build keeps its key
    assert "data" not in inside.manifest.to_json() and inside.data is None
    ptd = outside.data
    assert ptd == data_path(outside.pte) and ptd.is_file()
    blob = ptd.read_bytes()
    assert blob[4:8] == b"FT01"
    assert outside.manifest.to_json()["data"] == {
        "name": "digits.ptd",
        "size_bytes": len(blob),
        "sha256": hashlib.sha256(blob).hexdigest(),
    }
    # The .pte keeps the code: digits' 40 KB of weights left it.
    assert (
        outside.manifest.to_json()["size_bytes"]
        < 8 * 1024
        < inside.manifest.to_json()["size_bytes"]
    )
    assert len(blob) > 0.9 * (
        inside.manifest.to_json()["size_bytes"] - outside.manifest.to_json()["size_bytes"]
    )
    # Every weight the program names is in the .ptd.
    needed = program_data_keys(read_pte(outside.pte))
    assert needed and needed <= read_data_keys(ptd)


@pytest.mark.parametrize("backend", ["xnnpack", "portable"])
def test_a_change_to_the_code_alone_leaves_the_ptd_byte_for_byte(
    backend: str, tmp_path: Path
) -> None:
    first = build(variant(tmp_path / "v1", 1.5), BuildOptions(backend, external_weights=True))
    second = build(variant(tmp_path / "v2", 2.5), BuildOptions(backend, external_weights=True))

    assert (
        first.manifest.to_json()["sha256"] != second.manifest.to_json()["sha256"]
    )  # the code changed
    assert first.manifest.to_json()["data"]["sha256"] == second.manifest.to_json()["data"]["sha256"]
    assert first.data is not None and second.data is not None
    assert first.data.read_bytes() == second.data.read_bytes()


def test_int8_weights_go_to_the_ptd_too() -> None:
    built = build("digits", BuildOptions(quantize="int8-dynamic", external_weights=True))
    assert built.data is not None
    keys = program_data_keys(read_pte(built.pte))
    assert keys and keys <= read_data_keys(built.data)
    assert built.manifest.to_json()["size_bytes"] < 8 * 1024


def test_a_backend_that_keeps_its_own_weights_is_refused_before_any_work() -> None:
    with pytest.raises(UsageError, match="coreml keeps its weights") as raised:
        build("digits", BuildOptions(backend="coreml", external_weights=True))
    assert "xnnpack or portable" in (raised.value.hint or "")


def test_a_cached_build_whose_ptd_went_missing_is_rebuilt(fresh_cache: Path) -> None:
    built = build("digits", BuildOptions(external_weights=True))
    assert built.data is not None
    built.data.unlink()
    again = build("digits", BuildOptions(external_weights=True))
    assert not again.cached and again.data is not None and again.data.is_file()
    assert build("digits", BuildOptions(external_weights=True)).cached


def test_cli_build_copies_the_ptd_under_the_outputs_own_name(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "etdeploy", "build", "digits", "--external-weights",
         "-o", str(tmp_path / "out" / "model.pte")],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    pte, ptd = tmp_path / "out" / "model.pte", tmp_path / "out" / "model.ptd"
    manifest = json.loads((tmp_path / "out" / "model.pte.json").read_text())
    assert hashlib.sha256(ptd.read_bytes()).hexdigest() == manifest["data"]["sha256"]
    assert "weights (.ptd)" in done.stdout and "model.ptd" in done.stdout
    check_pair(pte, read_pte(pte), ptd)  # the copy is a whole pair


def test_the_pair_check_names_a_missing_or_foreign_ptd(tmp_path: Path) -> None:
    xnnpack = build("digits", BuildOptions(external_weights=True))
    portable = build("digits", BuildOptions(backend="portable", external_weights=True))
    layout = read_pte(xnnpack.pte)
    with pytest.raises(InputError, match="none was given") as raised:
        check_pair(xnnpack.pte, layout, None)
    assert "--data" in (raised.value.hint or "")
    assert portable.data is not None
    with pytest.raises(InputError, match="another build"):
        check_pair(xnnpack.pte, layout, portable.data)
    with pytest.raises(InputError, match="not an ExecuTorch data file"):
        check_pair(xnnpack.pte, layout, xnnpack.pte)
    assert xnnpack.data is not None
    cut = tmp_path / "cut.ptd"
    cut.write_bytes(xnnpack.data.read_bytes()[:40])
    with pytest.raises(InputError, match="truncated or corrupt"):
        check_pair(xnnpack.pte, layout, cut)

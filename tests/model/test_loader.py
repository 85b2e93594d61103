"""model/loader.py: what a model's fingerprint covers, and how a change is named.

No factory runs here: the fingerprint is computed from the files alone.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

from etdeploy.model.loader import ModelRef, changed_files, parse_model_ref


def model_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "proj"
    folder.mkdir()
    (folder / "model.py").write_text("def build():\n    raise NotImplementedError\n")
    (folder / "helpers.py").write_text("SCALE = 2\n")
    (folder / "weights.npy").write_bytes(b"\x93NUMPY weights")
    return folder


def test_what_etdeploy_writes_beside_a_model_leaves_its_fingerprint_alone(tmp_path: Path) -> None:
    folder = model_folder(tmp_path)
    ref = parse_model_ref(f"{folder / 'model.py'}:build")
    before = ref.fingerprint()
    for name in ("model-xnnpack.pte", "model-xnnpack.pte.json", "model.ptd", "model.etrecord",
                 "model-xnnpack-int8.quantized.pt2", "s0-run.etdump"):  # fmt: skip
        (folder / name).write_bytes(b"output")
    (folder / "result.json").write_text(json.dumps({"schema": "etdeploy.result/1"}, indent=2))
    (folder / "results.jsonl").write_text('{"schema":"etdeploy.result/1"}\n')
    (folder / "out").mkdir()  # a -o folder beside the model, holding a build
    (folder / "out" / "model.pte").write_bytes(b"output")
    assert ref.fingerprint() == before
    # A JSON file that is not etdeploy's is data the factory may read.
    (folder / "config.json").write_text('{"layers": 3}')
    assert ref.fingerprint() != before


def test_the_files_a_fingerprint_covers_name_what_changed_went_or_came(tmp_path: Path) -> None:
    folder = model_folder(tmp_path)
    ref = parse_model_ref(f"{folder / 'model.py'}:build")
    recorded = ref.fingerprint_files()
    assert set(recorded) == {"model.py", "helpers.py", "weights.npy"}
    (folder / "helpers.py").write_text("SCALE = 3\n")
    (folder / "weights.npy").write_bytes(b"\x93NUMPY retrained")
    (folder / "model.py").unlink()
    (folder / "model.py").write_text("def build():\n    raise NotImplementedError\n")
    (folder / "samples.npz").write_bytes(b"new data")
    changes = changed_files(recorded, ref.fingerprint_files())
    assert changes.changed == ("helpers.py", "weights.npy")  # the same model.py is no change
    assert changes.added == ("samples.npz",) and changes.removed == ()
    assert changes.describe == "helpers.py changed, weights.npy changed"
    (folder / "helpers.py").unlink()
    now = parse_model_ref(f"{folder / 'model.py'}:build").fingerprint_files()
    assert changed_files(recorded, now).removed == ("helpers.py",)


def fingerprinted_refs(tmp_path: Path) -> list[tuple[ModelRef, list[Path]]]:
    """Every kind of model, each with the files its fingerprint covers: a model file
    (itself, a Python file beside it, weights and a config beside it), a module of a
    package (its file and its siblings), and a saved program (.pt2)."""
    folder = model_folder(tmp_path)
    (folder / "config.json").write_text('{"layers": 3}')
    package = tmp_path / "site" / "mypkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "net.py").write_text("def build():\n    raise NotImplementedError\n")
    saved = tmp_path / "saved" / "net.pt2"
    saved.parent.mkdir()
    saved.write_bytes(b"PK a saved program")
    sys.path.insert(0, str(tmp_path / "site"))
    try:
        module = parse_model_ref("mypkg.net:build")
    finally:
        sys.path.remove(str(tmp_path / "site"))
    return [
        (parse_model_ref(f"{folder / 'model.py'}:build"),
         [folder / n for n in ("model.py", "helpers.py", "weights.npy", "config.json")]),
        (module, [package / "net.py", package / "__init__.py"]),
        (parse_model_ref(str(saved)), [saved]),
    ]  # fmt: skip


def test_every_file_a_fingerprint_covers_counts_by_its_content_alone(tmp_path: Path) -> None:
    """A `cp` of the same bytes (a new inode, a new mtime) is the same model; a changed
    byte in any covered file is another one, and the file is named."""
    for ref, files in fingerprinted_refs(tmp_path):
        assert sorted(ref.fingerprint_files()) == sorted(p.name for p in files), ref.text
        before, recorded = ref.fingerprint(), ref.fingerprint_files()
        for path in files:
            copy = path.with_name(f".copy-{path.name}")
            shutil.copyfile(path, copy)  # as `cp` does: new inode, mtime now
            stat = path.stat()
            os.replace(copy, path)
            os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
            assert ref.fingerprint() == before, f"{ref.text}: a copy of {path.name}"
        for path in files:
            original = path.read_bytes()
            path.write_bytes(original + b"\n")
            assert ref.fingerprint() != before, f"{ref.text}: {path.name} changed"
            changes = changed_files(recorded, ref.fingerprint_files())
            assert changes.describe == f"{path.name} changed", ref.text
            path.write_bytes(original)
        assert ref.fingerprint() == before


def test_a_verification_set_beside_the_model_is_not_part_of_it(tmp_path: Path) -> None:
    """Labels, images and notes beside a model are what a run checks it with, not what
    its program is built from."""
    folder = model_folder(tmp_path)
    ref = parse_model_ref(f"{folder / 'model.py'}:build")
    before = ref.fingerprint()
    (folder / "labels.csv").write_text("cat_1,cat\n")
    (folder / "labels.tsv").write_text("cat_1\tcat\n")
    (folder / "cat_1.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    (folder / "dog_1.JPG").write_bytes(b"\xff\xd8\xff")
    (folder / "README.md").write_text("# my model\n")
    assert ref.fingerprint() == before
    assert set(ref.fingerprint_files()) == {"model.py", "helpers.py", "weights.npy"}

"""model/loader.py: what a model's fingerprint covers, and how a change is named.

No factory runs here: the fingerprint is computed from the files alone.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from etdeploy.model.loader import changed_files, parse_model_ref


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
    stat = (folder / "weights.npy").stat()
    os.utime(folder / "weights.npy", ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
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

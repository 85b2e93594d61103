"""The build manifest (model.pte.json) is read through BuildManifest: a manifest the
builder wrote reads and writes back to the same text, one that is damaged or from
something else reads as None (and the cache builds that entry again), and one from
before a key was recorded still reads."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from etdeploy.atomic import json_text
from etdeploy.builder import BuildOptions, build
from etdeploy.builder.manifest import (
    SCHEMA,
    BuildManifest,
    ManifestError,
    ModelNames,
    manifest_path,
    program_record_from_json,
    read_manifest,
)

pytestmark = pytest.mark.slow


def _written(options: BuildOptions) -> tuple[BuildManifest, dict[str, Any], str]:
    result = build("digits", options)
    text = manifest_path(result.pte).read_text()
    return result.manifest, json.loads(text), text


@pytest.mark.parametrize(
    "options",
    [
        BuildOptions(),
        BuildOptions(backend="portable"),
        BuildOptions(quantize="int8"),
        BuildOptions(external_weights=True),
    ],
    ids=["xnnpack", "portable", "int8", "external-weights"],
)
def test_a_written_manifest_reads_and_writes_back_to_the_same_text(options: BuildOptions) -> None:
    manifest, document, text = _written(options)
    read = BuildManifest.from_json(document)
    assert read == manifest
    assert read.to_json() == document
    assert json_text(read.to_json()) == text  # byte for byte: the schema stays etdeploy.manifest/1
    assert document["schema"] == SCHEMA == "etdeploy.manifest/1"


def test_the_record_says_what_the_build_recorded() -> None:
    manifest, document, _ = _written(BuildOptions(quantize="int8"))
    assert manifest.backend == document["backend"] == "xnnpack"
    assert manifest.quantization is not None and manifest.quantization.mode == "int8"
    assert manifest.quantization.calibration is not None
    assert manifest.quantization.calibration.kind == "real"
    assert manifest.quantization.reference_sha256 is not None  # set when it was cached
    assert manifest.cache_key is not None
    outputs = manifest.methods[0].outputs
    assert outputs[0].quantization is not None and outputs[0].quantization.scale > 0
    assert manifest.planned_bytes == document["methods"][0]["planned_bytes"] > 0
    assert manifest.executorch_version == document["versions"]["executorch"]


def _damaged(document: dict[str, Any]) -> list[tuple[str, object]]:
    wrong_type = copy.deepcopy(document)
    wrong_type["sha256"] = 12
    no_methods = copy.deepcopy(document)
    no_methods["methods"] = "forward"
    bad_dynamic = copy.deepcopy(document)
    bad_dynamic["dynamic"] = {"x": {"0": [1]}}
    missing = {k: v for k, v in document.items() if k != "delegation"}
    other_schema = dict(document, schema="etdeploy.manifest/0")
    return [
        ("sha256", wrong_type),
        ("methods", no_methods),
        ("dynamic dim", bad_dynamic),
        ("delegation", missing),
        ("schema", other_schema),
        ("JSON object", [document]),
    ]


def test_a_damaged_manifest_is_a_clear_error_and_reads_as_none(tmp_path: Path) -> None:
    _, document, text = _written(BuildOptions())
    pte = tmp_path / "model.pte"
    pte.write_bytes(b"")
    for said, damaged in _damaged(document):
        with pytest.raises(ManifestError, match=said):
            BuildManifest.from_json(damaged)
        manifest_path(pte).write_text(json.dumps(damaged))
        assert read_manifest(pte) is None
    manifest_path(pte).write_text(text[: len(text) // 2])  # cut short: not JSON at all
    assert read_manifest(pte) is None
    manifest_path(pte).unlink()
    assert read_manifest(pte) is None


def test_a_manifest_from_before_files_and_labels_were_recorded_still_reads() -> None:
    _, document, _ = _written(BuildOptions())
    older = copy.deepcopy(document)
    del older["model"]["files"]
    for key in ("labels", "task", "label_names", "cache_key", "output_kinds", "dynamic"):
        older.pop(key, None)
    read = BuildManifest.from_json(older)
    assert read.model.files is None and read.labels is None and read.label_names == ()
    assert read.output_kinds == {} and read.dynamic == {} and read.cache_key is None
    assert read.sha256 == document["sha256"]


def test_the_cache_builds_an_entry_whose_manifest_is_damaged_again() -> None:
    first = build("digits", BuildOptions(backend="portable"))
    path = manifest_path(first.pte)
    document = json.loads(path.read_text())
    path.write_text(json.dumps(dict(document, size_bytes="many")))
    again = build("digits", BuildOptions(backend="portable"))
    assert not again.cached and again.pte == first.pte
    assert read_manifest(again.pte) == again.manifest
    assert build("digits", BuildOptions(backend="portable")).cached


def test_a_program_record_is_a_build_manifest_or_a_models_names() -> None:
    manifest, document, _ = _written(BuildOptions())
    names = ModelNames(
        input_names=("image",),
        output_names=("logits",),
        samples=("samples/0.png",),
        labels=None,
        task="classification",
        label_names=("zero", "one"),
        output_kinds={"logits": "logits"},
        examples=({"kind": "tensor", "dtype": "float32", "shape": [1, 1, 8, 8]},),
    )
    assert program_record_from_json(document) == manifest
    assert program_record_from_json(json.loads(json.dumps(names.to_json()))) == names
    assert program_record_from_json({}) is None
    assert [v.name for v in names.methods[0].inputs] == ["image"]
    assert names.planned_bytes is None and names.executorch_version is None
    with pytest.raises(ManifestError):
        program_record_from_json({"partial": True, "methods": "forward"})


def test_a_tapped_twins_manifest_reads_and_writes_back_to_the_same_text() -> None:
    from etdeploy.builder.tap_plan import TapPlan
    from etdeploy.builder.tapped import build_tapped
    from etdeploy.builder.tapped_manifest import TappedManifest

    tapped = build_tapped("digits", BuildOptions(), TapPlan())
    text = manifest_path(tapped.pte).read_text()
    read = TappedManifest.from_json(json.loads(text))
    assert read == tapped.manifest and json_text(read.to_json()) == text
    assert len(read.taps) > 0 and read.model_outputs == 1
    assert [v.name for v in read.methods[0].outputs][1:] == [f"tap:{t.node}" for t in read.taps]
    # Described as a build is, for a run of it: the same program, nothing declared.
    described = read.as_build_manifest()
    assert (described.sha256, described.methods, described.samples) == (
        read.sha256,
        read.methods,
        (),
    )
    damaged = dict(json.loads(text), untapped=["not-a-node"])
    with pytest.raises(ManifestError, match="untapped"):
        TappedManifest.from_json(damaged)

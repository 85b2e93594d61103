"""A build manifest for a program the tests lower with executorch directly
(tests/support/programs.py), which has none: the record `etdeploy build` would keep
for a program with its weights inside and nothing declared of its values. With it,
describe_program takes the program as a build's own (its pair question settled by
the manifest, nothing more read of the file)."""

from __future__ import annotations

import json
from pathlib import Path

from etdeploy.builder.manifest import BuildManifest, DelegationRecord, ModelSource


def build_manifest_of(pte: Path, sha256: str, backend: str = "xnnpack") -> BuildManifest:
    return BuildManifest(
        model=ModelSource(str(pte), "pt2", pte.stem, sha256),
        versions={},
        backend=backend,
        delegates=(),
        quantization=None,
        output_kinds={},
        dynamic={},
        methods=(),
        delegation=DelegationRecord(0, 0, 0, 0.0, {}),
        samples=(),
        labels=None,
        task=None,
        label_names=(),
        size_bytes=pte.stat().st_size,
        sha256=sha256,
        built_at="",
    )


def build_manifest_code(pte: Path, sha256: str) -> str:
    """That record as an expression for a test's subprocess (which imports json and
    BuildManifest)."""
    text = json.dumps(build_manifest_of(pte, sha256).to_json())
    return f"BuildManifest.from_json(json.loads({text!r}))"

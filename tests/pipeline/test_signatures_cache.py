"""A program's method signatures (etdeploy.program.method_signatures): read from
the .pte once, then from the cache by the program's sha256; what the cache gives is
what the file says, and an entry that cannot be read is read from the file again."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from etdeploy.digests import file_sha256
from etdeploy.paths import cache_dir
from etdeploy.program import describe_program, method_signatures
from tests.support.manifests import build_manifest_code
from tests.support.programs import BuiltPrograms


def test_the_cached_signatures_are_the_files(programs: BuiltPrograms, fresh_cache: Path) -> None:
    pte = programs.xnnpack
    digest = file_sha256(pte)
    first = method_signatures(pte, digest)
    assert (cache_dir("signatures") / f"{digest}.json").is_file()
    again = method_signatures(pte, digest)
    assert again == first
    method = first[0]
    assert method["name"] == "forward"
    assert method["inputs"][0]["tensor"]["sizes"] == [1, 3, 32, 32]
    program = describe_program(pte, digest, None, ())
    assert program.inputs[0].shape == (1, 3, 32, 32) and program.inputs[0].dtype == "float32"


def test_a_damaged_entry_is_read_from_the_program_again(
    programs: BuiltPrograms, fresh_cache: Path
) -> None:
    pte = programs.portable
    digest = file_sha256(pte)
    expected = method_signatures(pte, digest)
    entry = cache_dir("signatures") / f"{digest}.json"
    entry.write_text('{"schema": "etdeploy.signatures/1", "meth')
    assert method_signatures(pte, digest) == expected
    entry.write_text('{"schema": "something else", "methods": []}')
    assert method_signatures(pte, digest) == expected


def test_a_warm_description_does_not_import_the_pte_reader(
    programs: BuiltPrograms, fresh_cache: Path, tmp_path: Path
) -> None:
    pte = tmp_path / "model.pte"
    shutil.copy(programs.xnnpack, pte)
    digest = file_sha256(pte)
    method_signatures(pte, digest)
    code = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "from etdeploy.builder.manifest import BuildManifest\n"
        "from etdeploy.pipeline.build import describe_program\n"
        # A build's manifest (weights inside, no .ptd): nothing else is read of the file.
        f"describe_program(Path({str(pte)!r}), {digest!r}, {build_manifest_code(pte, digest)}, ())\n"
        "print(sorted(m for m in sys.modules if m.startswith('etdeploy.pte')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.strip() == "[]"

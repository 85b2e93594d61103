"""The size verdict of a run (etdeploy.pipeline.verify.size_verdict): worked out by
sizecheck once, then read back by everything it depends on; a changed limit or
delivery set judges again, a damaged entry is worked out again, and a warm verdict
imports neither sizecheck nor the .pte reader."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from etdeploy.config import Config
from etdeploy.digests import file_sha256
from etdeploy.paths import cache_dir
from etdeploy.pipeline.verify import size_verdict
from etdeploy.program import describe_program
from tests.support.manifests import build_manifest_code, build_manifest_of
from tests.support.programs import BuiltPrograms


def _program(programs: BuiltPrograms):  # type: ignore[no-untyped-def]
    pte = programs.xnnpack
    digest = file_sha256(pte)
    return describe_program(pte, digest, build_manifest_of(pte, digest), ())


def test_a_limit_changed_in_the_config_is_judged_again(
    programs: BuiltPrograms, fresh_cache: Path
) -> None:
    program = _program(programs)
    size = program.size_bytes
    roomy = size_verdict(program, Config())
    assert roomy.passed
    tight = Config(limits={"play": {"base": f"{size // 2}B"}})
    assert not size_verdict(program, tight).passed
    assert size_verdict(program, Config()).passed  # the first verdict, read back
    assert len(list(cache_dir("size-verdicts").glob("*.json"))) == 2


def test_a_damaged_verdict_is_worked_out_again(programs: BuiltPrograms, fresh_cache: Path) -> None:
    program = _program(programs)
    first = size_verdict(program, Config())
    (entry,) = cache_dir("size-verdicts").glob("*.json")
    entry.write_text('{"raw_bytes": ')
    again = size_verdict(program, Config())
    # The same verdict; only `cached` differs (the second read its measurement back).
    assert (again.passed, again.raw_bytes, again.verdicts) == (
        first.passed, first.raw_bytes, first.verdicts,
    )  # fmt: skip


def test_a_warm_verdict_imports_neither_sizecheck_nor_the_reader(
    programs: BuiltPrograms, fresh_cache: Path
) -> None:
    program = _program(programs)
    expected = size_verdict(program, Config())
    code = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "from etdeploy.builder.manifest import BuildManifest\n"
        "from etdeploy.config import Config\n"
        "from etdeploy.pipeline.build import describe_program\n"
        "from etdeploy.pipeline.verify import size_verdict\n"
        f"p = describe_program(Path({str(program.pte)!r}), {program.sha256!r}, "
        f"{build_manifest_code(program.pte, program.sha256)}, ())\n"
        "print(size_verdict(p, Config()).passed)\n"
        "print(sorted(m for m in sys.modules if m.startswith(('etdeploy.pte', "
        "'etdeploy.sizecheck'))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.splitlines() == [str(expected.passed), "[]"]

"""What a program needs from a runtime (etdeploy.preflight.needs.program_needs), kept by
the program's sha256: read back it is what the program says, a damaged entry is read
from the program again, and a warm read imports no .pte reader."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from etdeploy.digests import file_sha256
from etdeploy.paths import cache_dir
from etdeploy.preflight.needs import program_needs
from tests.support.programs import BuiltPrograms


def test_needs_read_back_are_what_the_program_says(
    programs: BuiltPrograms, fresh_cache: Path
) -> None:
    for pte in (programs.xnnpack, programs.portable):
        digest = file_sha256(pte)
        read = program_needs(pte)
        kept = program_needs(pte, sha256=digest)  # read, then kept
        again = program_needs(pte, sha256=digest)  # from the cache
        assert (cache_dir("program-needs") / f"{digest}.json").is_file()
        assert read == kept == again
        assert again.operators or again.backends


def test_a_damaged_entry_is_read_from_the_program_again(
    programs: BuiltPrograms, fresh_cache: Path
) -> None:
    pte = programs.portable
    digest = file_sha256(pte)
    expected = program_needs(pte, sha256=digest)
    (cache_dir("program-needs") / f"{digest}.json").write_text('{"schema": 3')
    assert program_needs(pte, sha256=digest) == expected


def test_a_warm_read_imports_no_pte_reader(programs: BuiltPrograms, fresh_cache: Path) -> None:
    pte = programs.xnnpack
    digest = file_sha256(pte)
    program_needs(pte, sha256=digest)
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from etdeploy.preflight.needs import program_needs\n"
        f"print(len(program_needs(Path({str(pte)!r}), sha256={digest!r}).operators))\n"
        "print(sorted(m for m in sys.modules if m.startswith('etdeploy.pte')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.splitlines()[1] == "[]"

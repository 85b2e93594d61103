"""What the language-model tests share: a run of `etdeploy run FOLDER` read back from
its --json, and the session's one correct 8da4w run on this machine, which the runs on
other devices (and the planted regressions) are held against. The tiny Llama and its
programs are the session's (tests/support/tiny_lm.py, tests/support/lm_programs.py);
each build is cached by content, so every later run of the same options reads it back."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from etdeploy.results.schema import validate_result
from tests.cli.conftest import Done, etdeploy
from tests.support.tiny_lm import TinyLm


@dataclass(frozen=True)
class LmRun:
    done: Done
    document: dict[str, Any]

    @property
    def block(self) -> dict[str, Any]:
        lm: dict[str, Any] = self.document["language_model"]
        return lm

    def comparison(self, reference: str) -> dict[str, Any]:
        return next(c for c in self.block["comparisons"] if c["reference"] == reference)

    def perplexity(self, reference: str) -> dict[str, Any]:
        return next(p for p in self.block["perplexity"] if p["reference"] == reference)

    def device_texts(self) -> list[str]:
        return [s["device_text"] for s in self.block["samples"]]


def run_lm(model: Path | str, where: Path, *args: str | Path) -> LmRun:
    """`etdeploy run MODEL ARGS --json` in a fresh process; the document checked
    against the result schema."""
    out = where / "result.json"
    done = etdeploy("run", model, *args, "--json", out, cwd=where)
    assert out.is_file(), done.stderr
    document = json.loads(out.read_text())
    validate_result(document)
    return LmRun(done, document)


@pytest.fixture(scope="session")
def int4_run(tiny_lm: TinyLm, tmp_path_factory: pytest.TempPathFactory) -> LmRun:
    """The tiny Llama built 8da4w and run on this machine (the build every other 8da4w
    run of the session reads back from the cache)."""
    return run_lm(tiny_lm.folder, tmp_path_factory.mktemp("lm-8da4w"), "--quantize", "8da4w")

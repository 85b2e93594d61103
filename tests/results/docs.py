"""Result documents for the report tests: the real ones in tests/data/results/,
and variants of them for the statuses a single local run did not produce
(a numeric failure, a size failure, a bad-input error).

The tests build and change documents (JSON, as a run or a farm writes them)
and hand the report writers what they take, typed results, through as_result:
each document is validated first, so a variant the schema rejects fails here,
not as a puzzling report.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from etdeploy.results import RunResult, validate_result

RESULTS = Path(__file__).resolve().parent.parent / "data" / "results"
# Results of the example farm spec, with the error budget and thresholds that
# decided them (tests/data/farm/results/README.md).
FARM_RESULTS = RESULTS.parent / "farm" / "results"

# A result document as json.loads gives it.
Doc = dict[str, Any]


def as_result(doc: Doc) -> RunResult:
    """The typed result of a valid document."""
    validate_result(doc)
    return RunResult.from_json(doc)


def as_results(docs: Iterable[Doc]) -> list[RunResult]:
    return [as_result(doc) for doc in docs]


def load_sample(name: str) -> Doc:
    doc: Doc = json.loads((RESULTS / f"{name}.json").read_text())
    return doc


def load_farm_sample(name: str) -> Doc:
    doc: Doc = json.loads((FARM_RESULTS / f"{name}.json").read_text())
    return doc


def on_device(doc: Doc, device: str) -> Doc:
    """The same job as if run on another device."""
    doc = copy.deepcopy(doc)
    doc["device"]["name"] = device
    if doc.get("error"):
        doc["error"]["device"] = device
    return doc


def scale_error(doc: Doc, factor: float) -> Doc:
    """`doc` with every output's error `factor` times larger (SQNR down by 20 log10 factor)."""
    doc = copy.deepcopy(doc)
    for row in [*doc["verdict"]["metrics"], doc["verdict"]["worst"]]:
        row["max_abs"] *= factor
        row["mean_abs"] *= factor
        row["tightest_atol"] *= factor
        row["sqnr_db"] -= 20 * math.log10(factor)
    return doc


def with_latency(doc: Doc, iterations_ms: list[float]) -> Doc:
    """`doc` with these iteration times, summarised as the pipeline does."""
    from etdeploy.pipeline.execute import latency_of

    doc = copy.deepcopy(doc)
    doc["latency_ms"] = latency_of(doc["latency_ms"]["load"], iterations_ms).to_json()
    return doc


def with_cpu(doc: Doc, wall_ms: list[float], cpu_ms: list[float]) -> Doc:
    """`doc` with these iterations' wall and CPU times, as the pipeline summarises them."""
    from etdeploy.pipeline.execute import latency_of

    doc = copy.deepcopy(doc)
    doc["latency_ms"] = latency_of(doc["latency_ms"]["load"], wall_ms, cpu_ms).to_json()
    return doc


def numeric_failure(doc: Doc, factor: float = 5e4) -> Doc:
    """`doc` with every output error scaled by `factor`: what a broken lowering gives."""
    doc = scale_error(doc, factor)
    for row in [*doc["verdict"]["metrics"], doc["verdict"]["worst"]]:
        row["allclose"] = False
    doc["status"], doc["exit_code"] = "failed", 1
    doc["verdict"]["passed"] = False
    doc["verdict"]["reason"] = (
        f"max abs error {doc['verdict']['worst']['max_abs']:.3g} (logits); allclose atol=0.0001 fails"
    )
    return doc


def size_failure(doc: Doc) -> Doc:
    doc = copy.deepcopy(doc)
    doc["status"], doc["exit_code"] = "failed", 1
    verdict = doc["size"]["verdicts"][0]
    verdict.update(status="over", limit_bytes=30000, headroom_bytes=-8526, excess_bytes=8526,
                   text="over by 8.53 kB")  # fmt: skip
    doc["size"]["passed"] = False
    return doc


def input_error(doc: Doc) -> Doc:
    """`doc` (an error result) as if the model, not the device, was at fault."""
    doc = copy.deepcopy(doc)
    doc["exit_code"] = 2
    doc["error"].update(
        kind="ModelError", infrastructure=False, message="torch.export failed: data-dependent control flow",
        hint="rewrite the branch with torch.cond", device=None, command=None,
    )  # fmt: skip
    doc["logs"] = []
    return doc

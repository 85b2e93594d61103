"""Sixty farm nights: a few run for real, the rest drawn from what those measured.

A generated night of a job starts from one of its real results (chosen at random)
and draws as many iterations as a real night timed from every iteration the real
nights timed for it, each iteration's wall and CPU time together: the measured
distribution, not a model of one. The real nights carry this shared machine's own
busy iterations; on top of them some nights are slow as a whole: with probability
BUSY_SHARE a job's night has its wall times slowed by a factor from BUSY_SLOWDOWN,
the range issue 38 saw from unchanged programs (+56% to +675%), and its CPU times
not (a busy host stretches the one, not the other: tests/results/test_busy_host.py
measures it). The planted latency shift (a heavier model) grows both.

Two shifts are planted, each with the recorded input that caused it:
- from LATENCY_NIGHT, digits (both devices) runs 20% slower: a new model (its
  digest changes);
- from MEMORY_NIGHT, diabetes (both devices) plans 4x the buffers: an executorch
  update (built with 1.5.1 -> 1.6.0).
"""

from __future__ import annotations

import copy
import datetime
import hashlib
import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

Doc = dict[str, Any]

NIGHTS = 60
LATENCY_NIGHT = 40
LATENCY_MODEL = "digits"
LATENCY_FACTOR = 1.2
MEMORY_NIGHT = 50
MEMORY_MODEL = "diabetes"
MEMORY_FACTOR = 4
BUSY_SHARE = 0.06
BUSY_SLOWDOWN = (1.56, 7.75)
NEW_EXECUTORCH = "1.6.0"
ITERATIONS = 0  # iterations of a generated night: 0 for as many as the real ones timed


def read_night(path: Path) -> list[Doc]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def sixty_nights(real: Sequence[list[Doc]], seed: int = 38) -> list[list[Doc]]:
    """The real nights first, then generated ones up to NIGHTS, one day apart."""
    rng = random.Random(seed)
    by_key: dict[str, list[Doc]] = {}
    for night in real:
        for doc in night:
            by_key.setdefault(doc["farm"]["key"], []).append(doc)
    first = datetime.datetime.fromisoformat(real[0][0]["started_at"].removesuffix("Z"))
    nights = [list(night) for night in real]
    for n in range(len(real), NIGHTS):
        when = first + datetime.timedelta(days=n)
        nights.append([_generated(rng, key, docs, n, when) for key, docs in sorted(by_key.items())])
    return [[_planted(doc, n) for doc in night] for n, night in enumerate(nights)]


def _generated(
    rng: random.Random, key: str, docs: list[Doc], n: int, when: datetime.datetime
) -> Doc:
    doc = copy.deepcopy(rng.choice(docs))
    # (wall, CPU) of every iteration timed; CPU None from a runner that did not measure it.
    pool = [
        pair
        for d in docs
        for pair in zip(
            d["latency_ms"]["iterations"],
            d["latency_ms"].get("cpu_iterations") or [None] * d["latency_ms"]["n"],
            strict=True,
        )
    ]
    drawn = [rng.choice(pool) for _ in range(ITERATIONS or len(doc["latency_ms"]["iterations"]))]
    times = [wall for wall, _ in drawn]
    cpu = [c for _, c in drawn if c is not None]
    if rng.random() < BUSY_SHARE:
        slow = rng.uniform(*BUSY_SLOWDOWN)
        times = [t * slow for t in times]
    set_latency(doc, times, cpu if len(cpu) == len(times) else None)
    stamp = when.strftime("%Y-%m-%dT%H:%M:%SZ")
    doc["started_at"] = stamp
    doc["job"]["id"] = f"night{n:02d}-{key}"
    for attempt in doc.get("attempts") or ():
        attempt["job_id"], attempt["started_at"] = doc["job"]["id"], stamp
    return doc


def _planted(doc: Doc, n: int) -> Doc:
    model = doc["job"]["model"]
    if model == LATENCY_MODEL and n >= LATENCY_NIGHT:
        doc = copy.deepcopy(doc)
        cpu = doc["latency_ms"].get("cpu_iterations")
        set_latency(
            doc,
            [t * LATENCY_FACTOR for t in doc["latency_ms"]["iterations"]],
            [t * LATENCY_FACTOR for t in cpu] if cpu else None,
        )
        doc["artifact"]["sha256"] = hashlib.sha256(b"digits, the new model").hexdigest()
    if model == MEMORY_MODEL and n >= MEMORY_NIGHT:
        doc = copy.deepcopy(doc)
        grow_planned(doc, MEMORY_FACTOR)
        doc["artifact"]["built_with"]["executorch"] = NEW_EXECUTORCH
    return doc


def set_latency(doc: Doc, times: list[float], cpu: list[float] | None = None) -> None:
    """The latency block of these iteration times (and their CPU times, where the
    runner measured them), as the runner's results have it."""
    import numpy as np

    ordered = sorted(times)
    trim = len(ordered) // 10
    kept = ordered[trim : len(ordered) - trim] or ordered
    doc["latency_ms"].update(
        n=len(times), min=ordered[0], max=ordered[-1], median=float(np.median(times)),
        p90=float(np.percentile(times, 90, method="nearest")),
        trimmed_mean=float(np.mean(kept)), stdev=float(np.std(times, ddof=1)) if len(times) > 1 else 0.0,
        iterations=list(times),
    )  # fmt: skip
    doc["latency_ms"].pop("cpu_median", None)
    doc["latency_ms"].pop("cpu_iterations", None)
    if cpu is not None:
        doc["latency_ms"].update(cpu_median=float(np.median(cpu)), cpu_iterations=list(cpu))


def grow_planned(doc: Doc, factor: float) -> None:
    """Planned buffers x factor (below 1 shrinks them): the planned part of each
    phase, and its peak with it."""
    memory = doc["memory"]
    grown = round(memory["planned_bytes"] * factor) - memory["planned_bytes"]
    memory["planned_bytes"] += grown
    memory["planned_buffers"] = [round(b * factor) for b in memory["planned_buffers"]]
    for phase in memory["phases"]:
        for part in phase["parts"]:
            if part["part"] == "planned":
                part["bytes"] = round(part["bytes"] * factor)
        phase["peak_bytes"] += grown
        for name in ("rss_bytes", "pss_bytes"):
            if phase.get(name) is not None:
                phase[name] += grown
    memory["peak_bytes"] += grown
    if memory.get("peak_rss_bytes") is not None:
        memory["peak_rss_bytes"] += grown


def write_night(night: list[Doc], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(doc) + "\n" for doc in night))
    return path

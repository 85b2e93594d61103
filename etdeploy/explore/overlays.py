"""What `etdeploy explore` puts on the graph: node data, per graph node.

From a result (etdeploy.result/2):
- its localization (`run --localize`): each tapped value's error against eager,
  relative to its magnitude, on the nodes computed from the tapped node; coloured
  by the tap's verdict (ok, carried, departs) and the first divergence in red;
- its profile (`run --profile`): the ETDump the result names, read with the
  ETRecord, as device time per debug handle (the exported operator a node came
  from): the CPU kernel calls of that operator, on each of its nodes; or, as a
  second overlay, the delegate call the node was lowered into, shared by the
  call's nodes (a delegate times its own kernels under names not mapped to nodes).

Node data is Model Explorer's per-node values format (model_explorer/
node_data_builder.py of ai-edge-model-explorer 0.1.34, read 2026-12-04): per graph
id, {node id: {value, bgColor}} with optional thresholds; JSON carries no infinity,
so a non-finite error is written as NON_FINITE.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from etdeploy.builder import etrecord_path
from etdeploy.errors import UsageError
from etdeploy.explore.graph import ProgramGraph, etrecord_graph, pte_graph
from etdeploy.profile import handle_times
from etdeploy.results import load_results
from etdeploy.results.result import RunResult

# Verdict colours of a tap (report/html_localization.py's, as a background).
TAP_COLOURS = {"ok": "#c8e6c9", "carried": "#ffe0b2", "departs": "#ef9a9a"}
FIRST_DIVERGENCE_COLOUR = "#e53935"
NON_FINITE = 1e30
# No "/" in a name: the page splits node_data://NAME/INDEX on it.
ERROR_OVERLAY = "etdeploy: error vs eager (relative to its magnitude)"
OPERATOR_TIME_OVERLAY = "etdeploy: device time of its operator's CPU kernels (µs, p50)"
DELEGATE_TIME_OVERLAY = "etdeploy: device time of its delegate call (µs, p50)"
# Low to high device time (Model Explorer interpolates between the stops).
TIME_GRADIENT = ((0.0, "#e3f2fd"), (1.0, "#1565c0"))


@dataclass(frozen=True)
class NodeValue:
    graph_id: str
    node_id: str
    value: float
    colour: str | None = None  # wins over the overlay's gradient


@dataclass(frozen=True)
class Overlay:
    """One node-data overlay: a value on each node it knows."""

    name: str
    values: tuple[NodeValue, ...]
    gradient: tuple[tuple[float, str], ...] = ()

    def node_data_json(self) -> str:
        """Model Explorer's node data for a model: {graph id: graph node data}."""
        graphs: dict[str, Any] = {}
        for v in self.values:
            # A sum over nodes counts a value its nodes share (a linear's kernels,
            # a delegate call) more than once: not shown.
            graph = graphs.setdefault(
                v.graph_id, {"name": self.name, "results": {}, "hideAggregatedStats": ["sum"]}
            )
            graph["results"][v.node_id] = {
                "value": v.value,
                **({"bgColor": v.colour} if v.colour else {}),
            }
            if self.gradient:
                graph["gradient"] = [{"stop": s, "bgColor": c} for s, c in self.gradient]
        return json.dumps(graphs)


@dataclass(frozen=True)
class Exploration:
    """What Model Explorer opens: the model file, its adapter, the overlays, and
    what could not be shown and why."""

    model: Path
    adapter_id: str
    overlays: tuple[Overlay, ...]
    notes: tuple[str, ...] = ()


def plan_exploration(
    result_path: Path, *, etrecord: Path | None = None, etdump: Path | None = None
) -> Exploration:
    """The graph of RESULT's program and etdeploy's overlays on it. `etrecord` and
    `etdump` override the files beside the .pte and the ETDump the result names."""
    result = _one_result(result_path)
    if result.artifact is None or result.artifact.pte is None:
        raise UsageError(
            f"{result_path} records no program (the run stopped before its build)",
            "explore the result of a run that built or took a .pte",
        )
    pte = Path(result.artifact.pte)
    record = etrecord or etrecord_path(pte)
    notes: list[str] = []
    if not record.is_file():
        if etrecord is not None:
            raise UsageError(
                f"no such ETRecord: {etrecord}", "check the path given with --etrecord"
            )
        if not pte.is_file():
            raise UsageError(
                f"the program {pte} that {result_path} ran is gone, and no ETRecord is beside it",
                "rerun the job, or give the ETRecord with --etrecord",
            )
        notes.append(
            f"no ETRecord beside {pte.name}: the graph is the program's instructions, which "
            "carry no debug handles, so etdeploy's overlays cannot be placed on it; build with "
            "`etdeploy build --etrecord`"
        )
        return Exploration(pte, pte_graph(pte).adapter_id, (), tuple(notes))
    graph = etrecord_graph(record)
    # The page colours the graph by the overlay it loaded last: the error, when
    # there is one, since the first divergence is what a localized run is about.
    overlays = [*_profile_overlays(result, graph, etdump, notes)]
    overlays += _localization_overlays(result, graph, notes)
    if not overlays and not notes:
        notes.append(
            "the run was neither localized nor profiled: the graph carries no overlay of "
            "etdeploy's; run with --localize (error vs eager) or --profile (device time)"
        )
    return Exploration(record, graph.adapter_id, tuple(overlays), tuple(notes))


def _one_result(path: Path) -> RunResult:
    results = load_results(path)
    if len(results) != 1:
        raise UsageError(
            f"{path} holds {len(results)} results; explore opens one run's program",
            "give the result of one run (etdeploy run ... --json FILE)",
        )
    return results[0]


def _localization_overlays(
    result: RunResult, graph: ProgramGraph, notes: list[str]
) -> list[Overlay]:
    localization = result.localization
    if localization is None or not localization.taps:
        return []
    first = localization.first_divergence.node if localization.first_divergence else None
    values: dict[tuple[str, str], NodeValue] = {}
    unplaced: list[str] = []
    for tap in localization.taps:
        nodes = graph.nodes_from(tap.node)
        if not nodes:
            unplaced.append(tap.node)
        colour = FIRST_DIVERGENCE_COLOUR if tap.node == first else TAP_COLOURS.get(tap.status)
        # The tapped value is the output of the last node its operator became (a
        # linear is a permute, then the addmm whose output was tapped).
        for node in nodes[-1:]:
            values[(node.graph_id, node.node_id)] = NodeValue(
                node.graph_id, node.node_id, _finite(tap.metrics.rel), colour
            )
    if unplaced:
        notes.append(
            f"{len(unplaced)} tapped value(s) have no node in this ETRecord's graph "
            f"({', '.join(unplaced[:5])}): was it built from the same model?"
        )
    return [Overlay(ERROR_OVERLAY, tuple(values.values()))] if values else []


def _profile_overlays(
    result: RunResult, graph: ProgramGraph, etdump: Path | None, notes: list[str]
) -> list[Overlay]:
    dump = etdump or (Path(result.etdump) if result.etdump else None)
    if dump is None:
        return []
    if not dump.is_file():
        notes.append(f"the ETDump {dump} is gone: no device times on the graph")
        return []
    times = handle_times(dump, graph.model)
    overlays: list[Overlay] = []
    for name, by_handle in (
        (OPERATOR_TIME_OVERLAY, times.operators),
        (DELEGATE_TIME_OVERLAY, times.delegate_calls),
    ):
        values = tuple(
            NodeValue(node.graph_id, node.node_id, round(ms * 1000, 3))
            for handle, ms in sorted(by_handle.items())
            for node in graph.nodes_with_handle(handle)
        )
        if values:
            overlays.append(Overlay(name, values, TIME_GRADIENT))
    return overlays


def _finite(value: float) -> float:
    return value if math.isfinite(value) else NON_FINITE

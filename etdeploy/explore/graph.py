"""The graph Model Explorer will show, read the way it reads it, so node data
lands on its node ids.

With an ETRecord, the graph is its edge-dialect program as the ETRecord adapter of
executorch-extension-model-explorer 0.1.1 builds it (etrecord_adapter_model_explorer/
builder/builder.py, read 2026-12-04): a node per operator, its id the edge node's
name, its `debug_handle` attribute the handle ExecuTorch's ETDump events carry. The
handles also lead back to the exported program's nodes (each edge node's
`from_node` provenance), which are the nodes `run --localize` taps and names.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from etdeploy.errors import InputError
from etdeploy.library_output import captured_library_output

ETRECORD_ADAPTER = "etrecord_adapter"  # etrecord_adapter_model_explorer/constants.py
PTE_ADAPTER = "pte_adapter_model_explorer"  # pte_adapter_model_explorer/main.py
# The extension's modules, each loaded by Model Explorer as MODULE.main: the .pte and
# ETRecord adapters, and the ETDump provider (which needs the ETRecord one first).
EXTENSION_MODULES = (
    "pte_adapter_model_explorer",
    "etrecord_adapter_model_explorer",
    "etdump_data_provider_model_explorer",
)


@dataclass(frozen=True)
class GraphNode:
    """One node of a graph Model Explorer shows."""

    graph_id: str
    node_id: str
    label: str
    debug_handle: int | None


@dataclass(frozen=True)
class ProgramGraph:
    """The model file Model Explorer opens, with which adapter, and its nodes."""

    model: Path
    adapter_id: str
    nodes: tuple[GraphNode, ...]
    # Exported-program node names (what --localize taps) by debug handle.
    sources: dict[int, frozenset[str]]

    def nodes_with_handle(self, handle: int) -> list[GraphNode]:
        return [node for node in self.nodes if node.debug_handle == handle]

    def nodes_from(self, source: str) -> list[GraphNode]:
        """The graph's nodes computed from the exported program's node `source`."""
        handles = {h for h, names in self.sources.items() if source in names}
        return [node for node in self.nodes if node.debug_handle in handles]


def etrecord_graph(etrecord: Path) -> ProgramGraph:
    """The ETRecord's graph as the ETRecord adapter shows it, and its provenance."""
    from etrecord_adapter_model_explorer.main import ETRecordAdapter
    from executorch.devtools.etrecord import parse_etrecord

    try:
        with captured_library_output():
            collections = ETRecordAdapter().convert(str(etrecord), {})["graphCollections"]
            record = parse_etrecord(str(etrecord))
    except Exception as exc:  # the devtools raise bare exceptions on a bad file
        raise InputError(
            f"cannot read the ETRecord {etrecord}: {type(exc).__name__}: {exc}",
            "give the .etrecord written beside the .pte by `etdeploy build --etrecord`",
        ) from exc
    nodes = tuple(_nodes(collections))
    return ProgramGraph(etrecord, ETRECORD_ADAPTER, nodes, _sources(record))


def pte_graph(pte: Path) -> ProgramGraph:
    """The program's instructions as the .pte adapter shows them: no debug handles,
    so nothing of etdeploy's can be placed on them."""
    return ProgramGraph(pte, PTE_ADAPTER, (), {})


def _nodes(collections: list[Any]) -> Iterator[GraphNode]:
    for collection in collections:
        for graph in collection.graphs:
            for node in graph.nodes:
                attrs = {attr.key: attr.value for attr in node.attrs}
                handle = attrs.get("debug_handle")
                yield GraphNode(
                    graph.id,
                    node.id,
                    node.label,
                    int(handle) if isinstance(handle, str) and handle.isdigit() else None,
                )


def _sources(record: Any) -> dict[int, frozenset[str]]:
    """debug handle -> the exported program's node names its edge nodes came from."""
    programs = record.edge_dialect_program
    found: dict[int, set[str]] = {}
    for program in programs.values() if isinstance(programs, dict) else [programs]:
        if program is None:
            continue
        for node in program.graph.nodes:
            handle = node.meta.get("debug_handle")
            if isinstance(handle, int):
                found.setdefault(handle, set()).update(_provenance(node.meta.get("from_node")))
    return {handle: frozenset(names) for handle, names in found.items()}


def _provenance(sources: Any) -> Iterator[str]:
    """Every node name in a from_node chain (torch.fx.traceback.NodeSource)."""
    for source in sources or ():
        name = getattr(source, "name", None)
        if isinstance(name, str):
            yield name
        yield from _provenance(getattr(source, "from_node", None))

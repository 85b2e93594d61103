"""etdeploy.explore: a result's localization and profile become Model Explorer node
data on the nodes of the ETRecord's graph, as Model Explorer's ETRecord adapter
builds it (a real localized run, its real ETRecord and ETDump, the real adapter)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from etdeploy.errors import UsageError
from etdeploy.explore import plan_exploration, require_explore_extra
from etdeploy.explore.graph import etrecord_graph
from etdeploy.explore.overlays import (
    ERROR_OVERLAY,
    FIRST_DIVERGENCE_COLOUR,
    OPERATOR_TIME_OVERLAY,
    TAP_COLOURS,
)

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def explore_extra() -> None:
    try:
        require_explore_extra()
    except UsageError as exc:
        pytest.skip(f"{exc.message}: {exc.hint}")


def test_the_error_lands_on_the_node_each_tap_computes_with_the_first_divergence_red(
    localized_result: Path,
) -> None:
    exploration = plan_exploration(localized_result)
    assert exploration.adapter_id == "etrecord_adapter" and exploration.notes == ()
    assert exploration.model.suffix == ".etrecord"
    # The error is loaded last: the page colours the graph by it.
    assert exploration.overlays[-1].name == ERROR_OVERLAY
    error = {v.node_id: v for v in exploration.overlays[-1].values}
    graph = etrecord_graph(exploration.model)
    labels = {node.node_id: node.label for node in graph.nodes}
    taps = json.loads(localized_result.read_text())["localization"]["taps"]
    # One node per tap: the node whose output was tapped (the addmm of a linear).
    assert sorted(labels[n] for n in error) == sorted(
        {"add": "aten::add", "layer_norm": "LayerNorm", "linear": "Linear", "relu": "ReLU",
         "linear_1": "Linear"}[t["node"]] for t in taps
    )  # fmt: skip
    (red,) = [v for v in error.values() if v.colour == FIRST_DIVERGENCE_COLOUR]
    assert labels[red.node_id] == "LayerNorm"
    layer_norm = next(t for t in taps if t["node"] == "layer_norm")
    assert red.value == pytest.approx(layer_norm["metrics"]["rel"]) and red.value > 0.01
    add = next(v for v in error.values() if labels[v.node_id] == "aten::add")
    assert add.value == 0.0 and add.colour == TAP_COLOURS["ok"]
    # The node data is Model Explorer's: {graph id: {name, results: {node id: value}}}.
    doc = json.loads(exploration.overlays[-1].node_data_json())
    assert set(doc) == {"forward"}
    assert doc["forward"]["results"][red.node_id] == {
        "value": red.value, "bgColor": FIRST_DIVERGENCE_COLOUR
    }  # fmt: skip


def test_device_times_come_from_the_etdump_the_result_names(localized_result: Path) -> None:
    exploration = plan_exploration(localized_result)
    (times,) = [o for o in exploration.overlays if o.name == OPERATOR_TIME_OVERLAY]
    graph = etrecord_graph(exploration.model)
    operators = [node for node in graph.nodes if node.debug_handle is not None]
    # Every operator of the portable program ran as a CPU kernel call and has a time.
    assert {v.node_id for v in times.values} == {node.node_id for node in operators}
    assert all(v.value > 0 for v in times.values)
    # A linear's two kernels (permute, addmm) are one operator: one time on both nodes.
    by_id = {v.node_id: v.value for v in times.values}
    for handle in {n.debug_handle for n in operators}:
        assert len({by_id[n.node_id] for n in operators if n.debug_handle == handle}) == 1


def test_without_an_etrecord_the_graph_is_the_programs_instructions_with_a_note(
    localized_result: Path, tmp_path: Path
) -> None:
    doc = json.loads(localized_result.read_text())
    pte = tmp_path / "chain.pte"
    pte.write_bytes(Path(doc["artifact"]["pte"]).read_bytes())
    doc["artifact"]["pte"] = str(pte)
    moved = tmp_path / "result.json"
    moved.write_text(json.dumps(doc))
    exploration = plan_exploration(moved)
    assert (exploration.model, exploration.adapter_id) == (pte, "pte_adapter_model_explorer")
    assert exploration.overlays == ()
    (note,) = exploration.notes
    assert "no ETRecord beside chain.pte" in note and "--etrecord" in note


def test_a_result_of_several_runs_or_none_is_refused(
    localized_result: Path, tmp_path: Path
) -> None:
    doc = json.loads(localized_result.read_text())
    several = tmp_path / "two.json"
    several.write_text(json.dumps([doc, doc]))
    with pytest.raises(UsageError, match="holds 2 results"):
        plan_exploration(several)
    with pytest.raises(UsageError, match="no such ETRecord"):
        plan_exploration(localized_result, etrecord=tmp_path / "nope.etrecord")


def test_a_run_neither_localized_nor_profiled_opens_with_a_note_saying_how(
    localized_result: Path, tmp_path: Path
) -> None:
    doc = json.loads(localized_result.read_text())
    for key in ("localization", "profile", "etdump"):
        doc.pop(key, None)
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps(doc))
    exploration = plan_exploration(plain)
    assert exploration.adapter_id == "etrecord_adapter" and exploration.overlays == ()
    (note,) = exploration.notes
    assert "--localize" in note and "--profile" in note

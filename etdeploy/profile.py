"""`run --profile`: where the time went, from the runner's ETDump.

The runner records an event per operator and per delegate call (ETDump); the
ETRecord kept at build time lets ExecuTorch's Inspector name each event's ATen
operators and the module they came from. Without an ETRecord the events still
have their runtime names and times.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from etdeploy.errors import InputError
from etdeploy.extras import require_build_extra
from etdeploy.library_output import captured_library_output

# Events that frame the run rather than compute in it.
_FRAMING = {"Method::execute", "Method::init", "Program::load_method"}


class ProfiledEvent(TypedDict):
    """One operator or delegate call over the profiled executions."""

    name: str
    delegated: bool
    backend: str | None
    op_types: list[str]
    module: str | None
    count: int
    p50_ms: float
    avg_ms: float
    max_ms: float
    share: float | None  # of the median execution


class OperatorTotal(TypedDict):
    """One operator kind over one execution."""

    name: str
    backend: str | None
    instances: int
    p50_ms: float  # the instances' medians summed: one execution's time in it
    share: float | None


class Executions(TypedDict):
    count: int
    median: float | None


class ProfileSummary(TypedDict):
    """What `run --profile` reports (etdeploy.results.result.Profile reads it)."""

    executions_ms: Executions
    events: list[ProfiledEvent]  # the slowest
    delegate_calls: list[ProfiledEvent]
    operators: list[OperatorTotal]
    etrecord: bool


def summarize_etdump(etdump: Path, etrecord: Path | None, *, top: int = 10) -> ProfileSummary:
    """The slowest operators and delegate calls of the profiled executions."""
    blocks = _event_blocks(etdump, etrecord)
    events: list[ProfiledEvent] = []
    execute_ms: list[float] = []
    for _block, block_events in blocks:
        for event in block_events:
            perf = event.perf_data
            if perf is None or not perf.raw:
                continue
            if event.name == "Method::execute":
                execute_ms.extend(float(x) for x in perf.raw)
            if event.name in _FRAMING:
                continue
            events.append(
                {
                    "name": event.name,
                    "delegated": bool(event.is_delegated_op),
                    "backend": event.delegate_backend_name,
                    "op_types": list(dict.fromkeys(event.op_types or [])),
                    "module": _module_of(event),
                    "count": len(perf.raw),
                    "p50_ms": float(perf.p50),
                    "avg_ms": float(perf.avg),
                    "max_ms": float(perf.max),
                    "share": None,
                }
            )
    median_execute = sorted(execute_ms)[len(execute_ms) // 2] if execute_ms else None
    for item in events:
        item["share"] = _share(item["p50_ms"], median_execute)
    ranked = sorted(events, key=lambda e: _sortable(e["p50_ms"]), reverse=True)
    return {
        "executions_ms": {"count": len(execute_ms), "median": median_execute},
        "events": ranked[:top],
        "delegate_calls": [e for e in ranked if e["name"] == DELEGATE_CALL][:top],
        "operators": operator_totals(events, median_execute),
        "etrecord": etrecord is not None,
    }


DELEGATE_CALL = "DELEGATE_CALL"
# The runtime's event for one kernel call of the program (a CPU operator).
OPERATOR_CALL = "OPERATOR_CALL"


def _event_blocks(etdump: Path, etrecord: Path | None) -> list[tuple[Any, list[Any]]]:
    """The Inspector's event blocks of an ETDump, each with its events."""
    require_build_extra("reading the ETDump (--profile)")

    # The Inspector prints progress and pandas chatter, and warns about every
    # kwarg and buffer it cannot map (16 UserWarnings for digits): the core never
    # prints, and none of it changes what the profile says.
    try:
        with captured_library_output():
            from executorch.devtools import Inspector

            inspector = Inspector(
                etdump_path=str(etdump), etrecord=str(etrecord) if etrecord else None
            )
            return [(block, list(block.events)) for block in inspector.event_blocks]
    except Exception as exc:  # the devtools raise bare exceptions on a bad file
        raise InputError(
            f"cannot read the profile {etdump.name}: {type(exc).__name__}: {exc}",
            "the ETDump and the ETRecord must come from the same build and runtime",
        ) from exc


@dataclass(frozen=True)
class HandleTimes:
    """Median device time per debug handle (a node of the ETRecord's graph), in ms.

    `operators`: the CPU kernel calls (OPERATOR_CALL events) computing the node,
    summed (a linear is a permute and an addmm). `delegate_calls`: the time of the
    whole delegate call the node was lowered into, which its other nodes share:
    a delegate times its own kernels under names ExecuTorch cannot map to nodes."""

    operators: dict[int, float]
    delegate_calls: dict[int, float]


def handle_times(etdump: Path, etrecord: Path) -> HandleTimes:
    operators: dict[int, float] = {}
    delegate_calls: dict[int, float] = {}
    for _block, events in _event_blocks(etdump, etrecord):
        for event in events:
            perf = event.perf_data
            handles = event.debug_handles
            if perf is None or not perf.raw or handles is None:
                continue
            for handle in [handles] if isinstance(handles, int) else handles:
                if event.name == OPERATOR_CALL:
                    operators[int(handle)] = operators.get(int(handle), 0.0) + float(perf.p50)
                elif event.name == DELEGATE_CALL:
                    delegate_calls[int(handle)] = float(perf.p50)
    return HandleTimes(operators, delegate_calls)


# "Convolution (NHWC, F32) IGEMM #2" -> the kernel kind without its instance number.
_INSTANCE = re.compile(r"\s+#\d+$")


def operator_label(event: ProfiledEvent) -> str:
    """What an event computes, as one name: a delegate's kernel kind (XNNPACK's
    own names), else the ATen operators the ETRecord maps it to, else the
    runtime's name for it."""
    if event["delegated"]:
        return _INSTANCE.sub("", event["name"])
    if event["op_types"]:
        return ", ".join(short_op(op) for op in event["op_types"])
    return event["name"]


def short_op(op: str) -> str:
    """aten.convolution.default -> convolution: the namespace and overload add nothing."""
    parts = op.split(".")
    return parts[1] if len(parts) == 3 and parts[0] == "aten" else op


# Beyond this many modules an event's module list is summarised: a delegate call
# over a whole network names every module in it, which no table column can hold.
MODULES_SHOWN = 3


def modules_label(module: str | None) -> str:
    """An event's modules ("conv1, fc") as a table cell: up to MODULES_SHOWN as they
    are; more as their count and the module path they all share ("21 modules in
    layer1") or, sharing none, their first and last ("21 modules: conv1 … fc")."""
    names = [name for name in (module or "").split(", ") if name]
    if not names:
        return "-"
    if len(names) <= MODULES_SHOWN:
        return ", ".join(names)
    shared: list[str] = []
    for parts in zip(*(name.split(".") for name in names), strict=False):
        if len(set(parts)) != 1:
            break
        shared.append(parts[0])
    if shared:
        return f"{len(names)} modules in {'.'.join(shared)}"
    return f"{len(names)} modules: {names[0]} … {names[-1]}"


def operator_totals(
    events: list[ProfiledEvent], median_execute: float | None
) -> list[OperatorTotal]:
    """Time per operator kind over one execution, largest first.

    A delegate call contains its kernels' events when the delegate reports them
    (XNNPACK does): then the kernels are counted and the call is not, so no time
    is counted twice. A delegate that reports no kernels is counted as its call.
    """
    with_kernels = {e["backend"] for e in events if e["delegated"]}
    totals: dict[tuple[str, str | None], OperatorTotal] = {}
    for event in events:
        if event["name"] == DELEGATE_CALL and event["backend"] in with_kernels:
            continue
        if event["p50_ms"] is None or math.isnan(event["p50_ms"]):
            continue
        key = (operator_label(event), event["backend"])
        total = totals.setdefault(
            key, {"name": key[0], "backend": key[1], "instances": 0, "p50_ms": 0.0, "share": None}
        )
        total["instances"] += 1
        total["p50_ms"] += event["p50_ms"]
    ranked = sorted(totals.values(), key=lambda t: t["p50_ms"], reverse=True)
    for total in ranked:
        total["share"] = _share(total["p50_ms"], median_execute)
    return ranked


def _share(p50_ms: float | None, median_execute: float | None) -> float | None:
    if not median_execute or p50_ms is None or math.isnan(p50_ms):
        return None
    return p50_ms / median_execute


def _sortable(value: float | None) -> float:
    return -math.inf if value is None or math.isnan(value) else value


def _module_of(event: Any) -> str | None:
    # module_hierarchy: {node: {key: (attribute path, class name)}}; the deepest
    # named attribute is the module a user would recognise (conv1, fc).
    hierarchy = getattr(event, "module_hierarchy", None) or {}
    names: list[str] = []
    for chain in hierarchy.values():
        for path, _cls in chain.values():
            if path and path not in names:
                names.append(path)
    return ", ".join(names) or None

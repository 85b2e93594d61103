"""Lower an ExportedProgram for a backend and serialise it; count what the
backend claimed; read the method signatures and the memory plan."""

from __future__ import annotations

import io
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Protocol

from etdeploy.builder.backends import Backend
from etdeploy.builder.manifest_records import DelegationRecord, MethodRecord, OpCounts, ValueRecord
from etdeploy.errors import ModelError
from etdeploy.scratch import scratch_dir

if TYPE_CHECKING:  # imported where torch and executorch are
    from executorch.exir.schema import ExecutionPlan
    from torch.export import ExportedProgram
    from torch.fx import GraphModule


class _ETRecord(Protocol):
    def save(self, path: IO[bytes]) -> None: ...


class _Serialised(Protocol):
    """What is read here of executorch's ExecutorchProgramManager."""

    def write_tensor_data_to_file(self, outdir: str) -> None: ...

    def get_etrecord(self) -> _ETRecord: ...


# Below this share of the graph a backend is mostly transfers around CPU ops.
LOW_DELEGATION_SHARE = 0.5


@dataclass
class Delegation:
    delegated: dict[str, int] = field(default_factory=dict)  # op -> count
    not_delegated: dict[str, int] = field(default_factory=dict)
    subgraphs: int = 0

    @property
    def delegated_total(self) -> int:
        return sum(self.delegated.values())

    @property
    def not_delegated_total(self) -> int:
        return sum(self.not_delegated.values())

    @property
    def share(self) -> float:
        total = self.delegated_total + self.not_delegated_total
        return self.delegated_total / total if total else 0.0

    def low_share_warning(self, backend: Backend) -> str | None:
        """The warning for a delegate that claimed little of the graph; None otherwise."""
        if not backend.backend_id or self.share >= LOW_DELEGATION_SHARE:
            return None
        total = self.delegated_total + self.not_delegated_total
        return (
            f"{backend.name} claimed only {self.share * 100:.0f}% of the graph "
            f"({self.delegated_total} of {total} ops): this behaves like a CPU model "
            "with extra transfer overhead"
        )

    def record(self) -> DelegationRecord:
        """As the manifest records it."""
        return DelegationRecord(
            delegated_nodes=self.delegated_total,
            non_delegated_nodes=self.not_delegated_total,
            delegated_subgraphs=self.subgraphs,
            share=round(self.share, 4),
            by_op={
                op: OpCounts(self.delegated.get(op, 0), self.not_delegated.get(op, 0))
                for op in sorted(set(self.delegated) | set(self.not_delegated))
            },
        )


@dataclass
class Lowered:
    buffer: bytes
    delegation: Delegation
    methods: tuple[MethodRecord, ...]
    delegates: list[str]
    # ExecuTorch's ETRecord of this lowering: what lets the Inspector map a
    # runner's ETDump events back to operators and source (`run --profile`).
    etrecord: bytes | None = None
    # The program's external data (a .ptd: FlatTensor) when its weights were
    # written outside the .pte (lower(..., external_data=...)); None otherwise.
    data: bytes | None = None


# Ops that move no data: they do not count for or against a backend's share.
_BOOKKEEPING = {"getitem", "executorch_call_delegate"}


def _op_name(target: object) -> str:
    name = str(getattr(target, "__name__", target))
    # aten.convolution.default -> convolution: the namespace and overload only add noise
    parts = name.split(".")
    return parts[-2] if len(parts) >= 3 else parts[0]


def count_delegation(graph_module: GraphModule) -> Delegation:
    result = Delegation()
    delegated: Counter[str] = Counter()
    kept: Counter[str] = Counter()
    for node in graph_module.graph.nodes:
        if node.op == "get_attr" and node.name.startswith("lowered_module"):
            result.subgraphs += 1
            lowered = getattr(graph_module, node.target)
            for inner in lowered.original_module.graph.nodes:
                if inner.op == "call_function" and _op_name(inner.target) not in _BOOKKEEPING:
                    delegated[_op_name(inner.target)] += 1
        elif node.op == "call_function":
            name = _op_name(node.target)
            if name not in _BOOKKEEPING:
                kept[name] += 1
    result.delegated = dict(delegated)
    result.not_delegated = dict(kept)
    return result


def lower(
    exported: ExportedProgram,
    backend: Backend,
    status: Callable[[str], None] | None = None,
    external_data: str | None = None,
) -> Lowered:
    """Partition and lower for `backend`, plan memory, serialise; `status` hears
    each of the three stages as it starts. With `external_data` (a name), every
    weight goes to one external data file instead of the .pte (Lowered.data)."""
    from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower

    say = status or (lambda _text: None)
    try:
        say(f"lowering to {backend.name}")
        config = None
        if external_data is not None:
            tag_delegate_constants(exported, external_data)
            # Weights left to the portable kernels: ExecutorchBackendConfig.external_constants
            # (exir/capture/_config.py, executorch 1.5.1, read 2026-12-03) takes a function
            # from a constant's placeholder to the name of the file it is written to.
            config = ExecutorchBackendConfig(external_constants=lambda _node: external_data)
        edge = to_edge_transform_and_lower(
            exported, partitioner=backend.partitioners(), generate_etrecord=True
        )
        delegation = count_delegation(edge.exported_program().graph_module)
        say("planning memory (to_executorch)")
        program = edge.to_executorch(config)
        say("serialising the program")
        buffer = bytes(program.buffer)
        data = _external_data(program, external_data) if external_data is not None else None
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ModelError(
            f"lowering to {backend.name} failed: {type(exc).__name__}: {first[:200]}",
            "try --backend portable to see whether the model itself serialises; "
            "--verbose shows the full trace",
            log=str(exc),
        ) from exc
    plan = program.executorch_program.execution_plan
    methods = tuple(_method_info(p) for p in plan)
    delegates = sorted({d.id for p in plan for d in p.delegates})
    return Lowered(buffer, delegation, methods, delegates, _etrecord_bytes(program), data)


def tag_delegate_constants(exported: ExportedProgram, name: str) -> None:
    """Mark the weights of `exported` (parameters, constant buffers, lifted constants) for
    the external data file `name`, as a delegate reads it when it serialises them.

    How XNNPACK spells it in executorch 1.5.1 (read 2026-12-03): its node visitor writes a
    constant to the named data store under the tag in the constant node's
    meta["custom"]["delegate_constant_tag"] (backends/xnnpack/operators/node_visitor.py);
    upstream's exir/passes/external_constants_pass.py sets that tag on an unlifted module's
    get_attr nodes and exports again. Setting it on the lifted placeholders of the exported
    program does the same without a second torch.export (the partitioner keeps a
    placeholder's meta on the delegate's copy of it), for a saved .pt2 and a quantized
    program alike.
    """
    from torch.export.graph_signature import InputKind

    signature = exported.graph_signature
    mutated = set(signature.buffers_to_mutate.values())
    weights = {
        spec.arg.name
        for spec in signature.input_specs
        if spec.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR)
        and spec.target not in mutated
    }
    for node in exported.graph.nodes:
        if node.op == "placeholder" and node.name in weights:
            node.meta.setdefault("custom", {})["delegate_constant_tag"] = name


def _external_data(program: _Serialised, name: str) -> bytes | None:
    """The external data file `program` serialised under `name`, through the public writer
    (ExecutorchProgramManager.write_tensor_data_to_file writes NAME.ptd into a directory);
    None when the program has no weights to put there."""
    from pathlib import Path

    with scratch_dir("ptd") as tmp:
        try:
            program.write_tensor_data_to_file(str(tmp))
        except AssertionError:  # no data files at all (asserted inside executorch)
            return None
        written = sorted(Path(tmp).glob("*.ptd"))
        if not written:
            return None
        if [p.name for p in written] != [f"{name}.ptd"]:
            raise RuntimeError(
                f"expected one data file {name}.ptd, executorch wrote "
                + ", ".join(p.name for p in written)
            )
        return written[0].read_bytes()


def _etrecord_bytes(program: _Serialised) -> bytes | None:
    # Profiling is a bonus: a lowering whose record cannot be written still builds.
    try:
        record = io.BytesIO()
        program.get_etrecord().save(record)
    except Exception:  # the devtools raise bare RuntimeError/AssertionError
        return None
    return record.getvalue()


def _method_info(plan: ExecutionPlan) -> MethodRecord:
    """The method's values (named input_0, output_0, ... until the model names them)
    and its memory plan."""
    from executorch.exir.schema import Tensor

    def describe(index: int, name: str) -> ValueRecord:
        value = plan.values[index].val
        if isinstance(value, Tensor):
            return ValueRecord(
                "tensor",
                name,
                dtype=_scalar_name(value.scalar_type),
                shape=tuple(value.sizes),
                dim_order=tuple(value.dim_order),
            )
        return ValueRecord(type(value).__name__.lower(), name)

    return MethodRecord(
        plan.name,
        tuple(describe(index, f"input_{i}") for i, index in enumerate(plan.inputs)),
        tuple(describe(index, f"output_{i}") for i, index in enumerate(plan.outputs)),
        # Buffer 0 is reserved by the memory planner; the rest is the arena a device provides.
        planned_buffers=tuple(plan.non_const_buffer_sizes),
        planned_bytes=int(sum(plan.non_const_buffer_sizes)),
    )


_SCALAR_NAMES = {
    "BYTE": "uint8",
    "CHAR": "int8",
    "SHORT": "int16",
    "INT": "int32",
    "LONG": "int64",
    "HALF": "float16",
    "FLOAT": "float32",
    "DOUBLE": "float64",
    "BOOL": "bool",
    "BFLOAT16": "bfloat16",
}


def _scalar_name(scalar_type: object) -> str:
    name = str(getattr(scalar_type, "name", scalar_type))
    return _SCALAR_NAMES.get(name, name.lower())

"""What a program calls, read without torch: each method's operator calls with
their tensors' dtypes and dim orders (what the runtime builds a kernel key
from), and the delegates it needs. Preflight compares them with the runner's
registries; constants and delegate blobs are never read.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from etdeploy.pte._generated import program_generated as fb
from etdeploy.pte.reader import evalue_tensor, fb_str, program_root


@dataclass(frozen=True)
class OperatorCall:
    """One KernelCall instruction: the operator ("aten::add.out") and each tensor
    argument's ScalarType code and dim order, in argument order: what the runtime
    builds the kernel key from when it loads the method (Method::resolve_operator)."""

    method: str
    operator: str
    tensors: tuple[tuple[int, tuple[int, ...]], ...]


@dataclass(frozen=True)
class ProgramCalls:
    file_identifier: str
    schema_version: int
    calls: tuple[OperatorCall, ...]
    # (method, backend id) for each BackendDelegate of each execution plan.
    delegates: tuple[tuple[str, str], ...]


def read_program_calls(path: str | os.PathLike[str]) -> ProgramCalls:
    """The operators each method's instructions call and the delegates it needs,
    without reading constants or delegate blobs; UsageError if not a program."""
    with program_root(path) as (ident, program):
        calls: list[OperatorCall] = []
        delegates: list[tuple[str, str]] = []
        for pi in range(program.ExecutionPlanLength()):
            plan = program.ExecutionPlan(pi)
            method = fb_str(plan.Name())
            calls += _kernel_calls(plan, method)
            delegates += [(method, fb_str(plan.Delegates(j).Id())) for j in range(plan.DelegatesLength())]  # fmt: skip
        return ProgramCalls(ident, program.Version(), tuple(calls), tuple(delegates))


def _kernel_calls(plan: fb.ExecutionPlan, method: str) -> list[OperatorCall]:
    names = []
    for j in range(plan.OperatorsLength()):
        op = plan.Operators(j)
        overload = fb_str(op.Overload())
        names.append(fb_str(op.Name()) + (f".{overload}" if overload else ""))
    tensors: dict[int, tuple[int, tuple[int, ...]] | None] = {}

    def meta(index: int) -> tuple[int, tuple[int, ...]] | None:
        if index not in tensors:
            t = evalue_tensor(plan.Values(index))
            # A tensor without a dim order is contiguous (the runtime's default).
            order = (
                () if t is None else tuple(int(t.DimOrder(d)) for d in range(t.DimOrderLength()))
            )
            tensors[index] = None if t is None else (t.ScalarType(), order or tuple(range(t.SizesLength())))  # fmt: skip
        return tensors[index]

    calls = []
    for c in range(plan.ChainsLength()):
        chain = plan.Chains(c)
        for i in range(chain.InstructionsLength()):
            instruction = chain.Instructions(i)
            if instruction.InstrArgsType() != fb.InstructionArguments.KernelCall:
                continue
            table = instruction.InstrArgs()
            call = fb.KernelCall()
            call.Init(table.Bytes, table.Pos)
            metas = [m for a in range(call.ArgsLength()) if (m := meta(call.Args(a))) is not None]
            calls.append(OperatorCall(method, names[call.OpIndex()], tuple(metas)))
    return calls

"""Each method's signature (its inputs' and outputs' kinds, dtypes and shapes), read from
the program flatbuffer alone: no segment, constant or delegate blob is read or parsed. What
a warm `etdeploy run` needs of a program it built (pipeline/build.py); the full layout
(read_pte) is for sizing and inspecting it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from etdeploy.pte.layout import MethodValue
from etdeploy.pte.reader import fb_str, method_value, program_root


@dataclass(frozen=True)
class MethodSignature:
    name: str
    inputs: tuple[MethodValue, ...]
    outputs: tuple[MethodValue, ...]


def read_signatures(path: str | os.PathLike[str]) -> tuple[MethodSignature, ...]:
    """Each method's inputs and outputs, from the program flatbuffer alone: no segment,
    constant or delegate blob is read or parsed (what a warm run needs of a program it
    built). UsageError if the file is not a program."""
    with program_root(path) as (_ident, program):
        signatures = []
        for pi in range(program.ExecutionPlanLength()):
            plan = program.ExecutionPlan(pi)
            signatures.append(
                MethodSignature(
                    fb_str(plan.Name()),
                    tuple(method_value(plan, plan.Inputs(j)) for j in range(plan.InputsLength())),
                    tuple(method_value(plan, plan.Outputs(j)) for j in range(plan.OutputsLength())),
                )
            )  # fmt: skip
        return tuple(signatures)

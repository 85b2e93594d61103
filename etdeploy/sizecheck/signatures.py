"""Each method's signature (its inputs' and outputs' kinds, dtypes and shapes), read from
the program flatbuffer alone: no segment, constant or delegate blob is read or parsed. What
a warm `etdeploy run` needs of a program it built (pipeline/build.py); the full layout
(read_pte) is for sizing and inspecting it.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

from etdeploy.sizecheck._generated import program_generated as fb
from etdeploy.sizecheck.pte import (
    MethodValue,
    bad_file,
    check_readable_file,
    fb_str,
    mapped,
    method_value,
)


@dataclass(frozen=True)
class MethodSignature:
    name: str
    inputs: tuple[MethodValue, ...]
    outputs: tuple[MethodValue, ...]


def read_signatures(path: str | os.PathLike[str]) -> tuple[MethodSignature, ...]:
    """Each method's inputs and outputs, from the program flatbuffer alone: no segment,
    constant or delegate blob is read or parsed (what a warm run needs of a program it
    built). UsageError if the file is not a program."""
    p = Path(path)
    size = check_readable_file(p).st_size
    if size < 8:
        raise bad_file(p, f"truncated or not a program: {size} bytes, a .pte has at least 8")
    with mapped(p, size) as mm:
        ident = bytes(mm[4:8]).decode("ascii", errors="replace")
        if not (ident.startswith("ET") and ident[2:4].isalnum()):
            raise bad_file(p, f"not an ExecuTorch program (file identifier {ident!r}, want 'ET..')")
        try:
            program = fb.Program.GetRootAs(mm, 0)
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
        except (struct.error, IndexError, ValueError, UnicodeDecodeError, OverflowError) as exc:
            raise bad_file(
                p,
                f"truncated or corrupt program flatbuffer ({type(exc).__name__})",
                "the file was cut short or damaged; rebuild or copy it again",
            ) from None

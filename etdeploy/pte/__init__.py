"""The torch-free reader of ExecuTorch programs (.pte), the one place that knows the file.

- reader: the file's layout (header, segments, methods, delegates, constants) read with
  the `flatbuffers` package and flatc-generated readers (_generated), mapped, never loaded;
  and each method's signature (inputs and outputs) from the program flatbuffer alone,
  what a warm run needs.
- layout: the plain records the reader returns.
- calls: each method's operator calls and the delegates it needs (what preflight compares
  with a runner's registries).

Size checks (etdeploy.sizecheck), preflight, the builder, doctor and the pipeline read
programs through here; nothing here imports torch or executorch.
"""

from __future__ import annotations

from etdeploy.pte.calls import OperatorCall, ProgramCalls, read_program_calls
from etdeploy.pte.layout import MethodSignature, PteLayout
from etdeploy.pte.reader import read_pte, read_signatures

__all__ = [
    "MethodSignature",
    "OperatorCall",
    "ProgramCalls",
    "PteLayout",
    "read_program_calls",
    "read_pte",
    "read_signatures",
]

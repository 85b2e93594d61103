"""What a program needs from a runtime, read without torch: the operators its
instructions call (with the kernel keys the runtime will look up), the delegates
its methods need, and the ExecuTorch that built it; and how that version pairs
with a runtime's under ExecuTorch's compatibility policy."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from etdeploy.atomic import keep_json, read_json_object
from etdeploy.errors import EtdeployError, InputError
from etdeploy.paths import cache_dir

if TYPE_CHECKING:
    from etdeploy.builder.manifest import ProgramRecord

# ExecuTorch's runtime compatibility policy, runtime/COMPATIBILITY.md on the main
# branch of github.com/pytorch/executorch (the canonical copy; read 2026-12-03):
# a .pte from a release loads in a runtime of that release and of at least the
# next non-patch (minor or major) release; nothing is promised beyond that, nor
# for a .pte newer than the runtime (forward compatibility). Neither is said to
# fail, so both are warnings; what a newer program can really break (an operator
# or delegate the runtime lacks) is checked by name beside them.
POLICY_URL = "https://github.com/pytorch/executorch/blob/main/runtime/COMPATIBILITY.md"
POLICY_READ = "2026-12-03"

_NUMPY_NAMES = {
    "byte": "uint8", "char": "int8", "short": "int16", "int": "int32", "long": "int64",
    "half": "float16", "float": "float32", "double": "float64", "bfloat16": "bfloat16",
}  # fmt: skip
# EXECUTORCH_SELECT_OPS_LIST on a command line; longer lists name the .pte instead.
_SELECT_LIST_LIMIT = 400


@dataclass(frozen=True)
class OperatorNeed:
    """An operator the program calls, and the kernel keys of its calls (one per
    distinct set of tensor dtypes and dim orders)."""

    name: str
    methods: tuple[str, ...]
    kernel_keys: tuple[str, ...]


@dataclass(frozen=True)
class ProgramNeeds:
    pte: Path
    file_identifier: str
    schema_version: int
    operators: tuple[OperatorNeed, ...]
    # backend id -> the methods that delegate to it
    backends: dict[str, tuple[str, ...]]
    # The executorch that built it, from its manifest; None without one.
    executorch_version: str | None

    @property
    def selective_build_ops(self) -> str:
        """The operator list ExecuTorch's selective build takes
        (-DEXECUTORCH_SELECT_OPS_LIST, docs/source/kernel-library-selective-build.md)."""
        return ",".join(sorted(op.name for op in self.operators))

    def selective_build_flag(self) -> str:
        ops = self.selective_build_ops
        if len(ops) <= _SELECT_LIST_LIMIT:
            return f'-DEXECUTORCH_SELECT_OPS_LIST="{ops}"'
        return f"-DEXECUTORCH_SELECT_OPS_MODEL={self.pte}"

    def to_json(self) -> dict[str, Any]:
        return {
            "pte": str(self.pte),
            "file_identifier": self.file_identifier,
            "schema_version": self.schema_version,
            "executorch_version": self.executorch_version,
            "operators": [op.name for op in self.operators],
            "backends": sorted(self.backends),
            "selective_build_ops": self.selective_build_ops,
        }


def kernel_key(tensors: Iterable[tuple[int, tuple[int, ...]]]) -> str:
    """The runtime's kernel key for a call's tensor arguments:
    "v1/<dtype>;<dim order>|..." (make_kernel_key_string in
    runtime/kernel/operator_registry.cpp, executorch 1.5; "" when no tensor)."""
    parts = [f"{dtype};{','.join(map(str, order))}" for dtype, order in tensors]
    return "v1/" + "|".join(parts) if parts else ""


def key_tensors(key: str) -> tuple[str, ...]:
    """The tensors a kernel key names, each as dtype and dim order ("float32 (0,1)")."""
    from etdeploy.pte.reader import scalar_type_name

    if not key.startswith("v1/"):
        return ()
    described = []
    for meta in key[3:].split("|"):
        code, _, order = meta.partition(";")
        name = scalar_type_name(int(code)) if code.isdigit() else code
        described.append(f"{_NUMPY_NAMES.get(name, name)} ({order})")
    return tuple(described)


def program_needs(
    pte: Path, manifest: ProgramRecord | None = None, *, sha256: str | None = None
) -> ProgramNeeds:
    """What `pte` needs from a runtime, torch-free; InputError if it is not a program.
    With the program's `sha256`, what its instructions call is kept in the cache by it
    (_calls_of): a warm run reads a small JSON instead of walking the program."""
    identifier, schema, operators, backends = _calls_of(pte, sha256)
    built = manifest.executorch_version if manifest is not None else None
    return ProgramNeeds(
        pte=Path(pte),
        file_identifier=identifier,
        schema_version=schema,
        operators=tuple(OperatorNeed(name, tuple(m), tuple(k)) for name, m, k in operators),
        backends={name: tuple(m) for name, m in backends.items()},
        executorch_version=str(built) if built else None,
    )


# The program-needs cache's schema: bump it when what _calls_of keeps changes.
NEEDS_SCHEMA = "etdeploy.program-needs/1"
_Calls = tuple[str, int, list[tuple[str, list[str], list[str]]], dict[str, list[str]]]


def _calls_of(pte: Path, sha256: str | None) -> _Calls:
    """The program's file identifier, schema version, each operator it calls (with the
    methods calling it and their kernel keys) and each backend it delegates to (with
    the methods that do): from the cache by `sha256`, else read from the program."""
    cached = cache_dir("program-needs") / f"{sha256}.json" if sha256 else None
    doc = read_json_object(cached) if cached is not None else None
    if doc is not None and doc.get("schema") == NEEDS_SCHEMA:
        try:
            operators = [(str(n), list(m), list(k)) for n, m, k in doc["operators"]]
            return (
                doc["file_identifier"],
                int(doc["schema_version"]),
                operators,
                dict(doc["backends"]),
            )
        except (KeyError, TypeError, ValueError):
            pass  # not what this etdeploy keeps: read from the program below
    from etdeploy.pte.calls import read_program_calls

    try:
        calls = read_program_calls(pte)
    except EtdeployError as exc:
        raise InputError(exc.message, exc.hint) from exc
    methods: dict[str, dict[str, None]] = {}
    keys: dict[str, dict[str, None]] = {}
    for call in calls.calls:
        methods.setdefault(call.operator, {})[call.method] = None
        keys.setdefault(call.operator, {})[kernel_key(call.tensors)] = None
    delegating: dict[str, dict[str, None]] = {}
    for method, backend in calls.delegates:
        delegating.setdefault(backend, {})[method] = None
    found: _Calls = (
        calls.file_identifier,
        calls.schema_version,
        [(name, list(methods[name]), list(keys[name])) for name in methods],
        {name: list(m) for name, m in delegating.items()},
    )
    if cached is not None:
        keep_json(cached, {"schema": NEEDS_SCHEMA, "file_identifier": found[0],
                           "schema_version": found[1], "operators": found[2],
                           "backends": found[3]})  # fmt: skip
    return found


# -- the version pairing ------------------------------------------------------------------


@dataclass(frozen=True)
class VersionVerdict:
    status: str  # ok | warn | unknown
    program: str | None
    runtime: str | None
    text: str

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "program": self.program,
            "runtime": self.runtime,
            "text": self.text,
            "policy": POLICY_URL,
            "policy_read": POLICY_READ,
        }


def _release(version: str) -> tuple[int, int, int] | None:
    match = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", version)
    if match is None:
        return None
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)


def version_verdict(program: str | None, runtime: str | None) -> VersionVerdict:
    """A .pte's executorch against a runtime's, by ExecuTorch's compatibility
    policy (POLICY_URL, read POLICY_READ)."""
    built, runs = _release(program or ""), _release(runtime or "")
    if built is None or runs is None:
        missing = "the .pte's (no manifest beside it)" if built is None else "the runner's"
        return VersionVerdict(
            "unknown",
            program,
            runtime,
            f"{missing} executorch version is unknown; "
            "operators and backends were still checked by name",
        )
    pair = f".pte built with executorch {program}, runner built against {runtime}"
    if built[:2] == runs[:2] and built[2] <= runs[2]:
        return VersionVerdict("ok", program, runtime, f"{pair}: the same release")
    if built > runs:
        return VersionVerdict(
            "warn",
            program,
            runtime,
            f"{pair}: a program newer than its runtime "
            "is not promised to load (ExecuTorch makes no forward-compatibility "
            f"promise, {POLICY_URL}, read {POLICY_READ})",
        )
    if (built[0], built[1] + 1) == runs[:2]:
        return VersionVerdict(
            "ok",
            program,
            runtime,
            f"{pair}: the next release after the program's, "
            f"which ExecuTorch promises loads it ({POLICY_URL}, read {POLICY_READ})",
        )
    if runs[0] == built[0] + 1 and runs[1] == 0:
        # Promised only when the program's release was the last of its major one,
        # which a version number cannot tell.
        return VersionVerdict(
            "warn",
            program,
            runtime,
            f"{pair}: the next major release, which ExecuTorch promises loads the program "
            f"only if {built[0]}.{built[1]} was the last {built[0]}.x release ({POLICY_URL}, "
            f"read {POLICY_READ}); rebuild the .pte with the runner's executorch to be sure",
        )
    return VersionVerdict(
        "warn",
        program,
        runtime,
        f"{pair}: more than one release apart, beyond "
        "what ExecuTorch promises (a program loads in its own release and the "
        f"next; {POLICY_URL}, read {POLICY_READ}); rebuild the .pte with the "
        "runner's executorch",
    )

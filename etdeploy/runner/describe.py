"""The runner's self-description: `etdeploy_runner --describe` prints what it
can run (its and ExecuTorch's versions, bundle kind and ABI, every registered
kernel with its key, every backend) as JSON; preflight reads it here.
Upstream's executor_runner has no such flag, which `describe_unsupported` tells."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

from etdeploy.errors import RunnerError

# The schema tag of our runner's --describe document (android_harness/src/describe.cpp).
DESCRIBE_SCHEMA = "etdeploy.runner_describe/1"


@dataclass(frozen=True)
class RunnerDescription:
    """What a runner can run, from its --describe document: the ExecuTorch it was
    built against, its operator registry and its registered backends."""

    runner_version: str
    executorch_version: str
    kind: str  # host, android-ndk, cross-linux, ...
    abi: str
    kernel_libraries: tuple[str, ...]
    backend_libraries: tuple[str, ...]
    # Operator ("aten::add.out") -> its kernels' keys; None is a fallback kernel,
    # which serves any dtype; a key ("v1/6;0,1|6;0,1") serves only those dtypes
    # and dim orders (runtime/kernel/operator_registry.h).
    kernels: dict[str, frozenset[str | None]]
    backends: tuple[str, ...]
    # What it can do besides running a method on input files: "generate" (a causal
    # LM's greedy generation and teacher-forced logits, etdeploy.runner.generation).
    # Empty for a runner that predates the list.
    capabilities: tuple[str, ...] = ()

    def can(self, capability: str) -> bool:
        return capability in self.capabilities

    def to_json(self) -> dict[str, Any]:
        """The --describe document this was read from (its schema)."""
        return {
            "schema": DESCRIBE_SCHEMA,
            "runner_version": self.runner_version,
            "executorch_version": self.executorch_version,
            "bundle": {
                "kind": self.kind,
                "abi": self.abi,
                "kernel_libraries": list(self.kernel_libraries),
                "backend_libraries": list(self.backend_libraries),
            },
            "kernels": [
                {"op": op, "key": key}
                for op in sorted(self.kernels)
                for key in sorted(self.kernels[op], key=lambda k: (k is not None, k or ""))
            ],
            "backends": list(self.backends),
            "capabilities": list(self.capabilities),
        }


def describe_argv(executable: str | PurePath) -> list[str]:
    return [executable.as_posix() if isinstance(executable, PurePath) else executable, "--describe"]


# A runner that does not know --describe: ours before it (our flag parser) or
# upstream's executor_runner (gflags: "ERROR: unknown command line flag 'describe'").
_NO_DESCRIBE = re.compile(r"unknown (?:command line )?flag '?-{0,2}describe")


def describe_unsupported(stdout: str, stderr: str) -> bool:
    """Whether a failed --describe means the runner lacks the flag (not that it broke)."""
    return _NO_DESCRIBE.search(f"{stdout}\n{stderr}") is not None


def _bad_description(problem: str) -> RunnerError:
    return RunnerError(
        f"runner --describe output is not usable: {problem}",
        "the runner and etdeploy disagree on the describe format; rebuild the runner "
        "with `etdeploy runner build --rebuild`",
    )


def parse_describe(text: str | bytes | dict[str, Any]) -> RunnerDescription:
    """Read our runner's --describe document (the JSON on its stdout, or parsed)."""
    try:
        raw = text if isinstance(text, dict) else json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise _bad_description(f"not JSON ({exc})") from exc
    if not isinstance(raw, dict) or raw.get("schema") != DESCRIBE_SCHEMA:
        schema = raw.get("schema") if isinstance(raw, dict) else None
        raise _bad_description(f"schema is {schema!r}, expected {DESCRIBE_SCHEMA!r}")
    found_bundle = raw.get("bundle")
    bundle = found_bundle if isinstance(found_bundle, dict) else {}
    entries = raw.get("kernels")
    backends = raw.get("backends")
    if not isinstance(entries, list) or not isinstance(backends, list):
        raise _bad_description("kernels and backends must be lists")
    kernels: dict[str, set[str | None]] = {}
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("op"), str):
            raise _bad_description(f"a kernel entry has no operator name: {entry!r}")
        key = entry.get("key")
        kernels.setdefault(entry["op"], set()).add(key if isinstance(key, str) else None)
    return RunnerDescription(
        runner_version=str(raw.get("runner_version", "")),
        executorch_version=str(raw.get("executorch_version", "")),
        kind=str(bundle.get("kind", "")),
        abi=str(bundle.get("abi", "")),
        kernel_libraries=tuple(str(x) for x in bundle.get("kernel_libraries", ())),
        backend_libraries=tuple(str(x) for x in bundle.get("backend_libraries", ())),
        kernels={op: frozenset(keys) for op, keys in kernels.items()},
        backends=tuple(str(b) for b in backends),
        capabilities=tuple(str(c) for c in raw.get("capabilities") or () if isinstance(c, str)),
    )

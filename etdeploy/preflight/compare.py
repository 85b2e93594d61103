"""The comparison of a program's needs with a runner's description, the report
it makes, and, for what is missing, which library in the installed executorch
provides it and how to build a runner with it."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

from etdeploy.errors import EtdeployError, InputError
from etdeploy.jsonvalue import JsonObject
from etdeploy.preflight.needs import (
    ProgramNeeds,
    VersionVerdict,
    key_tensors,
    version_verdict,
)
from etdeploy.runner.describe import RunnerDescription
from etdeploy.runner_build import executorch_package_dir

# The backend id a delegate carries -> `etdeploy runner build --backends` name
# (the ids are the BackendDetails class names in the executorch 1.5.1 wheel).
BACKEND_OPTIONS = {
    "XnnpackBackend": "xnnpack",
    "OpenvinoBackend": "openvino",
    "QnnBackend": "qnn",
    "CoreMLBackend": "coreml",
    "MLXBackend": "mlx",
    "VulkanBackend": "vulkan",
}


# -- who provides a missing kernel or backend -------------------------------------------------


@dataclass(frozen=True)
class KernelProvider:
    """A library in the installed executorch that registers an operator."""

    library: str  # its path below the executorch package
    component: str  # quantized, optimized, llm, runtime
    # Whether a runner can link it: lib/*.so can; an export-time plugin that
    # needs libtorch and Python cannot.
    linkable: bool

    def to_json(self) -> JsonObject:
        return {"library": self.library, "component": self.component, "linkable": self.linkable}


@functools.lru_cache(maxsize=1)
def _wheel_libraries() -> tuple[tuple[str, str, bool, Path], ...]:
    """(relative path, component, linkable, path) of every library in the
    installed executorch that can register kernels (read 2026-12-03 for 1.5.1:
    lib/libexecutorch*.so, and the export-time plugins *_aot_lib.so)."""
    try:
        package = executorch_package_dir()
    except EtdeployError:
        return ()
    found = []
    for path in sorted([*package.glob("lib/libexecutorch*"), *package.rglob("*_aot_lib.*")]):
        if path.suffix not in (".so", ".dylib"):
            continue
        stem = path.name.split(".")[0]
        if path.parent.name == "lib" and stem.startswith("libexecutorch"):
            if stem == "libexecutorch":
                component = "runtime"  # the primitive operators
            else:
                component = stem.removeprefix("libexecutorch_").removeprefix("kernels_")
            found.append((path.relative_to(package).as_posix(), component, True, path))
        else:
            # libcustom_ops_aot_lib (the LLM ops), libquantized_ops_aot_lib: they
            # link libtorch and the Python extension (their NEEDED entries).
            name = stem.removeprefix("lib").removesuffix("_aot_lib").removesuffix("_ops")
            component = "llm" if name == "custom" else name
            found.append((path.relative_to(package).as_posix(), component, False, path))
    return tuple(found)


@functools.lru_cache(maxsize=1)
def _library_bytes() -> tuple[tuple[str, str, bool, bytes], ...]:
    out = []
    for relative, component, linkable, path in _wheel_libraries():
        try:
            out.append((relative, component, linkable, path.read_bytes()))
        except OSError:
            continue
    return tuple(out)


def kernel_providers(operator: str) -> list[KernelProvider]:
    """The libraries in the installed executorch whose registration tables name
    `operator` (a kernel's name is a NUL-terminated string in the library that
    registers it, not always NUL-preceded); linkable ones first."""
    name = re.compile(rb"(?<![A-Za-z0-9_:.])" + re.escape(operator.encode()) + rb"\0")
    providers = [
        KernelProvider(relative, component, linkable)
        for relative, component, linkable, data in _library_bytes()
        if name.search(data)
    ]
    return sorted(providers, key=lambda p: not p.linkable)


def backend_in_wheel(option: str) -> bool:
    """Whether the installed executorch ships backend `option`'s runtime library."""
    return any(
        relative.startswith(f"lib/libexecutorch_backend_{option}.")
        for relative, *_ in _wheel_libraries()
    )


# -- the comparison -------------------------------------------------------------------------


@dataclass(frozen=True)
class MissingOperator:
    name: str
    methods: tuple[str, ...]
    # When the runner has kernels for this operator, but each only for certain
    # dtypes and dim orders: the tensors of the calls none serves, and what the
    # runner's kernels take. Both empty when it has no kernel for it at all.
    tensors: tuple[tuple[str, ...], ...]
    available: tuple[tuple[str, ...], ...]
    providers: tuple[KernelProvider, ...]

    def to_json(self) -> JsonObject:
        return {
            "name": self.name,
            "methods": list(self.methods),
            "tensors": [list(t) for t in self.tensors],
            "available": [list(t) for t in self.available],
            "providers": [p.to_json() for p in self.providers],
        }


@dataclass(frozen=True)
class MissingBackend:
    name: str
    methods: tuple[str, ...]
    option: str | None  # `--backends` name
    in_wheel: bool

    def to_json(self) -> JsonObject:
        return {
            "name": self.name,
            "methods": list(self.methods),
            "option": self.option,
            "in_wheel": self.in_wheel,
        }


@dataclass(frozen=True)
class Finding:
    """One line of a report: what was compared, ok | warn | fail, and a hint."""

    subject: str
    status: str
    detail: str
    hint: str


@dataclass(frozen=True)
class PreflightReport:
    """The comparison, or why there was none. status: passed | failed | skipped."""

    status: str
    device: str
    needs: ProgramNeeds | None = None
    runner: RunnerDescription | None = None
    missing_operators: tuple[MissingOperator, ...] = ()
    missing_backends: tuple[MissingBackend, ...] = ()
    version: VersionVerdict | None = None
    # Where the description came from: cache, host (run here), device (run there).
    source: str | None = None
    seconds: float = 0.0
    notes: tuple[str, ...] = ()

    @property
    def warnings(self) -> list[str]:
        """What a run result carries: a skipped preflight and an unpromised version pair."""
        found = [n for n in self.notes if self.status == "skipped"]
        if self.version is not None and self.version.status == "warn":
            found.append(self.version.text)
        return found

    @property
    def reason(self) -> str:
        if self.status == "skipped":
            return "; ".join(self.notes) or "preflight skipped"
        if self.status == "passed":
            assert self.needs is not None
            return (
                f"the runner for {self.device} has every operator ({len(self.needs.operators)}) "
                f"and backend ({len(self.needs.backends)}) the program needs"
            )
        parts = []
        if self.missing_operators:
            names = ", ".join(m.name + _dtype_text(m) for m in self.missing_operators)
            parts.append(f"operator(s) {names}")
        if self.missing_backends:
            parts.append(f"backend(s) {', '.join(m.name for m in self.missing_backends)}")
        return f"the runner for {self.device} lacks {' and '.join(parts)}"

    def hint(self) -> str:
        """How to get a runner that has what is missing."""
        hints = [operator_hint(m, self.needs) for m in self.missing_operators]
        hints += [backend_hint(m) for m in self.missing_backends]
        hints = list(dict.fromkeys(h for h in hints if h))
        return "; ".join(hints) + (
            "; then run with --runner DIR (the directory `etdeploy runner build` prints)"
            if any("etdeploy runner build" in h for h in hints)
            else ""
        )

    def error(self) -> PreflightError:
        assert self.needs is not None
        return PreflightError(
            f"preflight: {self.needs.pte.name} cannot run there: {self.reason}; "
            + ("the program was not pushed" if self.source == "device" else "nothing was pushed"),
            self.hint(),
            report=self,
        )

    def findings(self) -> list[Finding]:
        """The comparison one line per subject, as `doctor --pte --device` shows it."""
        if self.status == "skipped" or self.runner is None or self.needs is None:
            return [Finding("runner", "warn", self.reason, "")]
        runner, needs = self.runner, self.needs
        count = sum(len(keys) for keys in runner.kernels.values())
        found = [
            Finding("runner", "ok", f"etdeploy_runner {runner.runner_version} (executorch "
                    f"{runner.executorch_version}, {runner.kind} {runner.abi}): {count} kernels, "
                    f"backends: {', '.join(runner.backends) or 'none'}; described {self.source}", ""),
        ]  # fmt: skip
        for op in self.missing_operators:
            found.append(Finding(f"operator {op.name}", "fail", f"missing{_dtype_text(op)}; "
                                 f"called by {', '.join(op.methods)}", operator_hint(op, needs)))  # fmt: skip
        for backend in self.missing_backends:
            found.append(Finding(f"backend {backend.name}", "fail", "not registered; delegated "
                                 f"to by {', '.join(backend.methods)}", backend_hint(backend)))  # fmt: skip
        if not self.missing_operators:
            text = (
                f"all {len(needs.operators)} operator(s) the program calls have kernels"
                if needs.operators
                else "the program calls no operator outside its delegates"
            )
            found.append(Finding("operators", "ok", text, ""))
        if not self.missing_backends:
            names = ", ".join(sorted(needs.backends)) or "none needed"
            found.append(Finding("backends", "ok", f"registered: {names}", ""))
        if self.version is not None:
            status = "ok" if self.version.status == "ok" else "warn"
            hint = (
                "build it with `etdeploy build`, which records the version in model.pte.json"
                if self.version.status == "unknown"
                else ""
            )
            found.append(Finding("version", status, self.version.text, hint))
        if needs.operators:
            found.append(Finding("selective build", "ok", needs.selective_build_flag(), ""))
        return found

    def to_json(self) -> JsonObject:
        runner: JsonObject | None = None
        if self.runner is not None:
            runner = {
                "runner_version": self.runner.runner_version,
                "executorch_version": self.runner.executorch_version,
                "kind": self.runner.kind,
                "abi": self.runner.abi,
                "kernel_libraries": list(self.runner.kernel_libraries),
                "kernels": sum(len(keys) for keys in self.runner.kernels.values()),
                "backends": list(self.runner.backends),
            }
        return {
            "status": self.status,
            "reason": self.reason,
            "device": self.device,
            "source": self.source,
            "seconds": round(self.seconds, 4),
            "runner": runner,
            "program": self.needs.to_json() if self.needs else None,
            "missing_operators": [m.to_json() for m in self.missing_operators],
            "missing_backends": [m.to_json() for m in self.missing_backends],
            "version": self.version.to_json() if self.version else None,
            "notes": list(self.notes),
        }


class PreflightError(InputError):
    """The program needs an operator or backend the device's runner lacks: bad
    input (exit 2), found before anything was pushed, so never retried."""

    def __init__(self, message: str, hint: str | None = None, *, report: PreflightReport) -> None:
        super().__init__(message, hint)
        self.report = report


def _dtype_text(missing: MissingOperator) -> str:
    if not missing.tensors:
        return ""
    calls = "; ".join(", ".join(t) or "no tensors" for t in missing.tensors)
    return f" (for tensors {calls})"


def operator_hint(missing: MissingOperator, needs: ProgramNeeds | None) -> str:
    selective = needs.selective_build_flag() if needs else "-DEXECUTORCH_SELECT_OPS_MODEL=<pte>"
    linkable = [p for p in missing.providers if p.linkable]
    if missing.tensors:
        available = "; ".join(", ".join(t) for t in missing.available)
        return (
            f"the runner's kernels for {missing.name} take only other dtypes or dim orders "
            f"({available}): rebuild that kernel library for these, e.g. ExecuTorch's "
            f"selective build with -DEXECUTORCH_SELECT_OPS_MODEL={needs.pte if needs else '<pte>'} "
            "-DEXECUTORCH_DTYPE_SELECTIVE_BUILD=ON, which specialises kernels for exactly the "
            "program's dtypes"
        )
    if linkable:
        provider = linkable[0]
        if provider.component in ("optimized", "runtime"):
            return (
                f"{missing.name} is in {provider.library}, which etdeploy's runner always "
                "links: use etdeploy's runner (drop --runner, or `etdeploy runner build`)"
            )
        return (
            f"{missing.name} is in {provider.library}: etdeploy runner build --kernels "
            f"{provider.component}"
        )
    if missing.providers:
        provider = missing.providers[0]
        if provider.component == "llm":
            return (
                f"the installed executorch ships {missing.name} only in {provider.library}, an "
                "export-time plugin (it needs libtorch and Python) no runner can load; build "
                f"ExecuTorch from source with -DEXECUTORCH_BUILD_KERNELS_LLM=ON {selective} and "
                "pass its custom_ops library: etdeploy runner build --kernels PATH (an Android "
                "or arm64 source install: --kernels llm)"
            )
        return (
            f"the installed executorch ships {missing.name} only in {provider.library}, an "
            "export-time plugin no runner can load; build that kernel library from source and "
            "pass it: etdeploy runner build --kernels PATH"
        )
    return (
        f"no library in the installed executorch registers {missing.name}: build a kernel "
        "library for it against this executorch and pass it with etdeploy runner build "
        "--kernels PATH, or lower with a partitioner that covers it"
    )


def backend_hint(missing: MissingBackend) -> str:
    if missing.option and missing.in_wheel:
        return f"{missing.name}: etdeploy runner build --backends {missing.option}"
    return (
        f"the installed executorch ships no {missing.name} runtime library for this platform: "
        "lower for a backend the runner has (xnnpack, portable), or use a runner built with it "
        "(--runner)"
    )


def compare(needs: ProgramNeeds, runner: RunnerDescription, device: str) -> PreflightReport:
    """What `needs` asks that `runner` lacks. A kernel serves a call when it is a
    fallback kernel or its key equals the call's (get_op_function_from_registry)."""
    missing_ops = []
    for need in needs.operators:
        keys = runner.kernels.get(need.name)
        if keys is None:
            missing_ops.append(
                MissingOperator(need.name, need.methods, (), (), tuple(kernel_providers(need.name)))
            )
            continue
        if None in keys:
            continue
        unserved = [k for k in need.kernel_keys if k not in keys]
        if unserved:
            tensors = tuple(key_tensors(k) for k in unserved)
            available = tuple(key_tensors(k) for k in sorted(k for k in keys if k is not None))
            missing_ops.append(MissingOperator(need.name, need.methods, tensors, available, ()))
    missing_backends = []
    for backend, methods in needs.backends.items():
        if backend not in runner.backends:
            option = BACKEND_OPTIONS.get(backend)
            in_wheel = option is not None and backend_in_wheel(option)
            missing_backends.append(MissingBackend(backend, methods, option, in_wheel))
    return PreflightReport(
        status="failed" if missing_ops or missing_backends else "passed",
        device=device,
        needs=needs,
        runner=runner,
        missing_operators=tuple(missing_ops),
        missing_backends=tuple(missing_backends),
        version=version_verdict(needs.executorch_version, runner.executorch_version),
    )

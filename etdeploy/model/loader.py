"""Resolve a MODEL argument to a ModelSpec and a source fingerprint.

The fingerprint (the factory file and the Python files beside it, or the .pt2
bytes, or the example's source) keys the build cache, so it is computed without
running the factory: a cache hit never imports the user's code.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import inspect
import re
import sys
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from etdeploy.digests import file_sha256
from etdeploy.errors import ModelError, UsageError
from etdeploy.extras import require_build_extra
from etdeploy.model.spec import ModelSpec

if TYPE_CHECKING:
    import torch

EXAMPLES: dict[str, str] = {
    "digits": "etdeploy.model.examples.digits:build",
    "diabetes": "etdeploy.model.examples.diabetes:build",
}


@dataclass(frozen=True)
class ModelRef:
    """A parsed MODEL argument."""

    text: str
    kind: str  # "file" | "module" | "pt2" | "example"
    location: str  # path, module name, or example name
    factory: str | None
    source_files: tuple[Path, ...]

    @property
    def name(self) -> str:
        if self.kind == "example":
            return self.location
        if self.kind == "module":
            return self.location.rsplit(".", 1)[-1]
        return Path(self.location).stem

    def fingerprint(self) -> str:
        """sha256 over the source: what changes when the model could change.

        For a model file, the other files beside it count too, by name and content
        (weights a factory loads: w.npy, model.pt): a copy of the same bytes is the
        same model. Their sha256 comes from etdeploy.digests, which reads a file again
        only when its stat changed, so a multi-GB checkpoint is hashed once, not on
        every run. What is not an input of the program does not count: what etdeploy
        itself writes there (programs, manifests, ETRecords, result documents), a
        verification set's files (label tables, images, notes: _NOT_MODEL_INPUTS) and
        folders. Data elsewhere is not seen: `--no-cache` rebuilds and recomputes.
        """
        return self._fingerprinted()[0]

    def fingerprint_files(self) -> dict[str, str]:
        """What the fingerprint covers, file by file: each file's sha256. A build
        manifest records it, so a refusal can say which file changed (changed_files)."""
        return self._fingerprinted()[1]

    def _fingerprinted(self) -> tuple[str, dict[str, str]]:
        digest = hashlib.sha256(f"{self.kind}:{self.factory}\n".encode())
        files: dict[str, str] = {}
        for path in self.source_files:
            data = path.read_bytes()
            digest.update(path.name.encode() + b"\0")
            digest.update(data)
            files[path.name] = hashlib.sha256(data).hexdigest()
        if self.kind == "file" and self.source_files:
            for data_file in _data_files_beside(self.source_files[0]):
                content = file_sha256(data_file)
                digest.update(f"{data_file.name}\0{content}\n".encode())
                files[data_file.name] = content
        return digest.hexdigest(), files


@dataclass(frozen=True)
class FileChanges:
    """How the files a fingerprint covers differ from what a build recorded."""

    changed: tuple[str, ...]
    removed: tuple[str, ...]
    added: tuple[str, ...]

    @property
    def describe(self) -> str:
        """ "model.py changed, w.npy removed" (added files are not changes of the model)."""
        said = [f"{name} changed" for name in self.changed]
        said += [f"{name} removed" for name in self.removed]
        return ", ".join(said)


def changed_files(recorded: Mapping[str, object], now: Mapping[str, str]) -> FileChanges:
    """Which of the files a build recorded changed or went, and which are new since.
    A file added beside the model since the build was not read by it: the same
    factory code, run then, could not have used it."""
    return FileChanges(
        changed=tuple(sorted(n for n in recorded if n in now and now[n] != recorded[n])),
        removed=tuple(sorted(n for n in recorded if n not in now)),
        added=tuple(sorted(n for n in now if n not in recorded)),
    )


# What `etdeploy build` and `run` write beside a model: never part of its key.
_OUTPUT_SUFFIXES = (".pte", ".ptd", ".etrecord", ".etdump", ".pte.json", ".quantized.pt2")
# etdeploy's JSON documents (results, farm documents, manifests) name their schema first.
_DOCUMENT_MARK = b'"schema": "etdeploy.'


# Files beside a model that no factory turns into weights or structure: a verification
# set's label tables and images (what --labels and --inputs read), and notes. Arrays
# (.npy, .npz, .pt) stay in: they are as often weights as samples.
_NOT_MODEL_INPUTS = (".csv", ".tsv", ".png", ".jpg", ".jpeg", ".md", ".rst")


def _data_files_beside(path: Path) -> list[Path]:
    return sorted(
        p for p in path.parent.iterdir()
        if p.is_file() and p.suffix not in (".py", ".pyc") and not p.name.startswith(".")
        and p.suffix.lower() not in _NOT_MODEL_INPUTS and not _etdeploy_output(p)
    )  # fmt: skip


def _etdeploy_output(path: Path) -> bool:
    """A file etdeploy wrote: a program and what goes beside it, or one of its documents."""
    if path.name.endswith(_OUTPUT_SUFFIXES):
        return True
    if path.suffix not in (".json", ".jsonl"):
        return False
    try:
        with open(path, "rb") as fh:
            head = fh.read(256)
    except OSError:
        return False
    return _DOCUMENT_MARK in head.replace(b'"schema":"', b'"schema": "')


def parse_model_ref(text: str) -> ModelRef:
    if text in EXAMPLES:
        module_name, factory = EXAMPLES[text].split(":")
        spec = importlib.util.find_spec(module_name)
        assert spec is not None and spec.origin is not None
        return ModelRef(text, "example", text, factory, (Path(spec.origin),))
    if text.endswith(".pt2"):
        path = Path(text)
        if not path.is_file():
            raise UsageError(f"model file not found: {text}", "check the path to the .pt2")
        return ModelRef(text, "pt2", str(path), None, (path,))
    location, sep, factory = text.rpartition(":")
    if not sep or not location or not factory:
        raise UsageError(
            f"cannot tell what model {text!r} is",
            f"use path/to/file.py:factory, package.module:factory, a .pt2, "
            f"or a built-in example ({', '.join(EXAMPLES)})",
        )
    if not factory.isidentifier():
        raise UsageError(f"{factory!r} is not a Python function name", "write FILE.py:function")
    if location.endswith(".py"):
        path = Path(location)
        if not path.is_file():
            raise UsageError(f"model file not found: {location}", "check the path before the ':'")
        return ModelRef(text, "file", str(path), factory, _python_files_beside(path))
    try:
        spec = importlib.util.find_spec(location)
    except (ImportError, ValueError) as exc:
        raise UsageError(f"cannot find module {location!r}: {exc}", "is it installed?") from None
    if spec is None or spec.origin is None:
        raise UsageError(
            f"cannot find module {location!r}",
            "install it, or point at the file: path/to/file.py:factory",
        )
    return ModelRef(text, "module", location, factory, _python_files_beside(Path(spec.origin)))


def _python_files_beside(path: Path) -> tuple[Path, ...]:
    # The factory's own file first, then its siblings: a helper module beside it
    # that changes must invalidate the cache too.
    siblings = sorted(p for p in path.parent.glob("*.py") if p.resolve() != path.resolve())
    return (path, *siblings)


def load_model(ref: ModelRef) -> ModelSpec:
    """Run the factory (or load the .pt2) and check what it returned."""
    require_build_extra(f"loading the model {ref.name}")
    if ref.kind == "pt2":
        return _load_pt2(Path(ref.location))
    factory = _find_factory(ref)
    try:
        returned = factory()
    except Exception as exc:
        where = _user_frame(exc, ref)
        raise ModelError(
            f"the model factory {ref.text} raised {type(exc).__name__}: {exc}{where}",
            "fix the factory; --verbose shows the full trace",
        ) from exc
    return _as_spec(returned, ref)


def _find_factory(ref: ModelRef) -> Callable[[], object]:
    if ref.kind == "file":
        path = Path(ref.location).resolve()
        module_name = f"_etdeploy_model_{hashlib.sha256(str(path).encode()).hexdigest()[:12]}"
        # One import per file and content per process: `run` builds and then
        # computes the eager reference, and a model file that registers custom
        # operators (torch.library) must not register them twice.
        source_digest = hashlib.sha256(path.read_bytes()).hexdigest()
        loaded = sys.modules.get(module_name)
        if loaded is not None and getattr(loaded, "_etdeploy_source", None) == source_digest:
            return _factory_of(loaded, ref)
        spec = importlib.util.spec_from_file_location(module_name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        # Let the model file import its siblings, as it would when run as a script.
        sys.path.insert(0, str(path.parent))
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            raise ModelError(
                f"importing {ref.location} failed: {type(exc).__name__}: {exc}{_user_frame(exc, ref)}",
                "run the file with python to see the error; --verbose shows the trace",
            ) from exc
        finally:
            sys.path.remove(str(path.parent))
        # Our mark on the module object, which ModuleType does not declare.
        module._etdeploy_source = source_digest  # type: ignore[attr-defined]
        sys.modules[module_name] = module
    else:
        module_name = (
            EXAMPLES[ref.location].split(":")[0] if ref.kind == "example" else ref.location
        )
        try:
            module = importlib.import_module(module_name)
        except Exception as exc:
            raise ModelError(
                f"importing {module_name} failed: {type(exc).__name__}: {exc}",
                "--verbose shows the trace",
            ) from exc
    return _factory_of(module, ref)


def _factory_of(module: ModuleType, ref: ModelRef) -> Callable[[], object]:
    assert ref.factory is not None
    factory: object = getattr(module, ref.factory, None)
    if factory is None:
        public = [n for n, v in vars(module).items() if callable(v) and not n.startswith("_")]
        raise UsageError(
            f"{ref.location} has no function {ref.factory!r}",
            f"functions there: {', '.join(sorted(public)[:10]) or 'none'}",
        )
    if not callable(factory):
        raise UsageError(
            f"{ref.text} is not callable", "point at a function returning (module, inputs)"
        )
    return factory


class CausalLmReturned(ModelError):
    """The factory returned a causal language model (a Hugging Face *ForCausalLM, or a
    ModelSpec of one): it takes the language-model road, which `etdeploy run` catches
    this to take with the model already made (the factory runs once). Anywhere else
    it is bad input, said in one line."""

    def __init__(self, ref: ModelRef, spec: ModelSpec) -> None:
        super().__init__(
            f"the factory {ref.text} returned a causal language model "
            f"({type(spec.module).__name__}), which only `etdeploy run` takes",
            f"run it: etdeploy run {ref.text} (or save it with save_pretrained and give "
            "the folder)",
        )
        self.ref = ref
        self.spec = spec


def is_causal_lm(module: object) -> bool:
    """A Hugging Face causal LM, told without importing transformers: its class
    (LlamaForCausalLM, Qwen3ForCausalLM...) and what save_pretrained needs."""
    return (
        type(module).__name__.endswith("ForCausalLM")
        and hasattr(module, "config")
        and callable(getattr(module, "save_pretrained", None))
    )


def _as_spec(returned: object, ref: ModelRef) -> ModelSpec:
    import torch

    if is_causal_lm(returned):
        raise CausalLmReturned(ref, ModelSpec(module=returned, example_inputs=()))
    if isinstance(returned, ModelSpec) and is_causal_lm(returned.module):
        raise CausalLmReturned(ref, returned)
    if isinstance(returned, ModelSpec):
        spec = returned
    elif isinstance(returned, tuple) and len(returned) == 2:
        module, example = returned
        spec = ModelSpec(module=module, example_inputs=example)
    else:
        raise ModelError(
            f"the factory {ref.text} returned {type(returned).__name__}, "
            "not (module, example_inputs) or a ModelSpec",
            "return (model.eval(), (torch.randn(1, 3, 224, 224),))",
        )
    if spec.name == "model":
        spec.name = ref.name
    if isinstance(spec.example_inputs, torch.Tensor):
        spec.example_inputs = (spec.example_inputs,)
    if not isinstance(spec.module, torch.nn.Module):
        raise ModelError(
            f"the factory {ref.text} returned a {type(spec.module).__name__} as its module",
            "return a torch.nn.Module as the first element",
        )
    if not isinstance(spec.example_inputs, (tuple, list)) or not all(
        isinstance(t, torch.Tensor) for t in spec.example_inputs
    ):
        raise ModelError(
            f"the factory {ref.text} returned example inputs that are not a tuple of tensors",
            "return (module, (tensor1, tensor2, ...))",
        )
    spec.example_inputs = tuple(spec.example_inputs)
    if spec.input_names is None:
        spec.input_names = _forward_arg_names(spec.module, len(spec.example_inputs))
    spec.samples = [Path(p) for p in spec.samples]
    spec.calibration = [Path(p) for p in spec.calibration]
    spec.module.eval()
    return spec


def _forward_arg_names(module: torch.nn.Module, count: int) -> list[str]:
    try:
        params = list(inspect.signature(module.forward).parameters.values())
    except (TypeError, ValueError):
        params = []
    names = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(names) < count:
        names = [f"input_{i}" for i in range(count)]
    return names[:count]


def _load_pt2(path: Path) -> ModelSpec:
    import torch

    try:
        program = torch.export.load(str(path))
    except Exception as exc:
        raise UsageError(
            f"{path} is not a saved ExportedProgram ({type(exc).__name__}: {str(exc)[:120]})",
            "save one with torch.export.save(torch.export.export(model, inputs), 'model.pt2')",
        ) from exc
    example = program.example_inputs
    args = tuple(example[0]) if example else ()
    names = [
        s.arg.name
        for s in program.graph_signature.input_specs
        if s.kind == torch.export.graph_signature.InputKind.USER_INPUT
    ]
    return ModelSpec(module=program, example_inputs=args, name=path.stem, input_names=names)


@dataclass(frozen=True)
class UserLine:
    """A line of the user's model source that an error points at."""

    file: str
    line: int
    code: str


def find_user_line(exc: BaseException, source_files: tuple[Path, ...]) -> UserLine | None:
    """The innermost traceback frame in the user's files; failing that, the last
    `File "x.py", line N` that torch.export wrote into its message."""
    sources = {p.resolve() for p in source_files}
    found: UserLine | None = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if Path(frame.filename).resolve() in sources:
            found = UserLine(
                Path(frame.filename).name, frame.lineno or 0, (frame.line or "").strip()
            )
    if found is not None:
        return found
    for match in re.finditer(r'File "([^"]+)", line (\d+)', str(exc)):
        path = Path(match.group(1))
        if path.resolve() in sources:
            number = int(match.group(2))
            code = ""
            with contextlib.suppress(OSError, IndexError):
                code = path.read_text().splitlines()[number - 1].strip()
            found = UserLine(path.name, number, code)
    return found


def _user_frame(exc: BaseException, ref: ModelRef) -> str:
    """' (at file.py:12)', or nothing when the error is not in the user's files."""
    where = find_user_line(exc, ref.source_files)
    return f" (at {where.file}:{where.line})" if where else ""

"""What starting the CLI costs, kept to what the command at hand uses.

A warm `etdeploy run` of a prebuilt bundle takes a few hundred milliseconds of device
work; starting Python code was as much again.

The records of a run (etdeploy.report, the settings, the devices...) are frozen
dataclasses, ~160 of them with typer's and rich's: `dataclasses` writes each one's
__init__, __eq__, __hash__, __repr__ and frozen __setattr__ as source text and
compiles it when the class is made, ~0.1 s of every start-up (CPython 3.11
Lib/dataclasses.py, _create_fn, read 2026-12-04). What it compiles is the same text
every time, so cache_dataclass_code keeps the compiled code by the text's digest (as
Python keeps a module's bytecode in __pycache__): the next start compiles nothing it
compiled before. The cache is one file per interpreter (its bytecode magic number),
written whole under a temporary name and checked by its CRC-32 when read; a damaged
or foreign one is ignored and written again.

Two parts of typer 0.29 (typer/core.py, typer/_coercion.py, typer/_adapters.py, read
2026-12-04) cost a run without doing anything for it, so each waits here until it
is used:

- typer.rich_utils (rich's markdown, pygments, traceback: ~0.1 s to import) prints
  help and usage errors only; etdeploy's patches to it (one-line usage errors,
  _app.py) are applied when typer imports it, not at start-up (after_import).
- Every option's value goes through a pydantic TypeAdapter that typer builds when the
  command line is parsed, for the ~60 options `run` does not get too, and importing
  pydantic for them costs ~0.07 s. An option not given is None (or empty) whatever
  its type: typer's RuntimeParam.coerce returns that before adapting anything. A
  plain str, Path, int, float or list of str given on the command line is what
  pydantic would make of it (checked value by value below: anything a plain parse
  does not take, such as "1_000" or " 2 ", goes to typer's own adapter, so a bad
  value gets typer's own message; a Path gets typer's own checks, on its text as
  typer checks it). Every other option keeps typer's coercion.

Each is a no-op where what it replaces is not there.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import importlib.util
import marshal
import re
import sys
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import CodeType, ModuleType
from typing import Any

_INT = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


# Entries kept at most: the CLI's own classes are ~1,000 functions; a cache that grew
# past this (a model's own dataclasses) starts again from what one run compiled.
_CODE_CACHE_MAX = 8192


def cache_dataclass_code() -> None:
    """Compile what `dataclasses` writes once per interpreter, not once per start (see
    the module docstring): `dataclasses.exec` is the builtin with a cache in front."""
    import dataclasses

    if "exec" in vars(dataclasses):
        return  # already in place
    path = _code_cache_path()
    # Each entry stays marshalled until a class asks for it: the cache holds every
    # command's classes (and a build's), a run uses about half of them.
    known = _read_code_cache(path)
    compiled: dict[bytes, bytes] = {}

    def cached_exec(
        source: str | bytes | CodeType, globals: Any = None, locals: Any = None, /
    ) -> None:
        if isinstance(source, str):
            key = hashlib.blake2b(source.encode(), digest_size=16).digest()
            stored = known.get(key)
            code = _code_of(stored) if stored is not None else None
            if code is None:
                # As exec(source) in dataclasses compiles it: no __future__ flags there.
                code = compile(source, "<string>", "exec", dont_inherit=True)
                compiled[key] = marshal.dumps(code)
            source = code
        exec(source, globals, locals)

    dataclasses.exec = cached_exec  # type: ignore[attr-defined]
    atexit.register(_write_code_cache, path, known, compiled)


def _code_of(stored: bytes) -> CodeType | None:
    with contextlib.suppress(ValueError, EOFError, TypeError):
        code = marshal.loads(stored)
        if isinstance(code, CodeType):
            return code
    return None


def _code_cache_path() -> Path:
    from etdeploy.paths import cache_dir

    magic = importlib.util.MAGIC_NUMBER.hex()
    return cache_dir("startup") / f"dataclass-code-{sys.implementation.cache_tag}-{magic}.bin"


def _read_code_cache(path: Path) -> dict[bytes, bytes]:
    """The cache's marshalled code by key; empty when it is missing, damaged or not a
    cache. A CRC-32 finds damage (a torn or flipped file): the cache sits in the user's
    own directory, as their __pycache__ does, so it guards against accidents, not
    against someone who can write there."""
    try:
        data = path.read_bytes()
        if len(data) < 4 or zlib.crc32(data[4:]).to_bytes(4, "big") != data[:4]:
            return {}
        found = marshal.loads(data[4:])
    except (OSError, ValueError, EOFError, TypeError):
        return {}
    if not isinstance(found, dict):
        return {}
    return {k: v for k, v in found.items() if isinstance(k, bytes) and isinstance(v, bytes)}


def _write_code_cache(path: Path, known: dict[bytes, bytes], compiled: dict[bytes, bytes]) -> None:
    if not compiled:
        return
    merged = {**known, **compiled} if len(known) + len(compiled) <= _CODE_CACHE_MAX else compiled
    data = marshal.dumps(merged)
    from etdeploy.atomic import atomic_write

    # A cache that cannot be written costs the next start its compiling, nothing else.
    with contextlib.suppress(OSError):
        atomic_write(path, zlib.crc32(data).to_bytes(4, "big") + data)


class _AfterImport:
    """A meta path finder for one module: the usual finders find it, and `patch`
    runs on it right after it executes (once)."""

    def __init__(self, name: str, patch: Callable[[ModuleType], None]) -> None:
        self.name = name
        self.patch = patch

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> ModuleSpec | None:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        loader = spec.loader if spec is not None else None
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run = loader.exec_module
        patch = self.patch

        def exec_module(module: ModuleType) -> None:
            run(module)
            patch(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def after_import(name: str, patch: Callable[[ModuleType], None]) -> None:
    """Run patch(module) once `name` is imported: now if it already is."""
    module = sys.modules.get(name)
    if module is not None:
        patch(module)
    else:
        sys.meta_path.insert(0, _AfterImport(name, patch))


def _plain(annotation: Any, info: Any, value: Any) -> tuple[bool, Any]:
    """(True, the value) when `value` given to an option of `annotation` needs no
    adapter to be what typer's would make of it; (False, None) otherwise."""
    if getattr(info, "parser", None) is not None or getattr(info, "click_type", None) is not None:
        return False, None
    if annotation is str and isinstance(value, str):
        return True, value
    if annotation in (int, float) and isinstance(value, str):
        if info.min is not None or info.max is not None or info.clamp:
            return False, None
        if annotation is int and _INT.fullmatch(value):
            return True, int(value)
        if annotation is float and _FLOAT.fullmatch(value):
            return True, float(value)
        return False, None
    strings = isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)
    if (
        getattr(annotation, "__origin__", None) is list
        and annotation.__args__ == (str,)
        and strings
    ):
        return True, list(value)
    return False, None


def defer_option_coercion() -> None:
    """Build typer's adapter for an option only for a value that needs it (see the
    module docstring)."""
    try:
        from typer import _coercion, core
        from typer._param_types import coerce_cli_path
    except ImportError:
        return
    parameter = getattr(core, "_TyperParameter", None)
    base = getattr(_coercion, "RuntimeParam", None)
    build = getattr(_coercion, "build_runtime_param", None)
    if parameter is None or base is None or build is None:
        return
    build_runtime_param: Callable[[Any], Any] = build  # narrowed for the closure below

    @dataclass(frozen=True)
    class Deferred(base):  # type: ignore[misc, valid-type]
        descriptor: Any = None

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            done, plain = _plain(self.annotation, self.parameter_info, value)
            if done:
                return plain
            info = self.parameter_info
            if _plain_path(self.annotation, info) and isinstance(value, str):
                # typer's own path checks on the text; then the Path pydantic makes of it.
                found = coerce_cli_path(value, info, path_type=None, param=param, ctx=ctx)
                return found if isinstance(found, self.annotation) else self.annotation(found)
            real = build_runtime_param(self.descriptor)
            param._runtime_param = real
            return real._coerce_value(value, param=param, ctx=ctx)

    def get_runtime_param(self: Any) -> Any:
        if self._runtime_param is None:
            described = self.type_descriptor
            self._runtime_param = Deferred(
                parameter_info=described.parameter_info,
                annotation=described.annotation,
                descriptor=described,
            )
        return self._runtime_param

    parameter.get_runtime_param = get_runtime_param


def _plain_path(annotation: Any, info: Any) -> bool:
    return (
        isinstance(annotation, type)
        and issubclass(annotation, Path)
        and getattr(info, "parser", None) is None
        and getattr(info, "path_type", None) is None
        and not getattr(info, "allow_dash", False)
    )

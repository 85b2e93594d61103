"""An import of etdeploy's own code stands at the top of its module, unless importing
it there would make every user of the module pay for a heavy library or would close
an import cycle.

A package hands its names on lazily in one way (etdeploy.lazy, tests/test_lazy.py);
an import inside a function is kept for what a start-up measurement asks: the
libraries below, each measured with `python -X importtime -c "import NAME"` on the
2-core CI machine, 2026-12-05 (cumulative ms, under load): torch 3,678, ruptures 2,871,
alembic 970, transformers 942, psycopg 372, scipy 302, flatbuffers 221, paramiko 160,
jinja2 103, typer 87, numpy 86, filelock 54. executorch and sqlalchemy are named as
they pull torch or a dialect in as soon as they are used. The command modules
(etdeploy/cli/) import each command's work as the command runs, so that
`etdeploy --help` and every command pay only for their own.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import etdeploy

HEAVY = frozenset({
    "torch", "executorch", "ruptures", "alembic", "transformers", "psycopg", "scipy",
    "flatbuffers", "paramiko", "jinja2", "typer", "numpy", "filelock", "sqlalchemy",
    "tokenizers", "pytorch_tokenizers", "safetensors", "rich", "click",
})  # fmt: skip
# Where a function-level import is the rule: see the module's docstring.
COMMANDS = "etdeploy.cli"

ROOT = Path(etdeploy.__file__).parent


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {
    module_name(path): path
    for path in sorted(ROOT.rglob("*.py"))
    if "_generated" not in path.parts and "migrations" not in path.parts
}


def base_of(node: ast.ImportFrom, module: str) -> str:
    if not node.level:
        return node.module or ""
    package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
    return ".".join([*parts, node.module] if node.module else parts)


def is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def lazy_names(package: str) -> dict[str, str]:
    """A package's lazily handed-on names -> their modules (its TYPE_CHECKING imports)."""
    path = MODULES.get(package)
    if path is None or path.name != "__init__.py":
        return {}
    names: dict[str, str] = {}
    for node in ast.parse(path.read_text("utf-8")).body:
        if is_type_checking(node):
            for inner in ast.walk(node):
                if isinstance(inner, ast.ImportFrom):
                    names.update(
                        dict.fromkeys((a.name for a in inner.names), base_of(inner, package))
                    )
    return names


def loaded_by(node: ast.Import | ast.ImportFrom, module: str) -> set[str]:
    """What executing the statement imports: etdeploy modules, and "lib:NAME" for others."""
    if isinstance(node, ast.Import):
        return {a.name if a.name in MODULES else f"lib:{a.name.split('.')[0]}" for a in node.names}
    base = base_of(node, module)
    if base.split(".")[0] != "etdeploy":
        return {f"lib:{base.split('.')[0]}"}
    loaded = {base}
    lazy = lazy_names(base)
    for alias in node.names:
        if f"{base}.{alias.name}" in MODULES:
            loaded.add(f"{base}.{alias.name}")
        elif alias.name in lazy:
            loaded.add(lazy[alias.name])
    return loaded


@dataclass(frozen=True)
class InnerImport:
    module: str
    line: int
    loads: frozenset[str]

    @property
    def where(self) -> str:
        return f"{MODULES[self.module].relative_to(ROOT.parent)}:{self.line}"


def imports_of(module: str) -> tuple[set[str], list[InnerImport]]:
    """What `module` imports at its top, and its imports of etdeploy inside functions."""
    top: set[str] = set()
    inner: list[InnerImport] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if is_type_checking(child):
                continue
            if isinstance(child, ast.Import | ast.ImportFrom):
                loads = loaded_by(child, module)
                if not in_function:
                    top.update(loads)
                elif any(not name.startswith("lib:") for name in loads):
                    inner.append(InnerImport(module, child.lineno, frozenset(loads)))
            visit(child, in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef))

    visit(ast.parse(MODULES[module].read_text("utf-8")), False)
    return top, inner


TOP: dict[str, set[str]] = {}
INNER: list[InnerImport] = []
for _name in MODULES:
    TOP[_name], _inner = imports_of(_name)
    INNER.extend(_inner)


def closure(names: frozenset[str] | set[str]) -> set[str]:
    """Everything importing `names` imports, packages above each module included."""
    seen: set[str] = set()
    stack = list(names)
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        if name.startswith("lib:"):
            continue
        parts = name.split(".")
        stack.extend(".".join(parts[:i]) for i in range(1, len(parts)))
        stack.extend(TOP.get(name, ()))
    return seen


def heavy(names: set[str]) -> set[str]:
    return {name[4:] for name in names if name.startswith("lib:") and name[4:] in HEAVY}


def why_inside(found: InnerImport) -> str | None:
    """Why the import may stay in its function, or None when it belongs at the top."""
    brought = closure(found.loads)
    if found.module in brought:
        return "cycle"
    extra = heavy(brought) - heavy(closure({found.module}))
    return f"keeps {', '.join(sorted(extra))} away" if extra else None


def test_every_function_level_import_keeps_a_heavy_library_or_a_cycle_away() -> None:
    misplaced = [
        f.where for f in INNER if not f.module.startswith(COMMANDS) and why_inside(f) is None
    ]
    assert not misplaced, f"{len(misplaced)} imports belong at the top: {misplaced}"


def test_a_planted_function_level_import_is_caught() -> None:
    planted = InnerImport("etdeploy.farm.scheduler", 1, frozenset({"etdeploy.units"}))
    assert why_inside(planted) is None
    torch_user = InnerImport("etdeploy.units", 1, frozenset({"lib:torch"}))
    assert why_inside(torch_user) == "keeps torch away"

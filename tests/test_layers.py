"""etdeploy's packages stand in layers: a package imports only from its own layer or
those below, and no two packages import each other, however indirectly.

A package is a folder under etdeploy/ (devices, pipeline...) or a module beside them
(settings.py, verify.py...). Every import counts: at the top of a file, inside a
function, or under TYPE_CHECKING, since each is a tie a reader has to follow.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

import etdeploy

# The layers, from the ground up. A new package takes its place here.
LAYERS: tuple[tuple[str, frozenset[str]], ...] = (
    ("foundations", frozenset({
        "errors", "et_errors", "ahead", "interrupts", "ipc", "lazy", "npz",
        "paths", "atomic", "extras", "files", "units", "library_output", "accuracy",
        "digests", "background", "jsonvalue", "declaration", "scratch",
    })),
    ("readers of files and models", frozenset({
        "pte", "model", "inputs", "profile", "dataset", "quarantine",
    })),
    ("records and settings", frozenset({
        "results", "settings", "build_options", "numerics", "config", "staged",
    })),
    ("devices and runners", frozenset({
        "devices", "memory", "sizecheck", "runner", "runner_build", "clean",
    })),
    ("the build and the program", frozenset({"builder", "program", "preflight", "explore"})),
    ("sources of a run's program", frozenset({"bundle"})),
    ("the run", frozenset({"pipeline", "doctor"})),
    ("what runs many", frozenset({"farm", "release", "history"})),
    ("the report formats", frozenset({"report"})),
    ("the command line", frozenset({"cli", "launch", "__main__"})),
)  # fmt: skip

# The report formats (console, JUnit, HTML) render records; only the command line
# chooses to render, so nothing below it imports them.
RENDERERS = "report"

PACKAGE_ROOT = Path(etdeploy.__file__).parent


def package_of(module: str) -> str | None:
    """'etdeploy.pipeline.run' -> 'pipeline'; None outside etdeploy or for etdeploy itself."""
    parts = module.split(".")
    return parts[1] if parts[0] == "etdeploy" and len(parts) > 1 else None


def imported_modules(path: Path, module: str) -> Iterator[str]:
    """Every module `path` (the module `module`) imports, wherever the import stands."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


def package_imports(root: Path) -> dict[str, dict[str, set[str]]]:
    """package -> the packages it imports -> the files that do (paths under root)."""
    graph: dict[str, dict[str, set[str]]] = {}
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root.parent).with_suffix("")
        module = ".".join(relative.parts[:-1] if relative.name == "__init__" else relative.parts)
        own = package_of(module)
        if own is None or "_generated" in relative.parts:
            continue
        ties = graph.setdefault(own, {})
        for target in imported_modules(path, module):
            other = package_of(target)
            if other is not None and other != own:
                ties.setdefault(other, set()).add(str(relative))
    return graph


def cycle(graph: Mapping[str, Mapping[str, object]]) -> list[str] | None:
    """A loop of packages importing one another, or None."""
    state: dict[str, str] = {}
    trail: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        trail.append(node)
        for nxt in sorted(graph.get(node, {})):
            if state.get(nxt) == "open":
                return [*trail[trail.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)) is not None:
                return found
        state[node] = "done"
        trail.pop()
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)) is not None:
            return found
    return None


def layer_of(package: str) -> int:
    return next(i for i, (_, members) in enumerate(LAYERS) if package in members)


def test_every_package_has_a_layer() -> None:
    placed = set().union(*(members for _, members in LAYERS))
    assert sorted(set(package_imports(PACKAGE_ROOT)) - placed) == []


def test_no_import_points_up_a_layer() -> None:
    upward = [
        f"{package} ({LAYERS[layer_of(package)][0]}) -> {other} "
        f"({LAYERS[layer_of(other)][0]}): {', '.join(sorted(files))}"
        for package, ties in package_imports(PACKAGE_ROOT).items()
        for other, files in ties.items()
        if layer_of(other) > layer_of(package)
    ]
    assert upward == []


def renderer_importers(graph: Mapping[str, Mapping[str, set[str]]]) -> list[str]:
    """The files of packages below the command line that import the report formats."""
    command_line = layer_of("cli")
    return sorted(
        file
        for package, ties in graph.items()
        if package != RENDERERS and layer_of(package) < command_line
        for file in ties.get(RENDERERS, set())
    )


def test_nothing_below_the_command_line_imports_a_renderer() -> None:
    assert renderer_importers(package_imports(PACKAGE_ROOT)) == []


def test_a_planted_renderer_import_is_found(tmp_path: Path) -> None:
    """The check itself: a farm module that writes JUnit itself, from inside a
    function, is named; the command line doing the same is not."""
    root = tmp_path / "etdeploy"
    for package in ("report", "farm", "cli"):
        (root / package).mkdir(parents=True)
        (root / package / "__init__.py").write_text("")
    (root / "__init__.py").write_text("")
    (root / "report" / "junit.py").write_text("def write_junit():\n    pass\n")
    (root / "farm" / "reports.py").write_text(
        "def night():\n    from etdeploy.report.junit import write_junit\n"
    )
    (root / "cli" / "farm.py").write_text("from etdeploy.report import junit\n")
    assert renderer_importers(package_imports(root)) == ["etdeploy/farm/reports"]


def test_no_import_cycle_between_packages() -> None:
    assert cycle(package_imports(PACKAGE_ROOT)) is None


def test_a_planted_cycle_is_found(tmp_path: Path) -> None:
    """The check itself: two packages that import each other, one of them inside a
    function, are named as a loop."""
    root = tmp_path / "etdeploy"
    (root / "lower").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "lower" / "__init__.py").write_text("from etdeploy.upper import thing\n")
    (root / "upper.py").write_text("def thing():\n    from .lower import other\n")
    graph = package_imports(root)
    assert graph == {
        "lower": {"upper": {"etdeploy/lower/__init__"}},
        "upper": {"lower": {"etdeploy/upper"}},
    }
    assert cycle(graph) == ["lower", "upper", "lower"]

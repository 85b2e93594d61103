"""Small Markdown and source-reading helpers for the generated reference pages.

The pages are generated from the code at every `mkdocs build` (reference.py), so
nothing here is a copy of a fact: a value, a default or a note is read from the
module that owns it.
"""

from __future__ import annotations

import ast
import inspect
import io
import textwrap
import tokenize
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
NONE = "–"


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A Markdown table; `|` and newlines inside a cell are escaped."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        cells = [str(cell).replace("|", "\\|").replace("\n", " ") or NONE for cell in row]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def code(text: object) -> str:
    """Inline code, with a backtick inside handled the Markdown way."""
    value = str(text)
    fence = "``" if "`" in value else "`"
    pad = " " if fence == "``" else ""
    return f"{fence}{pad}{value}{pad}{fence}"


def toml_value(value: Any) -> str:
    """A Python default as it would be written in etdeploy.toml."""
    if value is None:
        return NONE
    if isinstance(value, bool):
        return code("true" if value else "false")
    if isinstance(value, str):
        return code(f'"{value}"')
    if isinstance(value, Path):
        return code(f'"{value}"')
    if isinstance(value, tuple | list):
        return code("[" + ", ".join(_plain(v) for v in value) + "]")
    return code(value)


def _plain(value: Any) -> str:
    return f'"{value}"' if isinstance(value, str) else str(value)


def type_name(expected: type | tuple[type, ...]) -> str:
    """What TOML must give, in a reader's words: int, float, str, bool, list, table."""
    kinds = expected if isinstance(expected, tuple) else (expected,)
    names = {int: "int", float: "float", str: "str", bool: "bool", list: "list", dict: "table"}
    words = [names.get(k, k.__name__) for k in kinds]
    if words == ["int", "float"]:
        return "number"
    return " or ".join(words)


def source_path(obj: Any) -> str:
    """The repository-relative file that defines obj (a module, class or function)."""
    path = Path(inspect.getsourcefile(obj) or "")
    try:
        return path.resolve().relative_to(REPO).as_posix()
    except ValueError:
        return path.as_posix()


def field_notes(cls: type) -> dict[str, str]:
    """The comments the code gives each field of a class: the comment lines right
    above the field and a comment at the end of its line (`#:` or `#`)."""
    source = textwrap.dedent(inspect.getsource(cls))
    lines = source.splitlines()
    comments = _comments_by_line(source)
    body = ast.parse(source).body[0]
    assert isinstance(body, ast.ClassDef)
    notes: dict[str, str] = {}
    for stmt in body.body:
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
            continue
        above: list[str] = []
        line = stmt.lineno - 1  # 1-based: the line above the field
        while line >= 1 and lines[line - 1].strip().startswith("#"):
            above.insert(0, comments[line])
            line -= 1
        end = stmt.end_lineno or stmt.lineno
        inline = [comments[end]] if end in comments else []
        text = " ".join(part for part in (*above, *inline) if part)
        if text:
            notes[stmt.target.id] = text
    return notes


def _comments_by_line(source: str) -> dict[int, str]:
    found: dict[int, str] = {}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            text = token.string.lstrip("#").lstrip(":").strip()
            if not text.startswith(("fmt:", "noqa", "type:")):
                found[token.start[0]] = text
    return found


def docstring(obj: Any) -> str:
    """An object's docstring, dedented; '' when it has none."""
    return inspect.cleandoc(obj.__doc__) if obj.__doc__ else ""


def first_sentence(text: str) -> str:
    """The docstring's first paragraph on one line."""
    return " ".join(text.split("\n\n", 1)[0].split())

"""`-k EXPR`: the jobs of a farm chosen by words in their names, as `pytest -k`
chooses tests.

EXPR is words joined by `and`, `or`, `not` and parentheses (`not` binds
tightest, then `and`, then `or`). A word matches a job when it is a substring,
ignoring case, of the job's label (`digits[xnnpack+int8] on pixel8`) or of its
key (`digits|xnnpack|int8|pixel8`, where a float build says `none`):

    -k pixel8                       every job on pixel8 (and on pixel8-pro)
    -k "int8 and not portable"      the int8 builds of every backend but portable
    -k "digits and (local or mac)"
    -k none                         the float builds

Skipped cells (combinations that cannot run) are chosen the same way, so a
subset's reports list the skipped cells of that subset only.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import NoReturn

from etdeploy.errors import UsageError
from etdeploy.farm.spec import FarmSpec

Matcher = Callable[[str], bool]

_KEYWORDS = ("and", "or", "not")
_TOKEN = re.compile(r"\s*(\(|\)|[^\s()]+)")
_HINT = 'join words with and, or, not and parentheses, e.g. -k "int8 and not pixel8"'


def parse_keyword_expr(expr: str) -> Matcher:
    """A function of a job's text (label and key) that says whether EXPR selects
    it; a malformed EXPR is a UsageError naming where it goes wrong."""
    tokens: list[tuple[int, str]] = []
    position = 0
    while True:
        match = _TOKEN.match(expr, position)
        if match is None:
            break
        tokens.append((match.start(1), match.group(1)))
        position = match.end()
    if not tokens:
        raise UsageError("-k: the expression is empty", _HINT)
    parser = _Parser(expr, tokens)
    matcher = parser.expression()
    if parser.index < len(tokens):
        parser.fail("expected and/or or the end")
    return matcher


def select_jobs(spec: FarmSpec, expr: str) -> FarmSpec:
    """The spec with only the jobs (and skipped cells) EXPR selects; a
    UsageError when it selects no job, which is most likely a typo."""
    matches = parse_keyword_expr(expr)
    jobs = tuple(job for job in spec.jobs if matches(f"{job.label} {job.key}"))
    if not jobs:
        shown = ", ".join(job.label for job in spec.jobs[:3])
        raise UsageError(
            f"-k {expr!r} selects none of the {len(spec.jobs)} jobs of {spec.path.name}",
            f"words match parts of job names such as: {shown}",
        )
    skipped = tuple(cell for cell in spec.skipped if matches(f"{cell.label} {cell.key}"))
    return dataclasses.replace(spec, jobs=jobs, skipped=skipped)


class _Parser:
    """Recursive descent over the tokens: or_expr := and_expr ("or" and_expr)*,
    and_expr := not_expr ("and" not_expr)*, not_expr := "not" not_expr | atom,
    atom := "(" or_expr ")" | WORD."""

    def __init__(self, expr: str, tokens: list[tuple[int, str]]) -> None:
        self.expr = expr
        self.tokens = tokens
        self.index = 0

    def fail(self, what: str) -> NoReturn:
        if self.index < len(self.tokens):
            column, token = self.tokens[self.index]
            where = f"at {token!r} (column {column + 1})"
        else:
            where = "at the end"
        raise UsageError(f"-k {self.expr!r}: {what} {where}", _HINT)

    def peek(self) -> str | None:
        return self.tokens[self.index][1] if self.index < len(self.tokens) else None

    def expression(self) -> Matcher:
        left = self.conjunction()
        while self.peek() == "or":
            self.index += 1
            right = self.conjunction()
            left = _either(left, right)
        return left

    def conjunction(self) -> Matcher:
        left = self.negation()
        while self.peek() == "and":
            self.index += 1
            right = self.negation()
            left = _both(left, right)
        return left

    def negation(self) -> Matcher:
        if self.peek() == "not":
            self.index += 1
            inner = self.negation()
            return lambda text: not inner(text)
        return self.atom()

    def atom(self) -> Matcher:
        token = self.peek()
        if token == "(":
            self.index += 1
            inner = self.expression()
            if self.peek() != ")":
                self.fail("expected ')'")
            self.index += 1
            return inner
        if token is None or token == ")" or token in _KEYWORDS:
            self.fail("expected a word")
        self.index += 1
        word = token.lower()
        return lambda text: word in text.lower()


def _either(left: Matcher, right: Matcher) -> Matcher:
    return lambda text: left(text) or right(text)


def _both(left: Matcher, right: Matcher) -> Matcher:
    return lambda text: left(text) and right(text)

"""etdeploy.farm.select and `farm -k EXPR`: a subset of the matrix chosen by words
in the job names, as pytest -k chooses tests, and a farm's progress as a log reads it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from etdeploy.errors import UsageError
from etdeploy.farm import FARM_DOC_NAME, RESULTS_NAME, load_farm_spec
from etdeploy.farm.select import parse_keyword_expr, select_jobs
from tests.support.farm_fixtures import MODELS, QUICK, REPO, farm, lines_of, write_spec

NIGHTLY = REPO / "tests" / "data" / "farm" / "nightly.toml"


def selected(expr: str) -> list[str]:
    return [job.key for job in select_jobs(load_farm_spec(NIGHTLY), expr).jobs]


def test_words_with_and_or_not_and_parentheses_select_by_label_and_key() -> None:
    assert selected("int8 and pixel8") == ["digits|xnnpack|int8|pixel8"]
    assert selected("two_io and not portable and (local or mac)") == [
        "../models/two_io.py:build|xnnpack|none|local",
        "../models/two_io.py:build|xnnpack|none|mac",
    ]
    # `none` is in the key of every float build; case does not matter.
    assert len(selected("NONE")) == 12 and "int8" not in " ".join(selected("none"))
    # not binds tighter than and, and tighter than or.
    assert selected("not digits or int8") == selected("(not digits) or int8")
    assert selected("digits and int8 or two_io and mac") == selected(
        "(digits and int8) or (two_io and mac)"
    )
    # The skipped cells of the subset only.
    subset = select_jobs(load_farm_spec(NIGHTLY), "mac")
    assert [c.label for c in subset.skipped] == ["digits[portable+int8] on mac"]


@pytest.mark.parametrize(
    ("expr", "says"),
    [
        ("", "the expression is empty"),
        ("int8 and", "expected a word at the end"),
        ("(int8 or mac", "expected ')' at the end"),
        ("int8 mac", "expected and/or or the end at 'mac' (column 6)"),
        ("not or mac", "expected a word at 'or' (column 5)"),
    ],
)
def test_a_malformed_expression_is_named_where_it_goes_wrong(expr: str, says: str) -> None:
    with pytest.raises(UsageError, match=re.escape(says)):
        parse_keyword_expr(expr)


def test_an_expression_that_selects_nothing_is_exit_2_before_anything_runs(tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "n.toml", {"models": ["digits"], "devices": ["local"]})
    done = farm(spec, "--out", tmp_path / "out", "-k", "pixle")
    assert done.exit_code == 2, done.output
    assert "-k 'pixle' selects none of the 1 jobs of n.toml" in done.output
    assert "digits[xnnpack] on local" in done.output  # the hint shows what names look like
    assert not (tmp_path / "out").exists()
    done = farm(spec, "--out", tmp_path / "out", "-k", "digits and")
    assert done.exit_code == 2 and "expected a word" in done.output


@pytest.mark.slow
def test_k_runs_the_subset_and_progress_counts_it_with_the_time(tmp_path: Path) -> None:
    spec = write_spec(
        tmp_path / "n.toml",
        {"models": ["digits", f"{MODELS / 'two_io.py'}:build"], "backends": ["xnnpack", "portable"],
         "devices": ["local"], **QUICK},
    )  # fmt: skip
    done = farm(spec, "--out", tmp_path / "out", "-k", "digits and portable")
    assert done.exit_code == 0, done.output
    (result,) = lines_of(tmp_path / "out" / RESULTS_NAME)
    assert result["farm"]["key"] == "digits|portable|none|local"
    doc = json.loads((tmp_path / "out" / FARM_DOC_NAME).read_text())
    assert [m["backend"] for m in doc["matrix"]] == ["portable"]  # the plan is the subset
    # Each progress line: [finished/total mm:ss], as the piped log shows it.
    assert re.search(r"^\[0/1 00:\d\d\] start digits\[portable\] on local$", done.output, re.M)
    assert re.search(
        r"^\[1/1 \d\d:\d\d\] pass digits\[portable\] on local \(\d+\.\d s\)$", done.output, re.M
    ), done.output

"""The report formats of typed results (etdeploy.results): the console rendering of
one run, JUnit XML, and one self-contained HTML file with its plots.

Each reads RunResults and writes or shows them; nothing here runs a job, and only the
command line imports this package (tests/test_layers.py holds that). matplotlib is
imported only by write_html, so the CLI can import this package at start-up.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from etdeploy.lazy import lazy_exports

if TYPE_CHECKING:
    from etdeploy.report.html import write_html
    from etdeploy.report.junit import write_junit

# Loaded on first use (etdeploy.lazy): `etdeploy run` without --junit/--html
# imports neither writer.
__getattr__ = lazy_exports(
    __name__, {"write_html": "etdeploy.report.html", "write_junit": "etdeploy.report.junit"}
)

__all__ = ["write_html", "write_junit"]

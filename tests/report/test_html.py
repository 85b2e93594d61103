"""The HTML report: self-contained, escaped, and showing the matrix in a real
browser (headless Chromium), not only in the file's text."""

from __future__ import annotations

import base64
import json
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from etdeploy.report import compare_to_baseline, write_html
from tests.report.docs import (
    Doc,
    as_result,
    as_results,
    input_error,
    numeric_failure,
    on_device,
    scale_error,
    size_failure,
    with_latency,
)

CHROMIUM = Path("/usr/bin/chromium")


class MatrixReader(HTMLParser):
    """The cells of table#matrix as {(row header, variant, device): (classes, text)},
    and the id of every element, from an HTML document (a file or a browser's DOM)."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.images: list[str] = []
        self.links: list[str] = []
        self.devices: list[str] = []
        self.cells: dict[tuple[str, str, str], tuple[set[str], str]] = {}
        self._in_matrix = False
        self._row: list[str] = []
        self._cell: tuple[str, set[str]] | None = None
        self._text: list[str] = []
        self._column = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(a["id"] or "")
        if tag == "img":
            self.images.append(a.get("src") or "")
        self.links += [value or "" for name, value in attrs if name in ("src", "href")]
        if tag == "table" and a.get("id") == "matrix":
            self._in_matrix = True
        if not self._in_matrix:
            return
        if tag == "tr":
            self._row, self._column = [], 0
        if tag in ("th", "td"):
            self._cell = (tag, set((a.get("class") or "").split()))
            self._text = []

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "table" and self._in_matrix:
            self._in_matrix = False
        if not self._in_matrix or tag not in ("th", "td") or self._cell is None:
            return
        kind, classes = self._cell
        text = " ".join(" ".join(self._text).split())
        if kind == "th" and "device" in classes:
            self.devices.append(text)
        elif kind == "th":
            self._row.append(text)
        else:
            self.cells[(self._row[0], self._row[1], self.devices[self._column])] = (classes, text)
            self._column += 1
        self._cell = None


def _read(html: str) -> MatrixReader:
    reader = MatrixReader()
    reader.feed(html)
    return reader


def _farm(passed: Doc, passed_portable: Doc, infra_error: Doc) -> tuple[list[Doc], list[Doc]]:
    """A 3-row x 2-device farm, and its baseline, with every kind of outcome."""
    hostile = json.loads(json.dumps(passed))
    hostile["job"]["model"] = "<script>alert('x')</script>"
    hostile["warnings"] = ["<b>not bold</b> & friends"]
    hostile["logs"] = ["</pre><img src=http://example.com/x.png>"]
    baseline = [
        with_latency(passed, [1.0 + 0.01 * (i % 5) for i in range(20)]),
        on_device(passed, "pixel8"),
        passed_portable,
        on_device(passed_portable, "pixel8"),
    ]
    results = [
        with_latency(passed, [1.5 + 0.01 * (i % 5) for i in range(20)]),  # slower: regression
        on_device(infra_error, "pixel8"),
        numeric_failure(passed_portable),
        on_device(size_failure(passed_portable), "pixel8"),
        hostile,
        input_error(on_device(infra_error, "local")),
    ]
    # The error results carry the artifact their job would have built, as a farm knows it.
    results[1]["artifact"] = {
        k: passed["artifact"][k] for k in ("sha256", "size_bytes", "backend", "quantization")
    }
    return results, baseline


def test_self_contained_and_escaped(
    tmp_path: Path, passed: Doc, passed_portable: Doc, infra_error: Doc
) -> None:
    results, baseline = _farm(passed, passed_portable, infra_error)
    out = tmp_path / "report.html"
    write_html(as_results(results), out, baseline=as_results(baseline), title="nightly <farm>")
    html = out.read_text()

    assert "<title>nightly &lt;farm&gt;</title>" in html
    assert "<script" not in html  # the hostile model name is text, not a tag
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in html
    assert "&lt;b&gt;not bold&lt;/b&gt; &amp; friends" in html
    # Nothing fetched: every src is a data: URI, every href a fragment, no CSS imports.
    reader = _read(html)
    assert reader.links and all(link.startswith(("data:", "#")) for link in reader.links)
    assert "@import" not in html and "url(" not in html and "<link" not in html
    assert len(reader.images) == 4
    for src in reader.images:
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
    assert {f"job-{i}" for i in range(len(results))} <= reader.ids
    assert "regressions" in reader.ids
    # The worst output, the size verdicts, the error hint and the delegation table are shown.
    assert "Play base module" in html and "over by 8.53 kB" in html
    assert "hint: raise the deadline" in html
    assert "torch.export failed" in html
    assert "100.0% (6/6 nodes)" in html
    assert "median latency 1.02 ms -&gt; 1.52 ms" in html
    assert out.stat().st_mode & 0o777 == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html"]


def test_matrix_cells(tmp_path: Path, passed: Doc, passed_portable: Doc, infra_error: Doc) -> None:
    results, baseline = _farm(passed, passed_portable, infra_error)
    out = tmp_path / "report.html"
    write_html(as_results(results), out, baseline=as_results(baseline))
    _check_matrix(_read(out.read_text()))


def _check_matrix(reader: MatrixReader) -> None:
    assert reader.devices == ["local", "pixel8"]
    cells = reader.cells
    assert len(cells) == 8  # 4 rows (model x backend) x 2 devices
    classes, text = cells[("digits", "xnnpack", "local")]
    assert {"cell", "status-passed", "regressed"} <= classes
    assert text.startswith("REGRESSED 1.52 ms") and "1 regression(s)" in text  # not "pass"
    # Each of these passed in the baseline, so each is also a regression.
    classes, text = cells[("digits", "xnnpack", "pixel8")]
    assert {"status-error", "infra", "regressed"} <= classes
    assert text == "ERROR infra RunnerFailure · 1 regression(s)"
    classes, text = cells[("digits", "portable", "local")]
    assert {"status-failed", "regressed"} <= classes and text.startswith("FAIL numerics max abs")
    classes, text = cells[("digits", "portable", "pixel8")]
    assert {"status-failed", "regressed"} <= classes and text == "FAIL size 1 regression(s)"
    classes, text = cells[("digits", "?", "local")]
    assert {"status-error", "input"} <= classes and text == "ERROR input ModelError"
    assert "status-missing" in cells[("digits", "?", "pixel8")][0]
    classes, text = cells[("<script>alert('x')</script>", "xnnpack", "pixel8")]
    assert "status-missing" in classes
    classes, _ = cells[("<script>alert('x')</script>", "xnnpack", "local")]
    assert "status-passed" in classes and "regressed" not in classes


def test_nothing_to_plot(tmp_path: Path, infra_error: Doc) -> None:
    out = tmp_path / "errors.html"
    write_html([as_result(infra_error)], out)
    html = out.read_text()
    assert html.count("no data") == 4
    assert "ERROR infra" in html
    write_html([], out)
    assert "No results." in out.read_text()


def test_regressions_given_directly(tmp_path: Path, passed: Doc) -> None:
    drifted = scale_error(passed, 1e3)
    regressions = compare_to_baseline([as_result(drifted)], [as_result(passed)], sqnr_drop_db=100.0)
    assert [r.kind for r in regressions] == ["max_abs"]
    out = tmp_path / "r.html"
    write_html([as_result(drifted)], out, regressions=regressions)
    html = out.read_text()
    assert "max_abs: logits: worst max abs error" in html
    assert "regressed" in _read(html).cells[("digits", "xnnpack", "local")][0]


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
            "--no-first-run", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", f"--user-data-dir={tmp_path / 'chromium-profile'}", *args,
        ],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


@pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason="/usr/bin/chromium missing: `apt-get install chromium` (Makefile system-packages) to run it",
)
def test_matrix_in_a_real_browser(
    tmp_path: Path, passed: Doc, passed_portable: Doc, infra_error: Doc
) -> None:
    from PIL import Image

    results, baseline = _farm(passed, passed_portable, infra_error)
    out = tmp_path / "report.html"
    write_html(as_results(results), out, baseline=as_results(baseline))

    dom = _chromium(tmp_path, "--dump-dom", out.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    reader = _read(dom.stdout)
    _check_matrix(reader)  # the browser parsed the same matrix the file holds
    assert len(reader.images) == 4
    assert "<script" not in dom.stdout  # the hostile model name stayed text in the DOM

    shot = tmp_path / "report.png"
    run = _chromium(
        tmp_path,
        "--hide-scrollbars",
        "--window-size=1280,1600",
        f"--screenshot={shot}",
        out.as_uri(),
    )
    assert run.returncode == 0 and shot.exists(), run.stderr[-2000:]
    image = Image.open(shot).convert("RGB")
    assert image.size == (1280, 1600)
    colours = image.getcolors(maxcolors=1 << 20)
    assert colours is not None and len(colours) > 50  # text, cells and plots, not a blank page
    # The passed cell's green and the failed cell's red are on screen.
    pixels = {colour for _, colour in colours}
    assert (0xE8, 0xF5, 0xE9) in pixels  # .status-passed background
    assert (0xFF, 0xEB, 0xEE) in pixels  # .status-failed background


def test_a_large_farm_is_capped_in_the_plots(tmp_path: Path, passed: Doc) -> None:
    results = []
    for i in range(100):
        doc = with_latency(passed, [0.5 + i * 0.01 + 0.001 * (k % 7) for k in range(200)])
        doc["job"]["model"] = f"model{i:03d}"
        results.append(on_device(doc, f"phone{i % 4}"))
    out = tmp_path / "big.html"
    write_html(as_results(results), out)
    html = out.read_text()
    assert "showing the 80 slowest jobs of 100" in html
    assert "showing the 80 outputs with the lowest SQNR of 100" in html
    reader = _read(html)
    assert len(reader.images) == 4 and len(reader.cells) == 400
    assert sum("status-passed" in classes for classes, _ in reader.cells.values()) == 100

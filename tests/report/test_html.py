"""The HTML report: self-contained, escaped, laid out as a daily page (jobs one
line each, open where there is something to read; shared tables once), and
showing the matrix in a real browser (headless Chromium), not only in the file's
text."""

from __future__ import annotations

import base64
import json
import subprocess
from html import escape
from html.parser import HTMLParser
from pathlib import Path

import pytest

from etdeploy.report import write_html
from etdeploy.results import JobKey, NotRun, compare_to_baseline
from tests.results.docs import (
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


class JobsReader(HTMLParser):
    """Each job section (<details class="job ...">) as {data-key: (open, summary
    text, ids inside it)}."""

    def __init__(self) -> None:
        super().__init__()
        self.jobs: dict[str, tuple[bool, str, set[str]]] = {}
        self._key: str | None = None
        self._depth = 0
        self._in_summary = False
        self._summary: list[str] = []
        self._open = False
        self._ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "details" and self._key is None and "job" in (a.get("class") or "").split():
            self._key, self._depth = a.get("data-key") or "", 0
            self._open, self._summary, self._ids = "open" in a, [], set()
        elif self._key is not None:
            if tag == "details":
                self._depth += 1
            if tag == "summary" and self._depth == 0:
                self._in_summary = True
            if a.get("id"):
                self._ids.add(a["id"] or "")

    def handle_data(self, data: str) -> None:
        if self._in_summary:
            self._summary.append(data)

    def handle_endtag(self, tag: str) -> None:
        if self._key is None:
            return
        if tag == "summary":
            self._in_summary = False
        elif tag == "details" and self._depth:
            self._depth -= 1
        elif tag == "details":
            text = " ".join("".join(self._summary).split())
            self.jobs[self._key] = (self._open, text, self._ids)
            self._key = None


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


def test_a_latency_reads_in_the_unit_the_console_prints(tmp_path: Path, passed: Doc) -> None:
    from etdeploy.units import format_ms  # what `etdeploy run` prints

    median = passed["latency_ms"]["median"]  # digits on this machine: 3.3 µs
    out = tmp_path / "report.html"
    write_html(as_results([passed]), out)
    _, text = _read(out.read_text()).cells[("digits", "xnnpack", "local")]
    assert text == f"pass {format_ms(median)}" == "pass 3.3 µs"
    assert f"median {format_ms(median)}" in out.read_text()  # and the job's own line


def test_nothing_to_plot(tmp_path: Path, infra_error: Doc) -> None:
    out = tmp_path / "errors.html"
    write_html([as_result(infra_error)], out)
    html = out.read_text()
    # latency, delegation, error, size and memory: none has anything from an error
    assert html.count("no data") == 5
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


def test_jobs_are_a_line_each_and_open_where_there_is_something_to_read(
    tmp_path: Path, passed: Doc, passed_portable: Doc, infra_error: Doc
) -> None:
    results, baseline = _farm(passed, passed_portable, infra_error)
    out = tmp_path / "report.html"
    write_html(as_results(results), out, baseline=as_results(baseline))
    html = out.read_text()
    jobs = JobsReader()
    jobs.feed(html)
    summary = {key: (opened, text) for key, (opened, text, _) in jobs.jobs.items()}
    hostile = "<script>alert('x')</script>[xnnpack] on local"
    assert summary[hostile][0] is False  # passed, not regressed: collapsed
    assert summary[hostile][1].startswith(f"pass {hostile} median ")
    # Failed, errored, and a pass that regressed: open, and the line says why.
    opened, text = summary["digits[xnnpack] on local"]
    assert opened and text.startswith("REGRESSED digits[xnnpack] on local latency regression: ")
    assert "1.02 ms -> 1.52 ms" in text
    opened, text = summary["digits[portable] on local"]
    assert opened and text.startswith("FAIL numerics digits[portable] on local max abs error")
    assert summary["digits[xnnpack] on pixel8"][0] and summary["digits[?] on local"][0]
    assert summary["digits[?] on local"][1].startswith(
        "ERROR input digits[?] on local torch.export"
    )
    # Each matrix link leads inside its job's section, where following it opens it.
    reader = _read(html)
    for position, (_, _, ids) in enumerate(jobs.jobs.values()):
        assert ids == {f"job-{position}"}
    assert sorted(link for link in reader.links if link.startswith("#job-")) == sorted(
        f"#job-{i}" for i in range(len(results))
    )


def test_what_every_job_shares_is_shown_once(tmp_path: Path, passed: Doc) -> None:
    results = [on_device(passed, device) for device in ("local", "pixel8", "mac", "pixel9")]
    out = tmp_path / "report.html"
    write_html(as_results(results), out)
    html = out.read_text()
    limits = passed["size"]["verdicts"]
    # The store-limits table once, a row per limit, each source with the date it was read.
    assert html.count('id="store-limits"') == 1 and html.count("<table class=store-limits>") == 1
    for limit in limits:
        source = escape(f"{limit['source']} ({limit['read_on']})")
        assert html.count(source) == sum(
            1
            for other in limits
            if (other["source"], other["read_on"]) == (limit["source"], limit["read_on"])
        )
    # Each job says in one line how it fits them, and refers to the table.
    assert html.count(f"fits all {len(limits)} store limits; closest: ") == len(results)
    assert html.count('<a href="#store-limits">(limits)</a>') == len(results)


def test_a_quantized_build_says_why_allclose_fails_it_and_passes(
    tmp_path: Path, passed_int8: Doc, passed_two_io: Doc
) -> None:
    out = tmp_path / "report.html"
    write_html(as_results([passed_int8, passed_two_io]), out)
    html = out.read_text()
    # int8: allclose 0/16 against float, marked and explained by the budget that judged it.
    assert "<td class=muted>0/16<sup>†</sup></td>" in html
    assert (
        "† allclose (atol 0.0001, rtol 0.0001) against the float model is shown for reference "
        "only: a quantized build is not expected to be that close to float. It is judged by its "
        "error budget above (quantization: SQNR &gt;= 15 dB;"
    ) in html
    assert html.count("<sup>†</sup>") == 2  # the int8 job's column head and cell only
    # The float build is judged by allclose itself: no mark.
    assert "<td>4/4</td>" in html


def test_jobs_without_a_result_are_in_the_matrix_and_listed_with_why(
    tmp_path: Path, passed: Doc
) -> None:
    why = "int8 uses the XNNPACK quantizer, which backend portable does not take"
    not_run = [
        NotRun(JobKey("digits", "portable", "int8", "local"), why, skipped=True),
        NotRun(
            JobKey("digits", "xnnpack", None, "pixel8"), "no result: shard 1 of 2 did not report it"
        ),
    ]
    out = tmp_path / "report.html"
    write_html([as_result(passed)], out, not_run=not_run)
    html = out.read_text()
    cells = _read(html).cells
    classes, text = cells[("digits", "portable+int8", "local")]
    assert "status-skipped" in classes and text == "skipped cannot run"
    classes, text = cells[("digits", "xnnpack", "pixel8")]
    assert "status-not-run" in classes and text == "not run no result"  # not a bare "—"
    assert "status-missing" in cells[("digits", "portable+int8", "pixel8")][0]  # never planned
    assert f'<td class="status-skipped">skipped</td><td>{why}</td>' in html
    assert (
        '<td class="status-not-run">not run</td><td>no result: shard 1 of 2 did not report it</td>'
        in html
    )
    assert "1 skipped</span>" in html and "1 not run</span>" in html


@pytest.mark.skipif(not CHROMIUM.exists(), reason="/usr/bin/chromium missing")
def test_sixteen_jobs_fit_in_a_few_screens(
    tmp_path: Path, passed: Doc, passed_portable: Doc, passed_int8: Doc, passed_two_io: Doc
) -> None:
    from PIL import Image

    # A nightly page: 4 builds x 4 phones, all passed (the daily case), one not run.
    devices = ("local", "pixel8", "pixel9", "mac")
    docs = [on_device(doc, d) for doc in (passed, passed_portable, passed_int8, passed_two_io)
            for d in devices]  # fmt: skip
    out = tmp_path / "report.html"
    write_html(
        as_results(docs),
        out,
        not_run=[NotRun(JobKey("digits", "xnnpack", None, "s24"), "no result")],
    )
    shot = tmp_path / "page.png"
    run = _chromium(tmp_path, "--hide-scrollbars", "--window-size=1280,12000", f"--screenshot={shot}",
                    out.as_uri())  # fmt: skip
    assert run.returncode == 0 and shot.exists(), run.stderr[-2000:]
    image = Image.open(shot).convert("RGB")
    pixels = image.load()
    width, height = image.size
    last = max(
        y
        for y in range(0, height, 4)
        if any(pixels[x, y] != (255, 255, 255) for x in range(0, width, 8))
    )
    # The whole page, plots included, in a few screens (every job expanded, as it
    # was, ran past 16,000 px); collapsed jobs are a line each.
    assert 2000 < last < 5000, last


def test_a_localized_job_shows_its_taps_with_the_first_divergence_marked(tmp_path: Path) -> None:
    from tests.results.docs import load_sample

    doc = load_sample("localized_portable")
    out = tmp_path / "report.html"
    write_html(as_results([doc]), out)
    html = out.read_text()
    assert "<h4>Localization</h4>" in html
    first = doc["localization"]["first_divergence"]
    assert first["op"] == "layer_norm" and first["module"] == "norm"
    # Its row, and only its row, is the first divergence; the taps after it carry it.
    assert html.count("FIRST DIVERGENCE") == 1
    row = html[html.index("FIRST DIVERGENCE") - 700 : html.index("FIRST DIVERGENCE")]
    assert "<td>layer_norm</td>" in row and "<td>norm</td>" in row
    assert html.count("<td>carried</td>") == 3
    assert f"first divergence</b>: layer_norm in norm at <code>{first['source']}</code>" in html


def test_an_ill_conditioned_job_marks_its_origin_and_amplifier_and_gives_the_hint(
    tmp_path: Path,
) -> None:
    from tests.results.docs import load_sample

    doc = load_sample("ill_conditioned_portable")  # validated against the schema
    found = doc["localization"]
    out = tmp_path / "report.html"
    write_html(as_results([doc]), out)
    html = out.read_text()
    assert html.count(">ORIGIN<") == 1 and html.count(">AMPLIFIER ×") == 1
    origin_row = html[html.index(">ORIGIN<") - 700 : html.index(">ORIGIN<")]
    assert "<td>mean</td>" in origin_row
    amplifier = found["amplifiers"][0]
    assert f"AMPLIFIER ×{amplifier['factor']:,.0f}" in html
    assert f"relative error × {amplifier['factor']:,.0f} at sub: cancellation" in html
    assert f"<b>hint</b>: {found['hint']}" in html
    assert "ill conditioned" in html  # the status badge

"""`detbench report` on a small real run (genuine nondeterminism on CPU): the Markdown and the
self-contained HTML, the plots, escaping, and a render in headless Chromium where it is
installed."""

from __future__ import annotations

import base64
import html
import importlib.util
import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import matplotlib.image as mpimg
import numpy as np
import pytest

import detbench
from detbench.analysis import verdicts
from detbench.store.results import SUPPORTED_VERSIONS

from .conftest import ROOT, WORKLOADS, detbench_cli

EXPECTED_PLOTS = {"tradeoff:*", "heatmap:demo", "divergence:demo"}
#: Each plot's file name (without its extension).
STEMS = {"tradeoff:*": "tradeoff", "heatmap:demo": "demo-heatmap",
         "divergence:demo": "demo-divergence"}  # fmt: skip
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
#: The screenshot's height: the whole first screens of the report down to its heatmaps (at 3000
#: px the paired design's A/A paragraph pushed the heatmap below the shot; CI counted 0.017% of
#: coloured pixels, the trade-off plot's alone).
HEIGHT = 6000


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("report") / "run"
    proc = detbench_cli(
        "run", "--workload", str(WORKLOADS / "report_demo.py"), "--mode", "default",
        "--mode", "det-algos", "--replicates", "3", "--min-run-time", "0.05", "--device", "cpu",
        "--out", str(out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (out.parent / "stderr.txt").write_text(proc.stderr)  # the plan and the progress
    return out, proc.stdout


class Page(HTMLParser):
    """Every tag with its attributes, the text, and the tables' header cells."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.headers: list[list[str]] = []
        self._th = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag == "table":
            self.headers.append([])
        self._th = tag == "th"

    def handle_endtag(self, tag: str) -> None:
        self._th = False

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._th and self.headers:
            self.headers[-1].append(data)


def parse(path: Path) -> Page:
    page = Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


def test_run_ends_with_the_report(run: tuple[Path, str]) -> None:
    out, stdout = run
    assert f"report: {out / 'report.html'}" in stdout
    assert (out / "report.md").is_file()
    # One workload of the file raises in its step, the others run: the probe worker met it first,
    # and the plan named it with the line of the user's code, before the first worker started.
    raised = "its step raised: fingerprint: ValueError: <script>alert('not escaped')</script>"
    line = 1 + (WORKLOADS / "report_demo.py").read_text().splitlines().index(
        "        raise ValueError(\"<script>alert('not escaped')</script>\")"
    )
    # The console gives the answer's price of full determinism, in the report's words (issue 35).
    price = re.search(
        r"The price of full determinism \(cudnn-det\+det-algos \(det-algos, the same computation "
        r"on a CPU\) vs default\): demo (\d+\.\d+)x \[(\d+\.\d+), (\d+\.\d+)\]",
        stdout,
    )
    assert price, stdout
    cell = f"{price[1]}x \\[{price[2]}, {price[3]}\\]"  # the same figures in the answer's table
    answer = (out / "report.md").read_text().split("## ")[1]
    assert "full determinism: cudnn-det+det-algos (det-algos" in answer and cell in answer
    stderr = (out.parent / "stderr.txt").read_text()
    assert f"{raised}, raised at {WORKLOADS / 'report_demo.py'}:{line} (in step)" in stderr
    assert stderr.index(raised) < stderr.index("] replicate 1/")  # before the first record


def test_html_is_self_contained(run: tuple[Path, str]) -> None:
    page = parse(run[0] / "report.html")
    for tag, attrs in page.tags:
        assert tag not in ("script", "link", "iframe", "object", "embed"), tag
        for name in ("src", "href", "srcset", "action"):
            value = attrs.get(name)
            assert value is None or value.startswith(("data:", "#")), (tag, name, value)
    assert "url(" not in (run[0] / "report.html").read_text()


def test_html_has_the_recommendation_table_and_every_plot(run: tuple[Path, str]) -> None:
    out = run[0]
    page = parse(out / "report.html")
    assert ["suite", "recommended mode", "throughput vs default", "significant",
            "cost vs fastest", "fastest mode", "why"] in page.headers  # fmt: skip
    # A CPU run: nothing to set "before any CUDA work" (issue 28).
    assert page.headers[0] == ["suite (recommended mode)", "set this (Python)",
                               "throughput vs default (95% interval)",
                               "full determinism: cudnn-det+det-algos (det-algos, the same "
                               "computation on a CPU) vs default"]  # fmt: skip
    figures = {a["data-plot"] for t, a in page.tags if t == "figure"}
    assert figures == EXPECTED_PLOTS
    images = [a["src"] for t, a in page.tags if t == "img"]
    assert len(images) == len(EXPECTED_PLOTS)
    for src in images:
        assert src is not None and src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
    for plot in EXPECTED_PLOTS:
        for ext in ("png", "svg"):
            assert (out / "plots" / f"{STEMS[plot]}.{ext}").stat().st_size > 1000
    assert sorted(p.name for p in (out / "plots").iterdir()) == sorted(
        f"{stem}.{ext}" for stem in STEMS.values() for ext in ("png", "svg")
    )


def test_markdown_links_every_plot(run: tuple[Path, str]) -> None:
    out = run[0]
    md = (out / "report.md").read_text()
    for plot in EXPECTED_PLOTS:
        stem = STEMS[plot]
        assert f"(plots/{stem}.png)" in md and f"(plots/{stem}.svg)" in md
    assert "| suite | recommended mode | throughput vs default | significant |" in md


def test_names_and_messages_are_escaped(run: tuple[Path, str]) -> None:
    out = run[0]
    for name in ("report.html", "report.md"):
        text = (out / name).read_text()
        assert "<img src=x" not in text and "<script>" not in text, name
        assert "&lt;img src=x onerror=alert(1)&gt;&amp;co" in text, name
        assert "&lt;script&gt;alert(" in text, name
    page = parse(out / "report.html")
    assert "demo/<img src=x onerror=alert(1)>&co ran in no mode (error): it is left out of its " \
           "suite's recommendation." in "".join(page.text)  # fmt: skip


def test_the_verdicts_in_the_report(run: tuple[Path, str]) -> None:
    """The racing training loop is nondeterministic by default and reproducible with
    deterministic algorithms; put_ without accumulate is unsupported there."""
    out = run[0]
    text = "".join(parse(out / "report.html").text)
    v = {
        (r["workload"], r["mode"]): r
        for r in verdicts(detbench.load_results(out)).to_dict("records")
    }
    racing = v[("racing_embedding_training", "default")]
    assert racing["verdict"] == "nondeterministic" and racing["distinct_fingerprints"] >= 2
    assert f"nondeterministic ({racing['distinct_fingerprints']} distinct of 3)" in text
    assert v[("racing_embedding_training", "det-algos")]["verdict"] == "reproducible"
    assert v[("put_without_accumulate", "det-algos")]["verdict"] == "unsupported"
    assert "This run was on a CPU." in text


def test_report_is_rewritten_identically(run: tuple[Path, str]) -> None:
    out = run[0]
    before = (out / "report.md").read_text()
    proc = detbench_cli("report", str(out))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == f"report: {out / 'report.html'}"
    assert (out / "report.md").read_text() == before


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no results.jsonl in {d}"),
        (
            '{"schema_version": 1, "suite": "s"',
            "{d}/results.jsonl:1: truncated record (no end of line)",
        ),
        (
            '{"schema_version": 99}\n',
            "{d}/results.jsonl:1: unknown schema version 99 (this detbench reads "
            + ", ".join(map(str, SUPPORTED_VERSIONS))
            + ")",
        ),
    ],
)
def test_report_bad_input(tmp_path: Path, content: str | None, message: str) -> None:
    d = tmp_path / "run"
    d.mkdir()
    if content is not None:
        (d / "results.jsonl").write_text(content)
    proc = detbench_cli("report", str(d))
    assert proc.returncode == 2
    assert proc.stderr.strip() == "detbench: error: " + message.format(d=d)
    assert sorted(p.name for p in d.iterdir()) == ([] if content is None else ["results.jsonl"])


def screenshot(page: Path, shot: Path, profile: Path) -> np.ndarray:
    """``page`` rendered by headless Chromium (no network), as an RGB array."""
    proc = subprocess.run(
        [
            str(CHROMIUM),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={profile}",
            "--hide-scrollbars",
            f"--window-size=1280,{HEIGHT}",
            f"--screenshot={shot}",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    img: np.ndarray = mpimg.imread(shot)[..., :3]
    return img


def coloured(img: np.ndarray) -> float:
    """The fraction of pixels with a saturated colour (the page's own style has none)."""
    return float((img.max(axis=2) - img.min(axis=2) > 0.35).mean())


@pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium (Debian package 'chromium')")
def test_report_renders_in_headless_chromium(run: tuple[Path, str], tmp_path: Path) -> None:
    """The HTML opened by a real browser with no network shows the embedded plots: the same page
    with its images blanked out has no colour at all."""
    page = run[0] / "report.html"
    img = screenshot(page, tmp_path / "shot.png", tmp_path / "profile")
    assert img.shape[:2] == (HEIGHT, 1280)
    assert (img.min(axis=2) < 0.2).mean() > 0.002  # dark text
    assert np.isclose(img[0:5], 1.0).all()  # the white margin above the title
    blank = tmp_path / "blank.html"
    blank.write_text(re.sub(r"<img [^>]*>", "", page.read_text()))
    bare = screenshot(blank, tmp_path / "bare.png", tmp_path / "profile2")
    assert coloured(bare) == 0.0
    # over a thousand coloured pixels from the plots (1523 with the figure of issue 28)
    assert coloured(img) > 0.0002


#: Measures the page once it has loaded, into a <pre id="probe"> that --dump-dom prints: the
#: document's width against the window's, every image, the first section's text. Injected into a
#: copy of the report only (the report itself holds no script).
PROBE = """<script>
window.addEventListener('load', () => {
  const imgs = Array.from(document.images);
  const answer = document.getElementById('the-answer');
  let text = '';
  for (let e = answer.nextElementSibling; e && !/^H[12]$/.test(e.tagName);
       e = e.nextElementSibling) { text += e.textContent + '\\n'; }
  const out = {scrollWidth: document.documentElement.scrollWidth, width: window.innerWidth,
    images: imgs.length, loaded: imgs.filter(i => i.complete && i.naturalWidth > 0).length,
    answer: text};
  const pre = document.createElement('pre');
  pre.id = 'probe';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


def measured(page: Path, tmp_path: Path, width: int = 1400) -> dict[str, Any]:
    """``page`` loaded by headless Chromium in a window ``width`` pixels wide, measured by
    ``PROBE``."""
    probe = tmp_path / "probe.html"
    probe.write_text(page.read_text().replace("</body>", PROBE + "</body>"))
    proc = subprocess.run(
        [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         f"--user-data-dir={tmp_path / 'profile'}", f"--window-size={width},900",
         "--virtual-time-budget=10000", "--dump-dom", probe.as_uri()],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    found = re.search(r'<pre id="probe">(.*?)</pre>', proc.stdout, re.S)
    assert found, proc.stdout[-2000:]
    out: dict[str, Any] = json.loads(html.unescape(found.group(1)))
    return out


@pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium (Debian package 'chromium')")
def test_report_fits_a_1400_pixel_window(run: tuple[Path, str], tmp_path: Path) -> None:
    """At 1400 px: no horizontal overflow, every image loads, and the first section names the
    suite's recommended settings and their cost."""
    m = measured(run[0] / "report.html", tmp_path)
    assert m["scrollWidth"] <= m["width"] == 1400
    assert m["images"] == len(EXPECTED_PLOTS) and m["loaded"] == m["images"]
    # No one mode makes all three workloads that ran reproducible: the racing one needs
    # deterministic algorithms, under which put_ without accumulate is unsupported.
    # Where default raced on a workload that det-algos fixes, det-algos is the answer (issue 28);
    # a race that did not show in this run leaves default.
    assert re.search(r"demo \(no one mode: (default|det-algos) makes 2 of 3 reproducible; ",
                     m["answer"]), m["answer"]  # fmt: skip
    assert "throughput vs default" in m["answer"] and "This run was on a CPU" in m["answer"]
    assert "deterministic algorithms (1 of 2 workloads, 1 made reproducible)" in m["answer"]


@pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium (Debian package 'chromium')")
def test_page_check_lays_the_report_out_at_1400_and_800_pixels(
    run: tuple[Path, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """tools/page_check.py, as the published reports were checked with it: at both widths the
    page fits, every figure loads and stays on the page, drawn at its own size at 1400 px; and
    a page wider than its window fails it."""
    spec = importlib.util.spec_from_file_location("page_check", ROOT / "tools" / "page_check.py")
    assert spec is not None and spec.loader is not None
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    out = run[0]
    assert tool.main([str(out)]) == 0
    said = capsys.readouterr().out
    assert f"{out} at 1400 px: fits (3 of 3 figures loaded, smallest scale 1.00, " in said, said
    assert f"{out} at 800 px: fits (3 of 3 figures loaded, smallest scale " in said, said
    wide = tmp_path / "wide"
    wide.mkdir()
    (wide / "report.html").write_text(
        '<html><body><div style="width: 2000px">a table nobody can scroll</div></body></html>'
    )
    assert tool.main([str(wide), "--width", "800"]) == 1
    assert "the page is 2008 px wide in a 800 px window" in capsys.readouterr().out


def test_recommendation_row_from_known_records(tmp_path: Path) -> None:
    """Known timings: det-algos halves one workload's throughput (significant) and leaves the
    other's (not significant); it is the only mode reproducible for both, so it is the simplest
    reproducible mode, and the row says so."""
    from detbench.report.write import write_report

    from .synthetic import env, fast_and_same, write_run

    write_run(tmp_path, [x for r in range(3) for x in fast_and_same(r)], env(gpu=None))
    md_path, _ = write_report(tmp_path)
    md = md_path.read_text()
    assert (
        "| s | det-algos | 0.71x \\[0.71, 0.71\\] | 1 of 2 | 29% | default | fewest changes from "
        "default (1: deterministic\\_algorithms) |"
    ) in md
    assert "| s (det-algos) | `os.environ.setdefault(" in md
    assert "Recommendations: the mode bitwise identical in every replicate" in md

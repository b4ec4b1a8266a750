"""Each report as a reader's browser lays it out: `python tools/page_check.py DIR... [--width N]...`
loads each DIR/report.html in headless Chromium (no network) at each width (default 1400 and 800
pixels) and prints, per page and width:

- whether the page overflows the window sideways (the document wider than the window);
- the figures that loaded, of those the page holds, and any that reach past the page's right edge;
- the smallest scale at which a figure is drawn (its width on the page over its own width: text
  drawn at 9 pt in a figure reads at 9 pt x that scale);
- the tables wider than the page, which scroll sideways inside their box (nothing is cut: the
  reader scrolls them).

It exits 1 where a page overflows, a figure does not load, or a figure reaches past the edge.
Chromium is Debian's package `chromium`."""

from __future__ import annotations

import argparse
import html
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

#: Measures the page once it has loaded, into a <pre id="probe"> that --dump-dom prints. Put into
#: a copy of the report only (the report itself holds no script).
PROBE = """<script>
window.addEventListener('load', () => {
  const page = document.documentElement.clientWidth;
  const imgs = Array.from(document.images).map(i => {
    const r = i.getBoundingClientRect();
    return {alt: i.alt, loaded: i.complete && i.naturalWidth > 0, shown: r.width,
            natural: i.naturalWidth, right: r.right};
  });
  const wide = Array.from(document.querySelectorAll('.scroll'))
    .filter(e => e.scrollWidth > e.clientWidth + 1).length;
  const out = {scrollWidth: document.documentElement.scrollWidth, width: window.innerWidth,
               page: page, images: imgs, scrolling_tables: wide};
  const pre = document.createElement('pre');
  pre.id = 'probe';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        raise SystemExit("page_check: needs Chromium (Debian package 'chromium')")
    return found


def measure(page: Path, width: int, work: Path) -> dict[str, Any]:
    """``page`` laid out by headless Chromium in a window ``width`` pixels wide (``PROBE``)."""
    probe = work / f"probe-{width}.html"
    probe.write_text(page.read_text(encoding="utf-8").replace("</body>", PROBE + "</body>"))
    proc = subprocess.run(
        [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         f"--user-data-dir={work / 'profile'}", f"--window-size={width},900",
         "--virtual-time-budget=10000", "--dump-dom", probe.as_uri()],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    found = re.search(r'<pre id="probe">(.*?)</pre>', proc.stdout, re.S)
    if proc.returncode != 0 or not found:
        raise SystemExit(f"page_check: Chromium could not lay out {page}: {proc.stderr[-500:]}")
    out: dict[str, Any] = json.loads(html.unescape(found.group(1)))
    return out


def verdict(m: dict[str, Any]) -> tuple[list[str], str]:
    """(what is wrong, the line's figures) of one measured page."""
    wrong = []
    if m["scrollWidth"] > m["width"]:
        wrong.append(f"the page is {m['scrollWidth']} px wide in a {m['width']} px window")
    imgs = m["images"]
    missing = [i["alt"] for i in imgs if not i["loaded"]]
    if missing:
        wrong.append(f"figures not loaded: {', '.join(missing)}")
    past = [i["alt"] for i in imgs if i["right"] > m["page"] + 1]
    if past:
        wrong.append(f"figures past the right edge: {', '.join(past)}")
    scales = [i["shown"] / i["natural"] for i in imgs if i["loaded"] and i["natural"]]
    least = f"{min(scales):.2f}" if scales else "-"
    said = (
        f"{len(imgs) - len(missing)} of {len(imgs)} figures loaded, smallest scale {least}, "
        f"{m['scrolling_tables']} tables scroll sideways"
    )
    return wrong, said


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dirs", nargs="+", type=Path, help="run folders holding report.html")
    ap.add_argument("--width", type=int, action="append", help="pixels (default 1400 and 800)")
    args = ap.parse_args(argv)
    widths = args.width or [1400, 800]
    bad = 0
    with tempfile.TemporaryDirectory(prefix="detbench-page-check-") as tmp:
        for d in args.dirs:
            page = d / "report.html"
            if not page.is_file():
                raise SystemExit(f"page_check: no report.html in {d}")
            for w in widths:
                wrong, said = verdict(measure(page, w, Path(tmp)))
                bad += bool(wrong)
                print(f"{d} at {w} px: " + ("; ".join(wrong) or "fits") + f" ({said})")
    print(f"{bad} of {len(args.dirs) * len(widths)} layouts with a problem")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

"""The report's blocks and their two renderings, Markdown and a self-contained HTML page (figures
and style inline), so the two say the same thing. All text is escaped: a run's may hold markup."""

from __future__ import annotations

import base64
import html
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from detbench.report.plots import Plot


@dataclass(frozen=True)
class Code:
    """A table cell or paragraph shown as code."""

    text: str


@dataclass(frozen=True)
class Heading:
    level: int
    text: str


@dataclass(frozen=True)
class Para:
    text: str
    #: A warning the reader must not miss: bold in Markdown, on a yellow band in HTML.
    alert: bool = False


@dataclass(frozen=True)
class Bullets:
    items: Sequence[str]


@dataclass(frozen=True)
class Table:
    header: Sequence[str]
    rows: Sequence[Sequence[str | Code]]
    caption: str = ""


@dataclass(frozen=True)
class Figure:
    plot: Plot


@dataclass(frozen=True)
class Details:
    """Blocks collapsed under a one-line summary (``<details>``: GitHub's Markdown too)."""

    summary: str
    blocks: Sequence[Block]


Block = Heading | Para | Bullets | Table | Figure | Code | Details


def md_text(s: str) -> str:
    """Text for Markdown: HTML (passed through by a renderer) and Markdown's markup escaped."""
    out = html.escape(s, quote=False)
    for ch in "\\`*_[]|":
        out = out.replace(ch, "\\" + ch)
    return out


def _md_cell(c: str | Code) -> str:
    if isinstance(c, Code):
        lines = [f"`{line}`" for line in c.text.splitlines()] or ["``"]
        return "<br>".join(line.replace("|", "\\|") for line in lines)
    return md_text(c).replace("\n", "<br>")


def to_markdown(blocks: Sequence[Block], base: Path) -> str:
    out: list[str] = []
    for b in blocks:
        if isinstance(b, Details):
            inner = to_markdown(b.blocks, base).rstrip("\n")
            out.append(
                f"<details><summary>{html.escape(b.summary)}</summary>\n\n{inner}\n\n</details>"
            )
        elif isinstance(b, Heading):
            out.append(f"{'#' * b.level} {md_text(b.text)}")
        elif isinstance(b, Para):
            out.append(f"**{md_text(b.text)}**" if b.alert else md_text(b.text))
        elif isinstance(b, Bullets):
            out.append("\n".join(f"- {md_text(i)}" for i in b.items))
        elif isinstance(b, Code):
            out.append(f"```python\n{b.text}\n```")
        elif isinstance(b, Table):
            lines = [f"*{md_text(b.caption)}*\n"] if b.caption else []
            lines.append("| " + " | ".join(md_text(h) for h in b.header) + " |")
            lines.append("|" + "---|" * len(b.header))
            lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in b.rows]
            out.append("\n".join(lines))
        elif isinstance(b, Figure):
            png, svg = (os.path.relpath(p, base) for p in (b.plot.png, b.plot.svg))
            out.append(f"![{md_text(b.plot.title)}]({png})\n\n[SVG]({svg})")
    return "\n\n".join(out) + "\n"


def _h(s: str) -> str:
    return html.escape(s, quote=True)


#: Cells up to this many characters are never wrapped: a browser otherwise breaks a mode name
#: at its hyphens ("det-" / "algos") or an interval after its comma once a table is wide.
NOWRAP_CHARS = 28


def _html_cell(c: str | Code) -> str:
    """Cells do not wrap (the style's default), but for long text, which gets class ``w``."""
    if isinstance(c, Code):
        return f'<td class="w"><code>{_h(c.text)}</code></td>'.replace("\n", "<br>")
    if len(c) <= NOWRAP_CHARS and "\n" not in c:
        return f"<td>{_h(c)}</td>"
    return f'<td class="w">{_h(c)}</td>'.replace("\n", "<br>")


STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; max-width: 1400px;
       margin: 2em auto; padding: 0 1em; color: #1a1a1a; line-height: 1.45; }
h1 { font-size: 1.6em; } h2 { border-bottom: 1px solid #ddd; padding-bottom: .2em; }
table { border-collapse: collapse; margin: .6em 0 1.4em; font-size: .88em; }
th, td { border: 1px solid #ccc; padding: .25em .55em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; } tr:nth-child(even) td { background: #fafafa; }
td { white-space: nowrap; } td.w { white-space: normal; } .scroll { overflow-x: auto; }
code, pre { font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: .92em; }
pre { background: #f6f6f6; padding: .6em; overflow-x: auto; }
figure { margin: 1em 0 2em; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { font-size: .9em; color: #555; }
.caption { font-style: italic; color: #444; margin-bottom: .2em; }
details { margin: .4em 0 1em; } summary { cursor: pointer; color: #124; }
.busy { background: #fff3cd; border-left: 4px solid #8a6d3b;
       padding: .4em .7em; }
"""


def _html_body(blocks: Sequence[Block]) -> list[str]:
    body: list[str] = []
    for b in blocks:
        if isinstance(b, Details):
            body.append(
                f"<details><summary>{_h(b.summary)}</summary>"
                + "\n".join(_html_body(b.blocks))
                + "</details>"
            )
        elif isinstance(b, Heading):
            anchor = "".join(ch if ch.isalnum() else "-" for ch in b.text.lower()).strip("-")
            body.append(f'<h{b.level} id="{_h(anchor)}">{_h(b.text)}</h{b.level}>')
        elif isinstance(b, Para):
            body.append(f'<p class="busy">{_h(b.text)}</p>' if b.alert else f"<p>{_h(b.text)}</p>")
        elif isinstance(b, Bullets):
            body.append("<ul>" + "".join(f"<li>{_h(i)}</li>" for i in b.items) + "</ul>")
        elif isinstance(b, Code):
            body.append(f"<pre><code>{_h(b.text)}</code></pre>")
        elif isinstance(b, Table):
            cap = f'<div class="caption">{_h(b.caption)}</div>' if b.caption else ""
            head = "".join(f"<th>{_h(h)}</th>" for h in b.header)
            rows = "".join("<tr>" + "".join(_html_cell(c) for c in row) + "</tr>" for row in b.rows)
            body.append(
                f'{cap}<div class="scroll"><table><thead><tr>{head}</tr></thead>'
                f"<tbody>{rows}</tbody></table></div>"
            )
        elif isinstance(b, Figure):
            data = base64.b64encode(b.plot.png.read_bytes()).decode("ascii")
            body.append(
                f'<figure data-plot="{_h(b.plot.kind)}:{_h(b.plot.suite)}">'
                f'<img alt="{_h(b.plot.title)}" src="data:image/png;base64,{data}">'
                f"<figcaption>{_h(b.plot.title)}</figcaption></figure>"
            )
    return body


def to_html(blocks: Sequence[Block], title: str) -> str:
    body = _html_body(blocks)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_h(title)}</title><style>{STYLE}</style></head>\n<body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )


def _finite(x: Any) -> float | None:
    try:
        f = float(x)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def num(x: Any, fmt: str = ".3g") -> str:
    """``x`` formatted, or an en dash where it is missing or not finite."""
    f = _finite(x)
    return "–" if f is None else format(f, fmt)


def pct(x: Any) -> str:
    """A fraction as a whole percentage (0.29 -> "29%")."""
    f = _finite(x)
    return "–" if f is None else f"{100 * f:.0f}%"


MIB = float(1 << 20)
GIB = float(1 << 30)


def size(nbytes: Any) -> str:
    """A byte count in KiB, MiB or GiB (binary units, as torch's allocator reports)."""
    f = _finite(nbytes)
    if f is None:
        return "–"
    if f >= GIB:
        return f"{f / GIB:.2f} GiB"
    return f"{f / MIB:.3g} MiB" if f >= MIB else f"{f / 1024:.3g} KiB"


def text_table(rows: Sequence[Sequence[str]]) -> list[str]:
    """``rows`` (the header first) as lines of plain text, in columns two spaces apart."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]

"""Printed lines as two runs can compare them: what a terminal shows, clock readings masked.

A line is what a terminal shows at its end: text after a ``\\r`` overwrites the line from the
first column, so a tqdm bar counts once, in its last state; the overwritten redraws, whose number
follows the clock, are set aside, and so is a bar short of its end (``3/24``: with two bars on a
stream, or a bar beside prints, the state a line catches follows the clock). Blank lines are
dropped; a line with no letter or digit left outside the masks is set aside whole.

``MASKS`` (each kind set aside once per stream or file, with a count): temporary paths
(``<tmp>``), dates, times and run stamps (``<time>``), durations and numbers after a time word
or key (``<elapsed>``), rates (``<rate>``), process ids (``<pid>``) and addresses (``<addr>``: 9
to 12 hex digits, which float32 and float64 bit patterns never have). They are kept narrow, each
tied to a unit, a key word or a clock's shape, because a mask that covers a real difference
turns a verdict into "reproducible" when it is not; masking a deterministic value only loses a
comparison. Other numbers (losses, ``lr 3e-4``, step counters) stay as printed. Not masked, so
a difference there is reported: epoch seconds, random run names, dates in other forms.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field

# a number, with thousands separated by commas too (``22,194 tok/s``)
_NUM = r"[-+]?(?:\d{1,3}(?:,\d{3})+(?:\.\d*)?|\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_N = rf"(?<![\w.])(?P<v>{_NUM})"  # a number standing alone: the part masked
_KEY_SEP = r"\b['\"]?\s*[:=]?\s*"
_TMP_ROOTS = {"/tmp", "/var/tmp", "/dev/shm", "/var/folders", "/private/var/folders"}
# where tempfile puts its files when the environment says (tempfile.gettempdir() would do, but
# it caches its answer in the tempfile module: importing this module changes no global state)
_TMP_ROOTS |= {
    os.path.normpath(v) for k in ("TMPDIR", "TEMP", "TMP") if len(v := os.environ.get(k, "")) > 1
}
_TMP = "|".join(re.escape(r) for r in sorted(_TMP_ROOTS, key=len, reverse=True))
_DATE = r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+|,\d{3})?)?)?"
_UNITS = r"(?:ns|us|µs|μs|ms|msecs?|secs?|seconds?|s|mins?|minutes?|hrs?|hours?|h)"
_CLOCK = r"\d+(?::\d{2})+(?:\.\d+)?"
_KEYS_ELAPSED = (
    r"took|elapsed|duration|runtime|time|eta|dt|timestamp|wall(?:_?time)?"
    r"|\w+_(?:time|runtime|timestamp|ms|secs?|seconds)"
)
_KEYS_RATE = r"mfu|throughput|fps|speed|\w+_per_sec(?:ond)?"
# a unit written as the label before its number: ``ms/batch 78.66``, ``tokens/s 12345``
_UNIT_LABEL_TIME = r"(?:ns|us|µs|ms|s|secs?)/[a-z]+"
_UNIT_LABEL_RATE = r"[a-z]+/s(?:ec(?:ond)?)?"
#: (kind, pattern), applied in order: group ``v`` (else the whole match) becomes ``<kind>``.
MASKS = [
    (kind, re.compile(pattern, re.IGNORECASE))
    for kind, pattern in [
        ("tmp", rf"(?:{_TMP})/[^\s'\",;)\]}}>]*|[a-z]:\\\S*\\Temp\\[^\s'\",;]*"),
        ("time", rf"{_DATE}(?:Z|[+-]\d\d:?\d\d)?"),
        ("time", r"\b(?:[A-Z][a-z]{2}\d{2}_\d{2}-\d{2}-\d{2}|\d{8}[-_]\d{6})(?!\d)"),
        ("elapsed", r"(?<=\[)(?:\d+:)?\d{1,2}:\d{2}(?:<(?:\?|(?:\d+:)?\d{1,2}:\d{2}))?(?=[,\]])"),
        ("time", r"(?<![\w.:])\d{1,2}:\d{2}:\d{2}(?:\.\d+|,\d{3})?\b"),
        ("rate", rf"(?<![\w.])(?:\?|{_NUM})\s?(?:[a-z]+/s(?:ec(?:ond)?)?|s/[a-z]+)(?!\w)"),
        ("rate", rf"{_N}\s?(?:[a-z]+\s+per\s+sec(?:ond)?|[kmgtpe]?flops)\b"),
        ("rate", rf"\b(?:{_KEYS_RATE}){_KEY_SEP}{_N}"),
        ("elapsed", rf"(?<![\w/])(?:{_UNIT_LABEL_TIME}){_KEY_SEP}{_N}"),
        ("rate", rf"(?<![\w/])(?:{_UNIT_LABEL_RATE}){_KEY_SEP}{_N}"),
        ("elapsed", rf"(?<![\w.])(?:(?:\d+h\s?)?\d+m\s?{_NUM}s\b|{_NUM}\s?{_UNITS}(?!\w))"),
        ("elapsed", rf"\b(?:{_KEYS_ELAPSED}){_KEY_SEP}(?P<v>{_CLOCK}|{_NUM})(?![\w.])"),
        ("pid", r"\b(?:pid|process[ _]id)\b\s*[:=]?\s*(?P<v>\d+)"),
        ("addr", r"\bat (?P<v>0x[0-9a-f]+)\b|\b0x[0-9a-f]{9,12}\b"),
    ]
]
_PLACEHOLDER = re.compile(r"<(?:tmp|time|elapsed|rate|pid|addr)>")
#: kind: (what is set aside, why)
_WHY = {
    "tmp": ("temporary paths", "tempfile names are random in each process"),
    "time": ("wall-clock timestamps", "a clock reading differs between any two runs"),
    "elapsed": ("elapsed times", "durations follow the machine's load, not the results' bits"),
    "rate": ("rates and throughputs", "a rate is work over elapsed time"),
    "pid": ("process ids", "each run is a fresh process with an id of its own"),
    "addr": ("memory addresses", "allocation addresses differ between processes (ASLR)"),
    "redraw": (
        "progress-bar redraws overwritten after \\r",
        "how often a bar redraws follows the clock; the line a terminal shows at the end is kept",
    ),
    "whole": ("lines with nothing left once masked", "nothing in them can be compared"),
    "wall": ("the wall time of each logged event", "a clock reading differs between any two runs"),
    "bar": (
        "progress bars short of their end",
        "how far a bar had got when another line was printed, or another bar moved the cursor, "
        "follows the clock; a bar's last state is kept",
    ),
}
_STEP = (
    re.compile(r"\b(?:step|iter(?:ation)?|it)\b\s*[:=#]?\s*(\d+)", re.IGNORECASE),
    re.compile(r"\[\s*(\d+)\s*/\s*\d+\s*\]"),
    re.compile(r"^\s*(\d+)\s*/\s*\d+"),
)
_PADDED = re.compile(r"\s{2,}(<(?:rate|elapsed|time)>)")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
#: A tqdm bar's state: ``NN%|...| n/total [``.
_BAR = re.compile(r"\d+%\|[^|]*\|\s*(\d+)/(\d+)\s*\[")
_EPOCH = re.compile(r"\bepoch\b\s*[:=#]?\s*(\d+)", re.IGNORECASE)
_NUMBER = re.compile(rf"(?<![\w.])(?:{_NUM}|[-+]?(?:nan|inf(?:inity)?)\b)", re.IGNORECASE)


_ELAPSED_KEY = re.compile(
    rf"^(?:{_KEYS_ELAPSED}|\w+_(?:duration|elapsed|s)|(?:time|elapsed|duration)_\w+)$", re.I
)
_RATE_KEY = re.compile(rf"^(?:{_KEYS_RATE}|\w+_per_s)$|^{_UNIT_LABEL_RATE}$", re.I)
_TIME_KEY = re.compile(r"^(?:date|datetime|\w+_(?:at|date)|created|started|finished)$", re.I)


def timing_kind(key: str) -> str | None:
    """The kind of clock reading a JSON key, CSV column or logged tag names, or None."""
    key = key.strip()
    tail = key.rsplit(".", 1)[-1].split(":")[-1]
    if _RATE_KEY.search(tail):
        return "rate"
    if re.match(rf"^{_UNIT_LABEL_TIME}$", tail, re.I):
        return "elapsed"
    last = re.split(r"[./:\[\]]+", key.rstrip("]"))[-1]
    if _RATE_KEY.match(last):
        return "rate"
    if _ELAPSED_KEY.match(last) or re.match(rf"^{_UNIT_LABEL_TIME}$", last, re.I):
        return "elapsed"
    if _TIME_KEY.match(last):
        return "time"
    return None


@dataclass(frozen=True)
class SetAside:
    """Something a run left that is not compared, and why."""

    what: str
    why: str


@dataclass(frozen=True)
class Line:
    """One comparable line: ``line_no`` counts 1-based ``\\n``-lines of the raw text (what
    ``sed -n Np`` prints), ``text`` is the line as shown, ``masked`` what is compared."""

    line_no: int
    text: str
    masked: str
    step: int | None
    epoch: int | None


@dataclass
class Asides:
    """What was set aside, counted per (source, kind), and entries added whole (``extra``)."""

    seen: dict[tuple[str, str], list[int]] = field(default_factory=dict)  # [count, first line]
    extra: list[SetAside] = field(default_factory=list)

    def add(self, source: str, kind: str, line_no: int, count: int = 1) -> None:
        self.seen.setdefault((source, kind), [0, line_no])[0] += count

    def listed(self) -> list[SetAside]:
        counted = [
            SetAside(f"{src}: {_WHY[k][0]} ({n}, first on line {first})", _WHY[k][1])
            for (src, k), (n, first) in self.seen.items()
        ]
        return counted + self.extra


def mask_line(text: str) -> tuple[str, list[str]]:
    """``text`` with ``MASKS`` applied, and the kind of each value masked."""
    kinds: list[str] = []
    for kind, pattern in MASKS:

        def put(m: re.Match[str], kind: str = kind) -> str:
            kinds.append(kind)
            if m.groupdict().get("v") is None:
                return f"<{kind}>"
            s, e = m.start("v") - m.start(), m.end("v") - m.start()
            return m.group(0)[:s] + f"<{kind}>" + m.group(0)[e:]

        text = pattern.sub(put, text)
    return text, kinds


def step_of(text: str) -> tuple[int | None, int | None]:
    """The step (``step 12``, ``[12/60]``, ``12/60`` first) and epoch a line names, or None each."""
    step = next((int(m.group(1)) for p in _STEP if (m := p.search(text))), None)
    epoch = _EPOCH.search(text)
    return step, int(epoch.group(1)) if epoch else None


def lines(text: str, source: str, asides: Asides) -> list[Line]:
    """The comparable lines of ``text``; what is set aside goes to ``asides`` under ``source``."""
    kept: list[Line] = []
    for no, raw in enumerate(text.split("\n"), 1):
        parts = _ANSI.sub("", raw).split("\r")  # cursor moves: tqdm redrawing another line
        shown: list[str] = []
        for part in parts:  # as a terminal: after \r, text overwrites the line from column 0
            shown[: len(part)] = part
        if (redraws := sum(1 for p in parts if p.strip()) - 1) > 0:
            asides.add(source, "redraw", no, redraws)
        line = "".join(shown).rstrip()
        if not line.strip():
            continue
        bar = _BAR.search(line)
        if bar and bar.group(1) != bar.group(2):
            asides.add(source, "bar", no)
            continue
        masked, kinds = mask_line(line)
        # a masked value's padding follows its width (tqdm pads its rate: "  1.44it/s")
        masked = _PADDED.sub(r" \1", masked)
        for kind in dict.fromkeys(kinds):
            asides.add(source, kind, no, kinds.count(kind))
        if not re.search(r"[^\W_]", _PLACEHOLDER.sub("", masked)):
            asides.add(source, "whole", no)
            continue
        kept.append(Line(no, line, masked, *step_of(line)))
    return kept


def num_diff(x: float, y: float) -> float:
    """|x - y|, NaN-safe: two NaNs (and equal infinities) are 0 apart, a NaN and a number inf."""
    if x == y or (math.isnan(x) and math.isnan(y)):
        return 0.0
    return math.inf if math.isnan(x) or math.isnan(y) else abs(x - y)


def line_diff(x: str, y: str) -> float | None:
    """The largest |a - b| of two masked lines that differ only in numbers, else None."""
    if _NUMBER.sub("#", x) != _NUMBER.sub("#", y):
        return None
    pairs = zip(_NUMBER.findall(x), _NUMBER.findall(y), strict=True)
    return max(
        (num_diff(float(p.replace(",", "")), float(q.replace(",", ""))) for p, q in pairs),
        default=None,
    )

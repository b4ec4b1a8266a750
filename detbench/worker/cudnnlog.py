"""Which cuDNN engine each convolution of a workload ran, read from cuDNN's own API log.

With ``cudnn.benchmark`` on, torch times cuDNN's candidate engines in each process and keeps the
fastest; the next process may keep another, with other bits. torch does not say which; cuDNN 9's
API log (level 3) does: each ``cudnnBackendExecuteInternal()`` block names the operation, its
tensors' dimensions, the ``engine_id`` and its knobs. The autotuner executes every candidate,
then the chosen one runs at every step, so the last configuration executed for an (operation,
shapes) is the one settled on, and the distinct ones count the candidates tried.

cuDNN reads its variables when it loads, so the runner sets them before a worker starts
(``--cudnn-log``). The log costs time on every cuDNN call and can change the autotuner's choice,
so every record of such a run says so (``cudnn_log``): its timings are not costs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, MutableMapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

#: cuDNN's variables: the level (3: info, which logs every call) and the destination file.
LEVEL_ENV = "CUDNN_LOGLEVEL_DBG"
DEST_ENV = "CUDNN_LOGDEST_DBG"
#: The most bytes read for one workload: its last ones, where the settled engines are.
MAX_BYTES = 64 << 20

#: The first line of a block: severity, cuDNN's version, the function called.
HEADER = re.compile(r"^([IWE])! CuDNN \(v(\d+)[^)\n]*\) function (\w+)\(\) called:", re.M)
#: The last line of a complete block (a block without it was cut off).
TRAILER = re.compile(r"^[iwe]! Process=[^\n]*\n", re.M)
EXECUTE = "cudnnBackendExecuteInternal"
OPERATION = re.compile(r"^[iwe]! +operation: type=internalType; val=(\w+);", re.M)
ENGINE = re.compile(r"^[iwe]! +engine_id: type=int; val=(-?\d+);", re.M)
KNOB = re.compile(r"^[iwe]! +CUDNN_KNOB_TYPE_(\w+): type=\w+; val=(-?\w+);", re.M)
#: A descriptor at the block's top level (``i!`` and five spaces), whose fields follow it.
TOP = re.compile(r"^[iwe]! {5}(\w+): type=[^;\n]*:$")
TOP_LINE = re.compile(r"^[iwe]! {5}\S")
FIELD = re.compile(r"^[iwe]! {9}(\w+): type=[^;\n]*; val=([^;\n]*);")
#: The convolution's own parameters, named in ``shapes`` beside the tensors' dimensions.
CONV_FIELDS = {"padA": "pad", "strideA": "stride", "dilationA": "dilation", "groupCount": "groups"}
DTYPE = re.compile(r"CUDNN_DATA_(\w+)")


@dataclass(frozen=True)
class Engine:
    """The engine one (operation, shapes) settled on in the bytes read."""

    op: str  # CONV_FORWARD, CONV_BWD_DATA, CONV_BWD_FILTER, ...
    shapes: str  # "x=[8,64,8,56,56] w=[64,64,3,3,3] y=[...] pad=[1,1,1] ... FLOAT"
    engine: str  # "67:TILE_SIZE=0,TILEK=0,...": engine_id, then the knobs in cuDNN's order
    candidates: int  # distinct configurations executed: the autotuner's candidates, or 1
    executions: int


@dataclass(frozen=True)
class Parsed:
    """What a stretch of cuDNN's log says: the engines, or why it says nothing readable."""

    engines: list[Engine] = field(default_factory=list)
    version: str | None = None  # cuDNN's, as its blocks give it ("91900")
    blocks: int = 0  # complete blocks read
    cut: int = 0  # blocks left out because the bytes read cut them off
    unsupported: str | None = None

    def to_record(self) -> list[dict[str, Any]] | dict[str, str]:
        """``record["cudnn_engines"]``: ``Engine``s as dicts, or ``{"unsupported": reason}``."""
        if self.unsupported is not None:
            return {"unsupported": self.unsupported}
        return [asdict(e) for e in self.engines]


def _shapes(block: str) -> str:
    """The tensors' dimensions and the convolution's parameters of an execution block."""
    parts: list[str] = []
    dtype = ""
    top = None
    for line in block.splitlines():
        m = TOP.match(line)
        if m or TOP_LINE.match(line):  # a descriptor's fields follow; a value's do not
            top = m.group(1) if m else None
            continue
        f = FIELD.match(line)
        if f is None or top is None:
            continue
        name, value = f.groups()
        if name == "dimA":
            parts.append(f"{top.removesuffix('Desc')}={value}")
        elif top == "convDesc" and name in CONV_FIELDS:
            parts.append(f"{CONV_FIELDS[name]}={value}")
        elif name == "dataType" and not dtype:
            d = DTYPE.search(value)
            dtype = d.group(1) if d else ""
    return " ".join(parts + ([dtype] if dtype else []))


def _execution(block: str) -> tuple[str, str, str] | None:
    """(op, shapes, engine) of one execution block; None where it names none of them."""
    op, engine = OPERATION.search(block), ENGINE.search(block)
    if op is None or engine is None:
        return None
    knobs = ",".join(f"{k}={v}" for k, v in KNOB.findall(block))
    return op.group(1), _shapes(block), f"{engine.group(1)}:{knobs}"


def parse(text: str) -> Parsed:
    """The engine each (operation, shapes) of a cuDNN API log settled on, in first-run order."""
    headers = list(HEADER.finditer(text))
    if not headers:
        what = text.strip().splitlines()[0][:80] if text.strip() else ""
        why = f"its first line is {what!r}" if what else "it is empty"
        return Parsed(unsupported=f"not a cuDNN API log that this parser reads: {why}")
    version = headers[0].group(2)
    ends = [h.start() for h in headers[1:]] + [len(text)]
    cut = int(bool(text[: headers[0].start()].strip()))  # a block whose start was not read
    blocks = runs = 0
    seen: dict[tuple[str, str], list[str]] = {}
    for h, end in zip(headers, ends, strict=True):
        block = text[h.start() : end]
        if TRAILER.search(block) is None:
            cut += 1
            continue
        blocks += 1
        if h.group(3) != EXECUTE:
            continue
        runs += 1
        found = _execution(block)
        if found is not None:
            seen.setdefault(found[:2], []).append(found[2])
    if runs and not seen:
        return Parsed(
            version=version,
            blocks=blocks,
            cut=cut,
            unsupported=(
                f"cuDNN v{version}'s {EXECUTE}() blocks name no operation or engine_id that this "
                "parser reads"
            ),
        )
    engines = [
        Engine(op, shapes, configs[-1], len(set(configs)), len(configs))
        for (op, shapes), configs in seen.items()
    ]
    return Parsed(engines, version, blocks, cut)


def read_since(path: Path, offset: int, limit: int = MAX_BYTES) -> str:
    """What ``path`` gained past ``offset`` (all of a replaced file), at most ``limit`` bytes."""
    with path.open("rb") as f:
        size = f.seek(0, 2)
        start = offset if offset <= size else 0
        f.seek(max(start, size - limit))
        return f.read().decode("utf-8", errors="replace")


def log_environment(env: MutableMapping[str, str], path: Path) -> str:
    """Turn cuDNN's API log on in ``env`` at level 3 into ``path``; the path as a job has it."""
    env[LEVEL_ENV] = "3"
    env[DEST_ENV] = str(path)
    return str(path)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


class LogWatch:
    """The bytes cuDNN's log gains during one workload: made before its build, ``record`` after
    its fingerprint pass. Does nothing where the job asks for no log (``job["cudnn_log"]``)."""

    def __init__(self, job: Mapping[str, Any], rec: dict[str, Any], distributed: bool) -> None:
        given = job.get("cudnn_log")
        self.path = Path(given) if given else None
        self.device = str(job.get("device", "cpu")).split(":")[0]
        self.offset = 0 if self.path is None else _size(self.path)
        if self.path is None:
            return
        rec["cudnn_log"] = True  # its timings ran with the log on: not a cost
        if distributed:  # the ranks' cuDNN runs in torchrun's processes, not in this one
            rec["cudnn_engines"] = {
                "unsupported": "a distributed workload's cuDNN runs in its "
                "torchrun ranks, whose engines are not read"
            }

    def record(self, rec: dict[str, Any]) -> None:
        """``rec["cudnn_engines"]``; never raises: a failure costs that fact only."""
        if self.path is None:
            return
        try:
            rec["cudnn_engines"] = self.engines()
        except Exception as exc:
            rec["cudnn_engines"] = {
                "unsupported": f"reading {self.path} failed: {type(exc).__name__}: {exc}"
            }

    def engines(self) -> list[dict[str, Any]] | dict[str, str]:
        assert self.path is not None
        if _size(self.path) == self.offset:  # no byte gained (a shorter file was replaced)
            if self.device != "cuda":
                where = "the CPU" if self.device == "cpu" else self.device
                why = f"cuDNN runs only on CUDA GPUs, and this record ran on {where}"
            elif not self.path.exists():
                why = f"cuDNN wrote no log to {self.path} (no cuDNN here, or it ignores {DEST_ENV})"
            else:
                return []  # the workload made no cuDNN call
            return {"unsupported": why}
        return parse(read_since(self.path, self.offset)).to_record()

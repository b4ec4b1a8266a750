"""Which workload a record measured: what must be the same (``FIELDS``) before two runs' bits of
one (workload, mode) are compared, and the words for how it differs. The device type matters
since a CPU's and a GPU's random streams differ; a run without suite digests is matched on the
rest. Fingerprint steps may differ in number: two runs compare over the steps both ran.
``detbench compare`` and ``detbench merge`` both ask here.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

#: What must be the same, with the words for it.
FIELDS = {
    "device": "device",
    "params": "workload parameters",
    "profile": "size profile",
    "seed": "seed",
    "source": "suite source",
}

#: The key of env.json's ``options`` that holds each suite's source digest.
SOURCES_KEY = "suite_sha256"


def text(x: Any) -> str:
    """A value as a comparable string: JSON with sorted keys for a dict, "" for None or NaN."""
    if isinstance(x, dict):
        return json.dumps(x, sort_keys=True, default=str)
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return ""
    return str(x)


def source_digest(paths: Iterable[str | Path]) -> str:
    """sha256 over the files' sorted sha256s: the same wherever the files are checked out."""
    each = sorted(hashlib.sha256(Path(p).read_bytes()).hexdigest() for p in paths)
    return hashlib.sha256("".join(each).encode()).hexdigest()


def suite_sources(env: Mapping[str, Any]) -> dict[str, str]:
    """Each suite's source digest as the run recorded it ({} where it did not)."""
    return dict((env.get("options") or {}).get(SOURCES_KEY) or {})


def identity(rec: Any, env: Mapping[str, Any]) -> dict[str, str]:
    """The workload of ``rec`` (a record of the run whose env.json is ``env``: a dict, or a row
    of ``load_results``' frame), as ``FIELDS`` strings; "" where the run did not record it."""
    options = env.get("options") or {}
    return {
        "device": text(rec.get("device")),
        "params": text(rec.get("params")),
        "profile": text(rec.get("profile")) or text(options.get("profile")),
        "seed": text(rec.get("seed")),
        "source": suite_sources(env).get(str(rec.get("suite")), ""),
    }


def steps(rec: Any) -> int | None:
    """How many steps the record's fingerprint pass hashed (None: no step digests)."""
    s = rec.get("step_fingerprints")
    return len(s) if isinstance(s, (list, tuple)) and s else None


def differences(a: Mapping[str, str], b: Mapping[str, str]) -> list[str]:
    """The ``FIELDS`` that differ between two identities (one not recorded is no difference)."""
    return [k for k in FIELDS if a.get(k) and b.get(k) and a.get(k) != b.get(k)]


def describe(field: str, a: str, b: str, name_a: str, name_b: str) -> str:
    """One difference in words: "size profile quick (A) vs full (B)"; for the parameters, only
    those that differ ("workload parameters: batch 64 (A) vs 32 (B)")."""
    words = FIELDS.get(field, field)
    if field == "params":
        pa, pb = json.loads(a), json.loads(b)
        keys = [k for k in sorted(set(pa) | set(pb)) if pa.get(k) != pb.get(k)]
        return f"{words}: " + ", ".join(
            f"{k} {pa.get(k, '–')} ({name_a}) vs {pb.get(k, '–')} ({name_b})" for k in keys
        )
    if field == "source":
        a, b = a[:12], b[:12]
    return f"{words} {a} ({name_a}) vs {b} ({name_b})"

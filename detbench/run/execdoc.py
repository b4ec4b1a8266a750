"""An exec run's records in a run's layout: ``results.jsonl`` (a verdict record per mode and
round, copy 0), ``paired.jsonl`` (a line per run), ``env.json``, and where each mode's replicates
first part (``partings``, into ``exec.json``). A record's ``fingerprint`` is the digest of the
evidence its verdict rests on (``worker.evidence.split``); its setting columns are what the
script's interpreter ended with."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from detbench.core import settings as st
from detbench.core.modes import Mode
from detbench.run.execplan import EXEC_FILE, ExecConfig, RunSlot, name_of
from detbench.store.paired import PairedWriter, line
from detbench.store.record import measured
from detbench.store.results import (
    ENV_FILE,
    ResultWriter,
    git_info,
    host_env,
    utc_now,
    write_json_atomic,
)
from detbench.worker.applied import columns
from detbench.worker.evidence import split
from detbench.worker.outputs import Outputs, digest_of, first_parting, read_outputs
from detbench.worker.protocol import PACKAGE_ROOT
from detbench.worker.timing import Timing

SUITE = "exec"
#: The mode's flags that act through cuDNN only: inert where the script used no GPU.
CUDNN_FLAGS = ("benchmark", "cudnn_deterministic", "cudnn_enabled")


def acting(names: list[str], device: str, mode: Mode | None = None) -> list[str]:
    """Of the settings a script changed, those that make its records measure another mode: one
    of the four flags that acts on ``device``, or a setting the mode sets (``--set``); such a
    record counts toward no verdict or cost. Another setting (TF32, say) is the script's own
    choice, the same in every mode: its records count."""
    given = dict(mode.overrides) if mode is not None else {}

    def acts(n: str) -> bool:
        if n in CUDNN_FLAGS:
            return device == "cuda"
        by_mode = n in st.MODE_FLAGS or n in given
        return by_mode and (n not in st.BY_NAME or device in st.BY_NAME[n].devices)

    return [n for n in names if acts(n)]


def device_of(facts: dict[str, Any]) -> str:
    """Where the script ran: "cuda" where one of its interpreters initialised CUDA."""
    seen = facts.get("script") or facts.get("boot") or {}
    return str(seen.get("device") or "cpu")


class ExecRecords:
    """Writes the records of ``c``'s runs as they end (``add``), and env.json."""

    def __init__(self, c: ExecConfig) -> None:
        self.c = c
        self.name = name_of(c.command)
        self.results = ResultWriter(c.out)
        self.paired = PairedWriter(c.out)

    def write_env(self, started: str) -> None:
        doc = {
            "schema_version": 1,
            "started_utc": started,
            "host": host_env(),
            "git": git_info(PACKAGE_ROOT),
            "exec": {"command": self.c.command, "cwd": str(self.c.cwd)},
            "options": {
                "suites": [SUITE],
                "workloads": [f"{SUITE}/{self.name}"],
                "modes": [m.name for m in self.c.modes],
                "replicates": self.c.replicates,
                "device": "cpu",
                "profile": "exec",
                "seed": self.c.seed,
                "timing": "paired",
                "timeout": self.c.timeout,
            },
        }
        write_json_atomic(self.c.out / ENV_FILE, doc)

    def add(self, slot: RunSlot, facts: dict[str, Any]) -> None:
        """The paired line of one run, and its verdict record where it is copy 0."""
        outputs = read_outputs(self.c.out / "runs" / facts["key"])
        evidence = split(outputs)
        facts["comparable"] = len(outputs.items)
        facts["digest"] = digest_of(evidence.decisive)
        facts["digest_rest"] = digest_of(evidence.rest)
        facts["basis"] = evidence.basis
        facts["counts"] = evidence.counts
        facts["set_aside"] = [f"{s.what}: {s.why}" for s in outputs.set_aside]
        facts["unreadable"] = list(outputs.unreadable)
        # A run killed as hung (twice) timed out, as a record's status.
        status = "timeout" if facts["status"] == "hung" else str(facts["status"])
        device = device_of(facts)
        ok = status == "ok"
        changed = acting(changed_by(facts), device, slot.mode)
        sample = facts["body"] if facts.get("body") else facts["wall"]
        self.paired.append(
            line(
                suite=SUITE,
                workload=self.name,
                mode=slot.mode.name,
                replicate=slot.round,
                copy=slot.copy,
                samples=[sample] if ok else [],
                rounds=[0] if ok else [],
                positions=[slot.position] if ok else [],
                block_start=[facts["start_unix"]] if ok else [],
                workers=len(self.c.modes) + 1,
                number_per_block=1,
                timing=timing_of(sample) if ok else None,
                status=status,
                message=None if ok else facts.get("stderr_tail"),
                worker_pid=facts.get("pid"),
                device=device,
                utc=utc_now(),
                settings_changed=changed,
                host_load=facts.get("host_load"),
            )
        )
        if slot.copy != 0:
            return
        boot = facts.get("boot") or {}
        levels = boot.get("final") or boot.get("applied") or {}
        rec = measured(
            suite=SUITE,
            workload=self.name,
            params={"command": " ".join(self.c.command)},
            mode=slot.mode,
            settings=columns(levels, slot.mode),
            replicate=slot.round,
            seed=self.c.seed,
            device=device,
            profile="exec",
            num_threads=0,
            batch_size=None,
            fingerprint_method="sha256",
        )
        rec.update(
            status=status,
            message=None if ok else facts.get("stderr_tail"),
            fingerprint=facts["digest"] if ok else None,
            settings_changed=changed,
            timing_design="paired",
            worker_pid=facts.get("pid"),
            device_name=f"{device}:0",
            utc=utc_now(),
            mode_position=facts.get("position"),
            items_per_step=1.0,  # a run of the command is the unit: its throughput is runs/s
        )
        changes = (facts.get("script") or boot).get("changes") or []
        if changes:
            rec["settings_changes"] = {
                ch["setting"]: f"{ch['file']}:{ch['line']}" for ch in changes
            }
        self.results.append(rec)


def changed_by(facts: dict[str, Any]) -> list[str]:
    """The settings a run's script changed, as its main interpreter ended or as any was seen."""
    boot = facts.get("boot") or {}
    names = list(boot.get("changed") or [])
    for ch in (facts.get("script") or {}).get("changes") or []:
        if ch["setting"] not in names:
            names.append(ch["setting"])
    return names


def timing_of(seconds: float) -> dict[str, Any]:
    """A run's one sample as the paired analysis reads a line's timing: one block of one step."""
    return Timing(
        samples=(seconds,),
        number_per_block=1,
        median=seconds,
        iqr=0.0,
        warmup_steps=0,
        budget=0.0,
        num_threads=0,
        ci_low=seconds,
        ci_high=seconds,
        ci_rel=0.0,
        target_rel=0.0,
        reached_target=False,
        clock="perf_counter: the command's own time, its start-up apart",
        min_samples=1,
        clock_mode="exec",
    ).to_json()


def _ok_by_mode(facts: dict[str, dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Each mode's runs of copy 0 that ended well, by round."""
    by_mode: dict[str, list[dict[str, Any]]] = {}
    for f in facts.values():
        if f.get("copy") == 0 and f.get("status") == "ok":
            by_mode.setdefault(f["mode"], []).append(f)
    return {mode: sorted(runs, key=lambda f: f["round"]) for mode, runs in by_mode.items()}


def _first_partings(
    out: Path,
    facts: dict[str, dict[str, Any]],
    part: str,
    key: str,
    decided: bool,
    cache: dict[str, Outputs] | None,
) -> dict[str, Any]:
    """Per mode: where its replicates (copy 0) first part from its first in ``part`` of their
    evidence ("decisive" or "rest"), comparing runs whose digest ``key`` differs; None where they
    agree. ``decided``: only modes whose decisive evidence agreed and is more than text;
    ``cache``: outputs read, by key, shared so each run's checkpoints are read once."""
    cache = {} if cache is None else cache

    def outputs(k: str) -> Outputs:
        if k not in cache:
            cache[k] = read_outputs(out / "runs" / k)
        return cache[k]

    found: dict[str, Any] = {}
    for mode, runs in _ok_by_mode(facts).items():
        agreed = len({f.get("digest") for f in runs}) == 1 and runs[0].get("basis") != "text"
        if decided and not agreed:
            continue
        first = runs[0]
        found[mode] = None
        for other in runs[1:]:
            if other.get(key) == first.get(key):
                continue
            a, b = (getattr(split(outputs(f["key"])), part) for f in (first, other))
            p = first_parting(a, b)
            if p is not None:
                found[mode] = {"rounds": [first["round"], other["round"]], **p.__dict__}
                break
    return found


def partings(
    out: Path, facts: dict[str, dict[str, Any]], cache: dict[str, Outputs] | None = None
) -> dict[str, Any]:
    """Per mode: where its replicates first part in their decisive evidence, or None."""
    return _first_partings(out, facts, "decisive", "digest", False, cache)


def text_partings(
    out: Path, facts: dict[str, dict[str, Any]], cache: dict[str, Outputs] | None = None
) -> dict[str, Any]:
    """Per mode whose decisive evidence agreed: where the rest (text) first parts, if it does."""
    found = _first_partings(out, facts, "rest", "digest_rest", True, cache)
    return {m: p for m, p in found.items() if p is not None}


def finish(out: Path, doc_partings: dict[str, Any], text: dict[str, Any] | None = None) -> None:
    """Add the partings to ``exec.json``, and the end to env.json."""
    path = out / EXEC_FILE
    doc = json.loads(path.read_text())
    doc["partings"] = doc_partings
    doc["text_partings"] = text or {}
    write_json_atomic(path, doc)
    env = json.loads((out / ENV_FILE).read_text())
    env["finished_utc"] = utc_now()
    write_json_atomic(out / ENV_FILE, env)

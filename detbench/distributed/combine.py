"""One record from the ranks' results of a launch (:class:`detbench.distributed.torchrun.Launch`),
for each of its workloads: the usual fields, so analysis and the report treat it like any other,
plus:

- ``fingerprint``: step ``i``'s digest is ``combine`` of the ranks' digests of step ``i`` in rank
  order, the fingerprint ``combine`` of those (``fingerprint_sha256`` likewise);
  ``rank_fingerprints`` has each rank's own;
- ``ranks_agree``: True when after every fingerprint step every rank held bitwise the same
  parameters (of the modules wrapped with ``ctx.ddp``), False otherwise, a bug worth reporting;
  ``ranks_first_disagree_step`` the first step where they did not;
- throughput: the ranks time on a shared clock, so ``seconds_per_step`` is the slowest rank's;
  ``items_per_step``, FLOPs and bytes per step are sums over ranks;
- ``losses``, ``ops_called``: rank 0's; ``peak_memory_bytes``, ``max_abs_diff`` and
  ``max_abs_diff_vs_default``: the largest over ranks (each rank keeps its own references);
- ``launch``: how the launch ran (its seconds, limit, directory, torchrun's exit code, its
  workloads and this one's position among them).

Faults stay data. A rank that records a failure gives the record its status (the earliest failing
rank's). A rank that dies without its result makes the record ``crashed``, with the tail of its
log. A launch that outlives its limit is ``timeout``.
"""

from __future__ import annotations

import contextlib
import re
import signal
from typing import Any

from detbench.core import torchstate as ts
from detbench.distributed.torchrun import Launch
from detbench.store.schema import Status
from detbench.worker import fingerprint as fp
from detbench.worker.protocol import exit_description

_FAILURE = re.compile(r"rank\s*:\s*(\d+).*?exitcode\s*:\s*(-?\d+)", re.S)


def exit_codes(ln: Launch) -> dict[int, int]:
    """Rank -> exit code of each failed rank, from torchrun's failure summary in its log."""
    text = ""
    with contextlib.suppress(OSError):
        text = (ln.directory / "launcher.log").read_text(errors="replace")
    start = text.rfind("Failures:")
    if start < 0:
        return {}
    return {int(r): int(c) for r, c in _FAILURE.findall(text, start)}


def outcome(ln: Launch, i: int) -> tuple[str, str | None] | None:
    """(status, message) of workload ``i`` of a launch, or None where it did not run (the
    launch ended in an earlier one). Before the one the launch ended in: ``ok``. In it:
    ``timeout`` at the limit; else a rank that died without its result, other than by the
    SIGTERM with which torchrun stops the others after a failure (a signal, an exit of its
    own): ``crashed`` (the others' errors, "connection closed by peer", follow from it); else
    the earliest failure a rank recorded (``oom``, ``unsupported``, ``error``)."""
    end = ln.ended_at
    if i < end:
        return Status.OK, None
    if i > end:
        return None
    results = ln.results.get(i, {})
    failed = [r for r in results.values() if r.get("status") != Status.OK]
    if ln.timed_out:
        where = {r: ln.log_tail(f"rank{r}.log", 1) for r in range(ln.world_size)}
        return Status.TIMEOUT, (
            f"the launch of {ln.world_size} ranks exceeded its limit of {ln.limit:g} s; torchrun "
            "and every rank killed; last words: "
            + "; ".join(f"rank {r}: {w or 'nothing'}" for r, w in where.items())
        )
    codes = exit_codes(ln)
    missing = [r for r in range(ln.world_size) if r not in results]
    dead = [r for r in missing if codes.get(r) != -signal.SIGTERM] if codes else missing
    if dead and (codes or not failed):
        rank = dead[0]
        how = exit_description(codes.get(rank, ln.code))
        tail = ln.log_tail(f"rank{rank}.log") or ln.log_tail("launcher.log")
        return Status.CRASHED, f"rank {rank} {how} before writing its result; log: {tail}"
    first = min(failed, key=lambda r: float(r.get("failed_at") or 0.0))
    return str(first["status"]), f"rank {first['rank']}: {first.get('message')}"


def merge(rec: dict[str, Any], ln: Launch, i: int) -> None:
    """The ranks' results for workload ``i`` (which ran) into its record, in rank order."""
    said = outcome(ln, i)
    assert said is not None
    status, message = said
    if status == Status.OK and ln.code:  # every result is in; torchrun's own end was not clean
        message = f"the ranks ended, then torchrun {exit_description(ln.code)}"
    rec["status"], rec["message"] = status, message
    results = ln.results.get(i, {})
    ranks = [results[r] for r in sorted(results)]
    rec["rank_status"] = {str(r["rank"]): r.get("status") for r in ranks}
    if ln.leftovers:
        rec["message"] = (message or "") + f" [processes still alive: {ln.leftovers}]"
    if not ranks:
        return
    first = ranks[0]
    # What every record carries, as rank 0 ran it (the same settings on every rank).
    for k in ("precision", "num_threads", "settings_changed", "settings_changes"):
        if k in first:
            rec[k] = first[k]
    ts.nccl_read_back(rec, first.get("nccl_env"))
    rec["peak_memory_bytes"] = max((r.get("peak_memory_bytes") or 0 for r in ranks), default=None)
    rec["memory"] = first.get("memory")
    rec["phases"] = {**rec.get("phases", {}), **first.get("phases", {})}
    if "traceback" in first or status != Status.OK:
        failed = [r for r in ranks if r.get("traceback")]
        if failed:
            rec["traceback"] = failed[0]["traceback"]
    complete = len(ranks) == ln.world_size
    steps: list[list[str]] = [r.get("step_fingerprints") or [] for r in ranks]
    if complete and all(steps) and len({len(s) for s in steps}) == 1:
        step_digests = [fp.combine(list(ds)) for ds in zip(*steps, strict=True)]
        rec["step_fingerprints"] = step_digests
        rec["fingerprint"] = fp.combine(step_digests)
        rec["rank_fingerprints"] = [fp.combine(s) for s in steps]
        agree = [r["agreement_digests"] for r in ranks]
        disagree = [i for i, ds in enumerate(zip(*agree, strict=True)) if len(set(ds)) > 1]
        rec["ranks_agree"] = not disagree
        rec["ranks_first_disagree_step"] = disagree[0] if disagree else None
        for k in ("losses", "first_step_seconds", "ops_called", "attn_implementation"):
            rec[k] = first.get(k)
        sha = [r.get("step_fingerprints_sha256") or [] for r in ranks]
        if all(sha):  # --fingerprint both: the sha256 cross-check, combined the same way
            rec["step_fingerprints_sha256"] = [fp.combine(list(d)) for d in zip(*sha, strict=True)]
            rec["fingerprint_sha256"] = fp.combine(rec["step_fingerprints_sha256"])
        _diff(rec, ranks)
    if status != Status.OK:
        return
    rec["flops_source"] = first.get("flops_source")
    counted = [r.get("flops_per_step") for r in ranks]
    rec["flops_per_step"] = sum(counted) if all(c is not None for c in counted) else None
    for k in ("flops_pending", "flops_note", "timing_design"):  # "paired": the ranks timed none
        if first.get(k):
            rec[k] = first[k]
    timing = first.get("timing")
    if not timing:  # a paired run's: the ranks are timed in their turns, or another mode's
        return
    rec["timing"] = timing
    rec["seconds_per_step"] = timing["median"]
    rec["items_per_second"] = rec["items_per_step"] / timing["median"]
    for unit in ("flops", "bytes"):
        per_step = rec.get(f"{unit}_per_step")
        rec[f"{unit}_per_second"] = per_step / timing["median"] if per_step else None


def _diff(rec: dict[str, Any], ranks: list[dict[str, Any]]) -> None:
    """``max_abs_diff`` against the first replicate, and ``max_abs_diff_vs_default``: the largest
    over ranks (None, with the note, where one rank's outputs have no finite distance)."""
    vs = [r.get("max_abs_diff_vs_default") for r in ranks if "max_abs_diff_vs_default" in r]
    if vs:  # the largest over ranks, each against the default mode's reference of its own
        rec["max_abs_diff_vs_default"] = None if None in vs else max(float(v or 0) for v in vs)
    refs = [r.get("diff_reference") for r in ranks]
    if all(d == "self" for d in refs):
        rec["diff_reference"] = "self"
        return
    dicts = [(r["rank"], d) for r, d in zip(ranks, refs, strict=True) if isinstance(d, dict)]
    if not dicts:
        return
    worst = next(((k, d) for k, d in dicts if d.get("max_abs_diff") is None), None)
    if worst is None:
        worst = max(dicts, key=lambda kd: float(kd[1]["max_abs_diff"]))
    rank, d = worst
    rec["max_abs_diff"] = d.get("max_abs_diff")
    rec["diff_reference"] = {**d, "rank": rank}


def fill(rec: dict[str, Any], ln: Launch, i: int, launched: bool) -> None:
    """Workload ``i``'s record of launch ``ln``: how the launch ran (``launch``) and its ranks'
    results (:func:`merge`); ``launched``: this workload started it, so the launch's seconds are
    among its phases."""
    rec["launch"] = {
        "seconds": ln.seconds,
        "limit_seconds": ln.limit,
        "directory": str(ln.directory),
        "torchrun_exit": ln.code,
        "workloads": ln.keys,
        "position": i,
    }
    merge(rec, ln, i)
    if launched:  # torchrun's start and end, the ranks' whole life, all its workloads
        rec["phases"]["launch"] = ln.seconds

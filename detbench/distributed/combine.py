"""One record per workload of a launch (:class:`detbench.distributed.torchrun.Launch`) from its
ranks' results: the usual fields, plus:

- ``fingerprint``: step ``i``'s digest is ``combine`` of the ranks' step-``i`` digests in rank
  order (``fingerprint_sha256`` likewise); ``rank_fingerprints`` has each rank's own;
- ``ranks_agree``: every rank held bitwise the same ``ctx.ddp`` parameters after every step (False
  is a bug worth reporting); ``ranks_first_disagree_step`` the first step where they did not;
- ``seconds_per_step``: the slowest rank's (a shared clock); items, FLOPs and bytes: summed;
- ``losses``, ``ops_called``: rank 0's; peak memory and the ``max_abs_diff`` fields: the largest;
- ``launch``: how the launch ran.

Faults stay data: the earliest failing rank's status; a rank that dies without its result makes
it ``crashed`` (with its log's tail); a launch past its limit is ``timeout``.
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

#: What every record carries as rank 0 ran it (the same settings on every rank).
_RANK0_FIELDS = ("precision", "num_threads", "settings_changed", "settings_changes")
_FAILURE = re.compile(r"rank\s*:\s*(\d+).*?exitcode\s*:\s*(-?\d+)", re.S)


def exit_codes(ln: Launch) -> dict[int, int]:
    """Rank -> exit code of each failed rank, from torchrun's failure summary in its log."""
    text = ""
    with contextlib.suppress(OSError):
        text = (ln.directory / "launcher.log").read_text(errors="replace")
    start = text.rfind("Failures:")
    return {int(r): int(c) for r, c in _FAILURE.findall(text, start)} if start >= 0 else {}


def outcome(ln: Launch, i: int) -> tuple[str, str | None] | None:
    """(status, message) of workload ``i``, or None where it did not run. In the workload the
    launch ended in: ``timeout``; else ``crashed`` where a rank died without its result other
    than by torchrun's SIGTERM after a failure (the others' errors follow from it); else the
    earliest failure a rank recorded."""
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
    rec.update({k: first[k] for k in _RANK0_FIELDS if k in first})
    ts.nccl_read_back(rec, first.get("nccl_env"))
    rec["peak_memory_bytes"] = max((r.get("peak_memory_bytes") or 0 for r in ranks), default=None)
    rec["memory"] = first.get("memory")
    rec["phases"] = {**rec.get("phases", {}), **first.get("phases", {})}
    if "traceback" in first or status != Status.OK:
        tb = next((r["traceback"] for r in ranks if r.get("traceback")), None)
        if tb:
            rec["traceback"] = tb
    steps: list[list[str]] = [r.get("step_fingerprints") or [] for r in ranks]
    if len(ranks) == ln.world_size and all(steps) and len({len(s) for s in steps}) == 1:
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
    """``max_abs_diff`` and ``max_abs_diff_vs_default``: the largest over ranks (None where one
    rank's outputs have no finite distance)."""
    vs = [r.get("max_abs_diff_vs_default") for r in ranks if "max_abs_diff_vs_default" in r]
    if vs:
        rec["max_abs_diff_vs_default"] = None if None in vs else max(float(v or 0) for v in vs)
    refs = [r.get("diff_reference") for r in ranks]
    if all(d == "self" for d in refs):
        rec["diff_reference"] = "self"
        return
    dicts = [(r["rank"], d) for r, d in zip(ranks, refs, strict=True) if isinstance(d, dict)]
    if not dicts:
        return
    rank, d = next(((k, d) for k, d in dicts if d.get("max_abs_diff") is None), None) or max(
        dicts, key=lambda kd: float(kd[1]["max_abs_diff"])
    )
    rec["max_abs_diff"] = d.get("max_abs_diff")
    rec["diff_reference"] = {**d, "rank": rank}


def fill(rec: dict[str, Any], ln: Launch, i: int, launched: bool) -> None:
    """Workload ``i``'s record of launch ``ln``; ``launched``: this workload started it (its
    phases count the launch's seconds)."""
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

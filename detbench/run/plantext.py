"""The plan of a run in words and as JSON: what ``--dry-run`` prints, and the plan line every
run starts with."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from detbench.run.config import TARGET_REL, VERDICTS_ONLY, left_out
from detbench.run.figures import measured_here
from detbench.run.schedule import clock

if TYPE_CHECKING:
    from detbench.run.config import RunConfig
    from detbench.run.estimate import Estimate
    from detbench.run.planprobe import ProbeReport
    from detbench.run.runner import Runner


def describe_plan(runner: Runner, est: Estimate) -> tuple[dict[str, Any], list[str]]:
    """The plan of ``runner`` and its estimate: as JSON (``--dry-run --json``) and as lines."""
    c = runner.config
    skipped = left_out(c)
    # A paired member's warm-up stops at half the seconds its rounds sample (``worker.paired``).
    budget = c.setting("budget")
    if c.paired:
        budget = min(budget, c.setting("rounds") * c.setting("block_seconds") / 2)
    doc = _plan_doc(runner, est, skipped)
    lines = [
        f"plan: {len(runner.workloads)} workloads x {len(c.modes)} modes x {c.replicates} "
        "replicates"
        + (f" ({len(runner.done)} records already kept)" if runner.done else "")
        + f" = {est.records} records in "
        + _workers_words(est, c.replicates)
        + (f" (shard {c.shard[0]}/{c.shard[1]} of the plan)" if c.shard else ""),
        f"  device {c.device}, profile {c.profile}: fingerprint "
        f"{c.setting('fingerprint_steps')} steps (a workload may ask for more, {c.fingerprint}), "
        f"warm-up until the step time settles (at least {c.setting('warmup_steps')} steps, at "
        f"most {budget:g} s), "
        + (
            "no timing: verdicts only"
            if c.timing_design == VERDICTS_ONLY
            else "no timing pass: each mode is timed beside the others once its verdict is made"
        ),
        _estimate_line(est, len(c.device_names)),
    ]
    if est.paired is not None:
        lines.append(_paired_line(est))
    if c.devices:
        lines += _device_lines(runner)
    if skipped:
        lines.append(left_out_line(c.device, skipped))
    lines += _basis_lines(c, est)
    lines.append(f"  would write {c.out}; nothing was written (--dry-run)")
    return doc, lines


def _plan_doc(runner: Runner, est: Estimate, skipped: dict[str, str]) -> dict[str, Any]:
    """``describe_plan``'s JSON; ``skipped``: the suites its matrix leaves out, with why."""
    c = runner.config
    doc = {
        **est.to_json(),
        "device": c.device,
        "profile": c.profile,
        "modes": [m.name for m in c.modes],
        "replicates": c.replicates,
        "workloads": [w.key for w in runner.workloads],
        "budget": c.setting("budget"),
        "target_rel": TARGET_REL[c.device],
        "fingerprint": c.fingerprint,
        "out": str(c.out),
        "mode_order": runner.plan.order_json(),
        "left_out": skipped,
    }
    names = c.device_names
    if c.devices:
        doc["devices"] = names
        doc["assignment"] = [
            {
                "device": names[s.lane],
                "replicate": s.replicate,
                "mode": s.mode.name,
                "records": len(s.keys),
            }
            for s in runner.plan.slots
        ]
    if runner.threads_per_worker is not None:
        doc["threads_per_worker"] = runner.threads_per_worker
    return doc


def _basis_lines(c: RunConfig, est: Estimate) -> list[str]:
    """What the estimate includes and leaves out, and where its figures come from."""
    lines: list[str] = []
    if est.launches:
        lines.append(
            f"  and {est.launches} torchrun launches (one per "
            + ("group worker and replicate" if (est.paired or {}).get("fused") else "worker")
            + " with distributed workloads) "
            f"x {est.launch_seconds:.3g} s each, in the estimate above"
            + (
                " (measured on the H100: 17-19 s per launch of one rank, its records' measurement "
                "included)"
                if c.device == "cuda"
                else ""
            )
        )
    if est.invariance_seconds:
        measured = (c.device, c.profile) == ("cpu", "quick")
        lines.append(
            f"  and {sum(est.lane_sizes)} batch sizes built in invariance passes x "
            f"{est.size_seconds:.3g} s each, in the estimate above"
            + ("" if measured else " (a guess until a run of this device and profile measures it)")
        )
    if est.compiled_records:
        lines.append(
            f"  plus the compile time of {est.compiled_records} records under execution=compile, "
            "not in the estimate (each worker compiles afresh: seconds to minutes per workload)"
        )
    if est.unsupported_records:
        lines.append(
            f"  {est.unsupported_records} records will be unsupported (known now: more ranks "
            "than GPUs, a setting this torch lacks, autocast undeclared), charged nothing"
        )
    if est.own_records:
        lines.append(
            f"  {est.own_records} records at the seconds of this run's own records of their "
            "workload so far (each workload's mean, on this host)"
        )
    if est.figure_records > est.own_records:
        lines.append(
            f"  {est.figure_records - est.own_records} records at a measured figure (their "
            "suite's, measured on a GPU; their workload's estimate; or "
            f"{est.probed_records} probed on this host), the rest at the model's "
            f"{est.per_record_seconds:.3f} s (run/estimate.py says where each figure comes from)"
        )
    elif not measured_here(c.device, c.profile):
        lines.append(
            "  every record is priced at the model's guess, not a measured figure: no run has "
            f"measured these suites on a {c.device} at the {c.profile} profile, so the estimate "
            "can be several times off; the progress lines' time left learns from the groups as "
            "they end"
        )
    if est.host is not None:
        h = est.host
        lines.append(
            f"  priced for this host: it ran the reference work in {1000 * h['seconds']:.1f} ms "
            f"against {1000 * h['reference_seconds']:.1f} ms on the host that measured the "
            f"{c.device} figures, so they count x{h['factor']:.2f} here (run/hostspeed.py)"
        )
    if est.basis == "paper":
        lines.append(
            "  a paper estimate: no GPU here, so nothing was measured on this host; it assumes "
            "one GPU and the start-up measured on the H100 (a real run needs a GPU)"
        )
    return lines


def left_out_line(device: str, skipped: dict[str, str]) -> str:
    """The suites the device's matrix leaves out, with why, and how to add them."""
    return (
        f"  not in the {device} matrix, each run on its own: "
        + "; ".join(f"{name} ({why})" for name, why in skipped.items())
        + ". --suite NAME adds one, --suite all runs every suite"
    )


def _workers_words(est: Estimate, replicates: int) -> str:
    """Which processes make the records: fresh verdict workers, or the paired groups."""
    p = est.paired or {}
    if not p.get("fused"):
        return f"{est.workers} fresh workers"
    each = "one per replicate" + (" on each device" if p.get("devices", 1) > 1 else "")
    return f"{replicates} groups of {p['workers_per_group']} fresh workers ({each})"


def _paired_line(est: Estimate) -> str:
    """The paired phase's share of the plan."""
    p = est.paired or {}
    what = (
        "each workload's verdicts and costs in the same workers: each builds it once, makes "
        "its verdict, warms it up and takes its turns"
        if p.get("fused")
        else "then the costs"
    )
    n, timed = p["workers_per_group"], p.get("timed_per_group", p["workers_per_group"])
    side = (
        f"{n} workers side by side (every mode, and a second worker of the baseline's settings: "
        "the A/A check)"
        if timed == n
        else f"{n} workers, {timed} of them timed side by side (one per computation: the modes "
        "that differ only in switches that act on nothing here make their verdicts and sit the "
        "rounds out; and a second worker of the baseline's settings: the A/A check)"
    )
    return (
        f"  {what}, {est.paired_seconds:.0f} s of the estimate beside the records: "
        f"{p['groups']} (workload, replicate) groups of {side}, "
        f"up to {p['rounds']} rounds of one block each of about {p['block_seconds']:g} s (at "
        "least 6, fewer for a long step; they stop once every mode's ratio to the baseline "
        "settles), in an order shuffled each round; a group too big for the device's memory is "
        "timed in subgroups that each hold the baseline"
    )


def _estimate_line(est: Estimate, lanes: int) -> str:
    busiest = max(est.lane_records) if lanes > 1 else est.records
    lane_seconds = est.lane_record_seconds or (est.record_seconds,)
    # Each record at the model's figure: say it; else their sum.
    uniform = abs(max(lane_seconds) - busiest * est.per_record_seconds) < 0.05
    records = (
        f"{busiest} records x {est.per_record_seconds:.3f} s"
        if uniform and not est.figure_records and not est.unsupported_records
        else f"{busiest} records in {max(lane_seconds):.0f} s"
    )
    return (
        f"  estimated {clock(est.seconds)} ({est.seconds:.0f} s"
        + (", a paper estimate" if est.basis == "paper" else "")
        + ") = "
        + (
            f"{est.probe_seconds:.0f} s of the probe worker (your workloads' records, measured "
            "here) + "
            if est.probe_seconds
            else ""
        )
        + (
            f"the busiest of {lanes} devices side by side: "
            if lanes > 1 and not (est.paired or {}).get("fused")
            else ""
        )
        + records
        + (
            f", less {est.held_seconds:.0f} s for each group's verdicts made side by side (but "
            "the baseline's, and the autotuned modes' where the step calls a convolution),"
            if est.held_seconds
            else ""
        )
        + " + "
        + (f"{est.paired_seconds:.0f} s of paired costs + " if est.paired is not None else "")
        + f"the groups' start-ups in the paired figure ({est.startup_seconds:.1f} s a worker, "
        + ("measured here" if est.measured_startup else "assumed")
        + "; a group's workers start side by side)"
    )


def _device_lines(runner: Runner) -> list[str]:
    """Which device times which group (``PairedPhase.lane_of``), and what parallel CPU workers
    mean for their timings."""
    paired, names = runner.paired, runner.config.device_names
    width = max(len(n) for n in names)
    lines = [
        f"  devices {', '.join(names)}: one (workload, replicate) group "
        "per device at a time, each with its own workers, the devices side by side; a "
        "workload's replicates take the devices in turn:"
    ]
    mine: list[list[str]] = [[] for _ in paired.timers]
    for r, keys in paired.todo():
        for k in keys:
            mine[paired.lane_of(k, r)].append(f"r{r + 1} {k}")
    for timer, groups in zip(paired.timers, mine, strict=True):
        lines.append(f"    {timer.lane:<{width}}  {len(groups)} groups: {', '.join(groups)}")
    if runner.threads_per_worker is not None:
        t = runner.threads_per_worker
        lines.append(
            f"  timings: {len(names)} CPU groups' workers run side by side with {t} thread"
            f"{'s' if t != 1 else ''} each (a serial run's workers use {runner.serial_threads}):"
            " they share the host's cores, so their timings are not comparable with a serial "
            "run's"
            + (
                "; one thread also hides the nondeterminism that comes from the order in which "
                "threads add (index_put_ with accumulate=True, reductions)"
                if t == 1
                else ""
            )
        )
    return lines


def probe_line(found: ProbeReport, keys: list[str]) -> str:
    """What the probe worker measured of a user's own workloads, and what it could not."""
    seconds = [found.records[k].seconds for k in keys if k in found.records]
    line = (
        f"  {len(seconds)} of your own workloads costed by a probe worker here, one record each "
        f"(build, fingerprint, FLOP count, warm-up and samples): {sum(seconds):.1f} s in all, the "
        f"probe {found.seconds:.0f} s with its start-up of {found.startup:.1f} s"
        if seconds
        else "  no workload of yours could be measured by the probe worker here"
    )
    if found.failed:
        line += "; at the model's guess: " + ", ".join(
            f"{k} ({why})" for k, why in found.failed.items()
        )
    return line

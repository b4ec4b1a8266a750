"""``detbench audit FILE.py[:WORKLOAD]``: which ops in my model break reproducibility? Two steps,
each in fresh processes:

1. **Probe.** The workload runs (seeded, two steps) under
   ``torch.use_deterministic_algorithms(True, warn_only=True)`` with cuDNN deterministic, so every
   op without a deterministic implementation here warns instead of raising; each warning is
   placed at the innermost frame of the user's file (for a backward op, the ``backward`` call).
2. **Verdict.** The workload runs like any other, in the default mode and in the fully
   deterministic mode (``cudnn-det+det-algos``): reproducible or not, or unsupported.

The answer ends with the settings to use, or with the ops that must be replaced.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
import traceback
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from detbench.core.errors import DetbenchError
from detbench.core.modes import CUBLAS_ENV, DETERMINISTIC_MODE, get_mode
from detbench.core.workload import Context, WorkloadError, load_file, registry, select_target
from detbench.run.config import VERDICTS_ONLY, RunConfig
from detbench.store.outdir import refuse_used
from detbench.store.results import load_results
from detbench.worker.protocol import Channel, ChildFailed, run_child

MARKER = " does not have a deterministic implementation"
PROBE_STEPS = 2


class AuditError(DetbenchError):
    """An audit that cannot run as asked (one clear line)."""


@dataclass
class Finding:
    """One op with no deterministic implementation, where the user's code called it."""

    op: str
    file: str
    line: int
    code: str
    phase: str  # build or step
    count: int = 1


@dataclass
class Audit:
    workload: str
    device: str
    torch: str
    findings: list[Finding] = field(default_factory=list)
    probe_error: str | None = None
    verdicts: dict[str, dict[str, Any]] = field(default_factory=dict)
    settings: str | None = None
    replace: list[str] = field(default_factory=list)
    results_dir: str | None = None
    #: Where the default mode's runs first part (``detbench.locate.stages``), when they do.
    located: dict[str, Any] | None = None
    #: The probe's ops that torch documents as nondeterministic by default here (``locate.census``).
    can_race: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _probe(source: str, key: str, device_name: str) -> dict[str, Any]:
    # The probe's child's imports: the CLI needs no torch before the audit's run.
    import torch

    from detbench.core.seeding import seed_all
    from detbench.locate.census import Census

    user_file = str(Path(source).resolve())
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.use_deterministic_algorithms(True, warn_only=True)
    load_file(source)
    w = registry()[key]
    device = torch.device(device_name)
    found: dict[tuple[str, int, str], dict[str, Any]] = {}
    phase = "build"

    def catch(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: Any = None,
        line: str | None = None,
    ) -> None:
        text = str(message)
        if MARKER not in text:
            return
        op = text.split(MARKER)[0].strip()
        frames = [f for f in traceback.extract_stack() if f.filename == user_file]
        if frames:
            filename, lineno, line = frames[-1].filename, frames[-1].lineno or 0, frames[-1].line
        at = int(lineno or 0)
        seen = {"op": op, "file": filename, "line": at, "code": line or "", "phase": phase}
        found.setdefault((filename, at, op), {**seen, "count": 0})["count"] += 1

    error = None
    census = Census(user_file)
    census.start()
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = catch
        try:
            seed_all(0)
            step = w.factory(Context(device=device, profile="quick", seed=0))
            phase = "step"
            for _ in range(PROBE_STEPS):
                step()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
        except Exception as exc:  # the op list so far still answers the question
            error = f"{phase}: {type(exc).__name__}: {exc}"
    return {
        "findings": list(found.values()),
        "can_race": census.stop(),
        "error": error,
        "torch": torch.__version__,
        "cublas_workspace_config": os.environ.get(CUBLAS_ENV),
    }


def run_probe(source: Path, key: str, device: str) -> dict[str, Any]:
    """The probe of ``key``, in a process of its own with the fully deterministic mode's
    environment: on CUDA, cuBLAS refuses to be deterministic without its workspace config."""
    job = {"source": str(source.resolve()), "key": key, "device": device}
    with tempfile.TemporaryDirectory(prefix="detbench-probe-") as tmp:
        try:
            return run_child(
                "detbench.locate.audit:main",
                job,
                Path(tmp),
                "probe",
                timeout=3600,
                environment=get_mode(DETERMINISTIC_MODE).environment,
                label="the probe process",
            )
        except ChildFailed as exc:
            return {"findings": [], "error": str(exc)}


def audit(
    target: str, device: str, replicates: int = 3, out: Path | None = None, stream: Any = sys.stderr
) -> list[Audit]:
    """Audit every workload that ``target`` names; ``out`` keeps the verdict runs' records."""
    try:  # a missing file: one line, before torch loads
        source, keys = select_target(target)
    except WorkloadError as exc:
        raise AuditError(str(exc)) from None
    import torch

    # The parent's: the probe's child process (this module) loads no analysis and no runner.
    from detbench.analysis import verdicts
    from detbench.run.api import plan_run, run_planned

    cuda = torch.cuda.is_available()
    if out is not None:
        refuse_used(out)  # before the probes, which take a while
    run_dir = out or Path(tempfile.mkdtemp(prefix="detbench-audit-")) / "run"
    config = RunConfig(
        out=run_dir,
        workload_files=[source],
        only=keys,
        replicates=replicates,
        modes=[get_mode("default"), get_mode(DETERMINISTIC_MODE)],
        profile="quick",
        device=device,
        budget=0.05,
        timing=VERDICTS_ONLY,  # the audit states verdicts and no cost
    )
    runner = plan_run(config, stream, cuda=cuda)
    audits = []
    for key in keys:
        print(
            f"detbench audit: probing {key} under deterministic algorithms (warn only)", file=stream
        )
        probe = run_probe(source, key, device)
        a = Audit(
            workload=key,
            device=device,
            torch=torch.__version__,
            findings=[Finding(**f) for f in probe["findings"]],
            probe_error=probe.get("error"),
            can_race=list(probe.get("can_race") or []),
        )
        audits.append(a)
    print(
        f"detbench audit: running {', '.join(keys)} in fresh processes, default and "
        f"{DETERMINISTIC_MODE}, {replicates} replicates each",
        file=stream,
    )
    run_planned(runner)
    v = verdicts(load_results(run_dir))
    for a in audits:
        suite, name = a.workload.split("/", 1)
        rows = v[(v["suite"] == suite) & (v["workload"] == name)]
        fields = ("verdict", "distinct_fingerprints", "max_abs_diff", "message")
        for r in rows.to_dict("records"):
            a.verdicts[str(r["mode"])] = {k: r[k] for k in fields}
        a.results_dir = str(run_dir)
        det = a.verdicts.get(DETERMINISTIC_MODE, {}).get("verdict")
        default = a.verdicts.get("default", {}).get("verdict")
        if default == "reproducible":
            a.settings = get_mode("default").snippet()
        elif det == "reproducible":
            a.settings = get_mode(DETERMINISTIC_MODE).snippet()
        a.replace = sorted({f.op for f in a.findings}) if a.settings is None else []
    _locate(source, device, audits, stream)
    return audits


def _locate(source: Path, device: str, audits: list[Audit], stream: Any) -> None:
    """Locate the culprits of every workload the default mode left nondeterministic."""
    from detbench.locate.stages import locate  # the parent's: not in the probe's process

    keys = [
        a.workload
        for a in audits
        if a.verdicts.get("default", {}).get("verdict") == "nondeterministic"
    ]
    if not keys:
        return
    print(f"detbench audit: locating where {', '.join(keys)} part from run to run", file=stream)
    found = {
        loc.workload: loc
        for loc in locate(str(source), device, "default", check=False, stream=stream, only=keys)
    }
    for a in audits:
        loc = found.get(a.workload)
        if loc is None:
            continue
        det = a.verdicts.get(DETERMINISTIC_MODE, {}).get("verdict")
        fixed = {"reproducible": True, "nondeterministic": False}.get(str(det))
        for c in loc.culprits:
            c.fixed_by_deterministic_mode = fixed
            c.deterministic_mode_note = f"{DETERMINISTIC_MODE} is {det} in fresh processes"
        a.located = loc.to_json()


def _shown(path: str) -> str:
    from detbench.locate.report import shown  # the parent's: not in the probe's process

    return shown(path)


def to_text(audits: list[Audit]) -> str:
    lines: list[str] = []
    for a in audits:
        lines.append(f"{a.workload} on {a.device} (torch {a.torch})")
        if a.findings:
            lines.append(f"  ops with no deterministic implementation here ({len(a.findings)}):")
            for f in a.findings:
                times = f" (x{f.count})" if f.count > 1 else ""
                lines.append(f"    {f.op}{times}  at {_shown(f.file)}:{f.line}  {f.code.strip()}")
        else:
            lines.append("  no op without a deterministic implementation was called")
        if a.can_race:
            lines.append(
                "  ops that torch documents as nondeterministic by default here, called in the "
                f"probe's {PROBE_STEPS} steps (whether or not the runs below agree):"
            )
            for e in a.can_race:
                acc = f" (accumulate={e['accumulate']})" if e.get("accumulate") is not None else ""
                lines.append(
                    f"    {e['op']}{acc} in {e['phase']}, x{e['count']}  at "
                    f"{_shown(e['file'])}:{e['line']}"
                )
        if a.probe_error:
            lines.append(f"  the probe stopped early: {a.probe_error}")
        lines.append("  bitwise reproducible in fresh processes:")
        for mode, r in a.verdicts.items():
            what = r["verdict"]
            if what == "nondeterministic":
                d = r["max_abs_diff"]
                size = f", max abs diff {d:.3g}" if d is not None else ""
                what += f" ({r['distinct_fingerprints']} distinct results{size})"
            elif what not in ("reproducible", "single"):
                first = re.split(r"(?<=\.)\s", str(r["message"]).strip())[0]
                what += f": {first[:200]}"
            lines.append(f"    {mode:<22} {what}")
        default_agrees = a.verdicts.get("default", {}).get("verdict") == "reproducible"
        if a.settings is not None and a.findings and default_agrees:
            lines.append(
                f"  caution: bitwise equal in every replicate here, but the {len(a.findings)} "
                "ops above have no deterministic implementation: other sizes, thread counts or "
                "hardware can change their results"
            )
        if a.located is not None:
            lines += _located_lines(a.located)
        if a.settings is not None:
            default = a.settings == get_mode("default").snippet()
            note = " (torch's defaults: nothing to change)" if default else ""
            lines.append(f"  use these settings{note}:")
            lines += [f"    {s}" for s in a.settings.splitlines()]
        elif a.replace:
            lines.append(
                "  no mode makes it reproducible here; replace these ops (or run them on "
                "another device): " + ", ".join(a.replace)
            )
        else:
            lines.append(
                "  no mode makes it reproducible, and no op was flagged: the cause is outside "
                "torch's flags (unseeded randomness, threads, data order)"
            )
        lines.append("")
    return "\n".join(lines)


def _located_lines(loc: dict[str, Any]) -> list[str]:
    from detbench.locate.report import culprit_lines, parting  # the parent's, as above

    if loc.get("error"):
        return [f"  where the default mode's runs part: could not be recorded: {loc['error']}"]
    if loc["reproducible"]:
        return [
            f"  where the default mode's runs part: the difference did not recur in "
            f"{loc['processes']} more fresh processes under the recorder (every op and the "
            "step's outputs gave the same bits there)"
        ]
    if not loc["culprits"]:
        return [f"  where the default mode's runs part: {parting(loc)}"]
    lines = [line for c in loc["culprits"] for line in culprit_lines(c, indent="    ")]
    return ["  where the default mode's runs part (detbench locate):", *lines]


def main(job: dict[str, Any], out: Channel) -> int:
    """The child's side of ``run_probe`` (kind ``detbench.locate.audit:main``)."""
    return out.result(_probe(job["source"], job["key"], job["device"]))

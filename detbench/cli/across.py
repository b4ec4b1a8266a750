"""``detbench compare``, ``detbench merge`` and ``detbench submit``: runs across machines."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from detbench.cli.options import UserError, cuda_here, existing_dir, run_config
from detbench.run.api import plan_run
from detbench.run.merge import merge
from detbench.run.submit import PARTS, submit, submitit_module, tasks
from detbench.store.results import ENV_FILE, RESULTS_FILE, load_env, write_json_atomic


def compare_command(args: argparse.Namespace) -> int:
    out = Path(args.markdown) if args.markdown else None
    if out is not None and out.exists():
        raise UserError(f"{out} exists: give a new file for --markdown (nothing was overwritten)")
    dirs = [existing_dir(d) for d in args.dirs]
    if len(dirs) < 2 and not (dirs[0] / ENV_FILE).exists():
        raise UserError("give two or more runs to compare, or one set merged from several machines")
    # The analysis and the report load pandas, scipy and matplotlib: once the options are checked.
    from detbench.analysis.across import across, load_runs, machines
    from detbench.report import across as across_report
    from detbench.report import compare as pair

    runs = load_runs(dirs)
    if len(runs) < 2:
        raise UserError(f"{dirs[0]} holds one run: give two or more runs to compare")
    verdicts = across(runs)
    if args.json:
        print(json.dumps(verdicts, indent=2, default=str))
        return 0
    sets = [d for d in dirs if (d / ENV_FILE).exists() and machines(load_env(d))]
    text = md = ""
    if len(dirs) == 2 and not sets:  # two single runs: their throughput too
        c = pair.compare(dirs[0], dirs[1])
        text, md = pair.to_text(c) + "\n", pair.to_markdown(c) + "\n"
    print(text + across_report.to_text(runs, verdicts), end="")
    if out is not None:
        out.write_text(md + across_report.to_markdown(runs, verdicts), encoding="utf-8")
        print(f"\nMarkdown: {out}")
    return 0


def merge_command(args: argparse.Namespace) -> int:
    m = merge(Path(args.out), [Path(d) for d in args.dirs])
    _merged(m, args.no_report)
    return 0


def _merged(m: Any, no_report: bool) -> None:
    what = (
        f"{'some' if m.notes else 'the'} shards of one run"
        if m.kind == "run"
        else f"runs from {len(m.machines)} machines ({', '.join(m.machines)})"
    )
    print(f"merged {what}: {m.records} records in {m.out}")
    for note in m.notes:
        print(f"note: {note}")
    if not no_report:
        from detbench.report.write import write_report  # pandas, scipy, matplotlib: only here

        _, page = write_report(m.out)
        print(f"report: {page}")


def _params(args: argparse.Namespace, several: bool) -> dict[str, Any]:
    extra: dict[str, str] = {}
    for item in args.slurm_option or []:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise UserError(f"--slurm-option {item}: give KEY=VALUE, e.g. qos=high")
        extra[key.strip().replace("-", "_")] = value
    return {
        "timeout_min": args.time,
        "slurm_partition": None if several else args.partition,
        "slurm_gres": args.gres,
        "slurm_account": args.account,
        "slurm_constraint": args.constraint,
        "cpus_per_task": args.cpus_per_task,
        "slurm_array_parallelism": args.array_parallelism,
        "slurm_additional_parameters": extra or None,
    }


def submit_command(args: argparse.Namespace) -> int:
    for flag in ("resume", "shard"):
        if getattr(args, flag) is not None:
            raise UserError(
                f"submit makes its own shards and resumes its own jobs; give no --{flag} with it"
            )
    if args.out is None:
        raise UserError(
            f"give --out DIR: where the merged run goes (its jobs write under DIR/{PARTS}/)"
        )
    partitions = [p.strip() for p in (args.partition or "").split(",") if p.strip()]
    several = len(partitions) > 1
    if several and args.shards:
        raise UserError(
            "--shards splits one run; with several partitions each runs the whole "
            "run: give one or the other"
        )
    out = Path(args.out)  # run_config refuses it unless it is new or empty
    config = run_config(args)
    todo = tasks(config, None if several else args.shards, partitions if several else None)
    for t in todo[:1]:  # a bad selection, or more shards than workers: one line, nothing sent
        plan_run(t.config, cuda=cuda_here(), dry_run=True)
    params = _params(args, several)
    if args.dry_run:
        for t in todo:
            print(f"{t.name}: {t.config.out}")
        print(f"would submit {len(todo)} job(s) through {args.executor}; nothing was submitted")
        return 0
    submitit_module()  # refuse now, in one line, where submitit is missing
    outcomes = submit(args.executor, todo, params, retries=args.retries)
    done = [o for o in outcomes if (o.out / RESULTS_FILE).exists()]
    if not done:
        raise UserError("no job left any record: nothing to merge (see the lines above)")
    m = merge(out, [o.out for o in done])
    env = load_env(out)
    env["jobs"] = [o.to_json() for o in outcomes]
    env["executor"] = args.executor
    write_json_atomic(out / ENV_FILE, env)
    _merged(m, args.no_report)
    failed = [o for o in outcomes if o.state != "COMPLETED"]
    for o in failed:
        print(f"job not completed: {o.line()}", file=sys.stderr)
    return 1 if failed else 0

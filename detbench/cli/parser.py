"""The command line's parser, argparse only: it imports nothing the commands need (torch,
pandas, the runner), so ``detbench --help``, ``modes``, ``settings`` and ``list`` start at once."""

from __future__ import annotations

import argparse
from typing import Any

from detbench.cli.options import CUDNN_LOG_HELP, mode_options, run_options, selection
from detbench.core.modes import DETERMINISTIC_MODE


def build_parser() -> argparse.ArgumentParser:
    """Every subcommand and its options; ``args.command`` names the one given."""
    p = argparse.ArgumentParser(
        prog="detbench",
        description="Measure what determinism costs in PyTorch: throughput and bitwise "
        "run-to-run equality of workloads under every reproducibility mode.",
    )
    sub = p.add_subparsers(dest="command", required=True)
    for add in (_show, _run, _across, _submit, _attribute, _locate, _exec):
        add(sub)
    return p


def _show(sub: Any) -> None:
    """``modes``, ``settings`` and ``list``: what there is to run."""
    m = sub.add_parser("modes", help="print the determinism modes")
    m.add_argument("--json", action="store_true", help="a JSON list, with Python snippets")

    st = sub.add_parser("settings", help="print the settings beside the modes (--set NAME=LEVEL)")
    st.add_argument("--json", action="store_true", help="a JSON list: name, levels, default, doc")

    ls = sub.add_parser("list", help="print the workloads")
    selection(ls)
    ls.add_argument(
        "--profile",
        choices=("quick", "full"),
        default="full",
        help="whose parameters to show (default: full)",
    )
    ls.add_argument("--json", action="store_true", help="a JSON list")


def _run(sub: Any) -> None:
    """``run``, ``report``, ``audit``, ``gpu-check`` and ``index``."""
    r = sub.add_parser("run", help="run workloads under the determinism modes")
    run_options(r)
    mode_options(r)
    r.add_argument(
        "--locate",
        action="store_true",
        help="after the run, locate the op, module and line where each nondeterministic "
        "(workload, mode) parts from run to run (detbench locate; the report shows them)",
    )
    r.add_argument("--cudnn-log", action="store_true", default=None, help=CUDNN_LOG_HELP)

    rep = sub.add_parser(
        "report", help="write DIR/report.md and a self-contained DIR/report.html for a run"
    )
    rep.add_argument("dir", metavar="DIR", help="a results directory written by 'detbench run'")

    aud = sub.add_parser(
        "audit",
        help="which ops of a workload have no deterministic implementation here, and is it "
        "reproducible by default and fully deterministic",
    )
    aud.add_argument(
        "target", metavar="FILE.py[:WORKLOAD]", help="a workload file, or one of its workloads"
    )
    aud.add_argument("--device", choices=("cpu", "cuda"), help="default: cuda when present")
    aud.add_argument(
        "--replicates",
        type=int,
        default=3,
        metavar="N",
        help="fresh processes per mode (default 3)",
    )
    aud.add_argument("--out", metavar="DIR", help="keep the verdict runs' records in DIR")
    aud.add_argument("--json", action="store_true", help="the same answer as JSON")

    gc = sub.add_parser(
        "gpu-check",
        help="the smoke test for a new GPU host: one small workload per suite, 2 modes x 2 "
        "fresh processes, and what worked in plain words",
    )
    gc.add_argument(
        "--device",
        choices=("cuda", "cpu"),
        default="cuda",
        help="cuda (default); cpu rehearses the check without a GPU",
    )
    gc.add_argument("--out", metavar="DIR", help="results directory (default: results/STAMP-...)")
    gc.add_argument("--cudnn-log", action="store_true", help=CUDNN_LOG_HELP)

    idx = sub.add_parser(
        "index", help="regenerate DIR/README.md, the index of published runs (default: results)"
    )
    idx.add_argument("dir", metavar="DIR", nargs="?", default="results")


def _across(sub: Any) -> None:
    """``compare`` and ``merge`` (``detbench.cli.across``)."""
    cmp = sub.add_parser(
        "compare",
        help="compare runs: the same bits across machines for every workload and mode in more "
        "than one run; with two runs, also throughput changes with significance",
    )
    cmp.add_argument(
        "dirs",
        nargs="+",
        metavar="DIR",
        help="two or more runs (the first is the reference), or a set merged from several machines",
    )
    cmp.add_argument(
        "--json",
        action="store_true",
        help="the cross-machine verdicts as a JSON "
        "list: workload, mode, same_bits (true/false/null), groups",
    )
    cmp.add_argument("--markdown", metavar="FILE", help="also write the comparison as Markdown")

    mrg = sub.add_parser(
        "merge",
        help="merge the shards of one run (run --shard K/N) into one run, or runs from several "
        "machines into one set, each record naming its machine",
    )
    mrg.add_argument("out", metavar="OUT", help="the merged run's directory (new)")
    mrg.add_argument("dirs", nargs="+", metavar="DIR", help="the shards, or the runs")
    mrg.add_argument("--no-report", action="store_true", help="do not write the report")


def _submit(sub: Any) -> None:
    s = sub.add_parser(
        "submit",
        help="run a run's shards (or one run per partition) as batch jobs through submitit "
        "(Slurm, or --executor local), then merge them",
    )
    run_options(s)
    mode_options(s)
    s.add_argument(
        "--executor",
        choices=("slurm", "local"),
        required=True,
        help="slurm (sbatch, a job array) or local (submitit's local executor: "
        "processes on this machine)",
    )
    s.add_argument(
        "--shards",
        type=int,
        metavar="N",
        help="split the run into N shards, one job each (a job array)",
    )
    s.add_argument(
        "--partition",
        metavar="P[,P...]",
        help="the Slurm partition of the shards; "
        "several: one whole run per partition (a GPU type each), merged into a set "
        "for the cross-machine verdict",
    )
    s.add_argument("--gres", metavar="GRES", help="Slurm --gres, e.g. gpu:1")
    s.add_argument("--time", type=int, metavar="MINUTES", help="each job's time limit")
    s.add_argument("--account", metavar="ACCOUNT", help="Slurm --account")
    s.add_argument("--constraint", metavar="FEATURES", help="Slurm --constraint")
    s.add_argument("--cpus-per-task", type=int, metavar="N", help="CPUs per job")
    s.add_argument(
        "--array-parallelism",
        type=int,
        metavar="N",
        help="at most N jobs of the array at once (Slurm)",
    )
    s.add_argument(
        "--slurm-option",
        action="append",
        metavar="KEY=VALUE",
        help="any other sbatch option (repeatable), e.g. qos=high",
    )
    s.add_argument(
        "--retries",
        type=int,
        default=1,
        metavar="N",
        help="resubmit a failed job (it resumes) up to N times (default 1)",
    )


def _attribute(sub: Any) -> None:
    a = sub.add_parser(
        "attribute",
        help="which switch costs what: from the default mode each switch added alone, from the "
        "fully deterministic mode each removed alone (an ordinary run with an Attribution "
        "section in its report)",
    )
    run_options(a)
    a.add_argument(
        "--compile",
        action="store_true",
        help="also attribute execution=compile (torch.compile, inductor): compiles "
        "every workload in two more modes, so it is off by default",
    )
    a.set_defaults(mode=None, set=None)


def _locate(sub: Any) -> None:
    q = sub.add_parser(
        "locate",
        help="find the op, the module and the line where two fresh runs of a workload first "
        "part (exit 0: reproducible, 1: it differs)",
        description="Records every op of the workload's build and fingerprint steps (forward, "
        "backward, optimizer) in fresh processes, with a digest of its inputs and outputs, and "
        "names each culprit: an op whose inputs were bitwise equal in both runs and whose "
        "outputs were not. It measures the size of each difference and checks whether "
        f"{DETERMINISTIC_MODE} fixes it. Not seen: work outside PyTorch's dispatcher, and the "
        "compiled kernels of torch.compile (under the recorder compiled code runs eagerly).",
    )
    q.add_argument(
        "target",
        metavar="FILE.py[:WORKLOAD]",
        nargs="?",
        help="a workload file, or one of its workloads; or, after --, a command that runs a "
        "script (detbench locate -- python train.py)",
    )
    q.add_argument(
        "--mode",
        default="default",
        metavar="NAME",
        help="the mode to locate in (default: default; settings as in "
        "det-algos[fill_uninitialized_memory=off])",
    )
    q.add_argument(
        "--replicates",
        type=int,
        default=2,
        metavar="N",
        help="fresh processes to compare (default 2)",
    )
    q.add_argument(
        "--until",
        type=int,
        default=4,
        metavar="M",
        help="while the first N agree, more processes up to M in all (default 4)",
    )
    q.add_argument(
        "--steps",
        type=int,
        metavar="K",
        help="at most K steps (default: the workload's fingerprint steps)",
    )
    q.add_argument("--device", choices=("cpu", "cuda"), help="default: cuda when present")
    q.add_argument(
        "--profile",
        choices=("quick", "full"),
        help="workload sizes (default: quick, on cuda as on cpu)",
    )
    q.add_argument(
        "--no-check",
        action="store_true",
        help=f"do not run the culprits again in {DETERMINISTIC_MODE}",
    )
    q.add_argument("--json", action="store_true", help="the answer as JSON")


def _exec(sub: Any) -> None:
    e = sub.add_parser(
        "exec",
        help="run your command (python train.py) unchanged under each mode in fresh processes: "
        "is it reproducible, where do its runs part, and what does determinism cost it",
        description="Runs COMMAND in fresh processes under each mode, the modes interleaved in "
        "an order balanced over the rounds with an A/A copy of the baseline, after one untimed "
        "run; the mode is applied in the script's own interpreter before its first line. "
        "Compares bitwise what each run leaves (the tensors of its checkpoints, the numbers it "
        "prints, detbench.fingerprint calls), says where the replicates first part, times the "
        "runs in pairs, names the flags the script sets itself and the ops it calls that can "
        "race.",
    )
    mode_options(e)
    e.add_argument(
        "--replicates", type=int, metavar="N", help="rounds: runs per mode (default 3, at least 2)"
    )
    e.add_argument("--out", metavar="DIR", help="results directory (default: results/STAMP-...)")
    e.add_argument("--resume", metavar="DIR", help="finish an exec run that was stopped")
    e.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        help="kill a run past this many seconds and run it once more (default: a timed run "
        "past 5x the longest run so far, 60 s at least, is called hung)",
    )
    e.add_argument("--seed", type=int, help="the seed of the rounds' shuffled order (default 0)")
    e.add_argument(
        "--no-census",
        action="store_true",
        help="skip the untimed run that counts the ops that can race",
    )
    e.add_argument("--dry-run", action="store_true", help="print the runs and run nothing")

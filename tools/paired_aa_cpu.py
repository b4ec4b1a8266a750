"""Real A/A data of the paired design on this CPU, to choose the interval of paired costs.

Each experiment is one run in miniature: for each replicate, two fresh worker processes of the
same settings (copy 0 and copy 1) stay alive together; for each workload both build it and warm
up (one at a time), then in each of ``--rounds`` rounds they take turns, in an order shuffled
anew each round, each timing ONE block of steps (about ``--block`` seconds); the coordinator
writes one line of ``paired.jsonl`` per (workload, replicate, copy) through
``detbench.store.paired``. Nothing is mocked: the noise is this machine's.

Copy 1 against copy 0 is an A/A comparison: a 95% interval of their ratio must contain 1 in
95% of the experiments. ``--report`` reads the experiments written and prints, for each
candidate interval of ``detbench.analysis.paired_costs``, the share of A/A intervals that
exclude 1 and their median half-width.

    python tools/paired_aa_cpu.py --out /tmp/aa --experiments 20          # measure
    python tools/paired_aa_cpu.py --out /tmp/aa --report                  # compare estimators
"""

from __future__ import annotations

import argparse
import gc
import math
import multiprocessing as mp
import os
import random
import sys
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

WORKLOADS = (
    "mm128",
    "mm256",
    "mm512",
    "conv",
    "conv_wide",
    "mlp_train",
    "add_big",
    "add_small",
    "lstm",
    "layernorm",
    "softmax",
    "sort",
)


def _build(name: str) -> Any:
    """A step of workload ``name``: a closure over its tensors (built once, outside timing)."""
    import torch

    torch.manual_seed(0)
    if name.startswith("mm"):
        n = int(name[2:])
        a, b = torch.randn(n, n), torch.randn(n, n)
        return lambda: torch.mm(a, b)
    if name.startswith("conv"):
        wide = name == "conv_wide"
        conv = torch.nn.Conv2d(64 if wide else 16, 64 if wide else 32, 3, padding=1)
        x = torch.randn(2 if wide else 8, conv.in_channels, 32, 32)  # (B, C, H, W)
        return lambda: conv(x)
    if name == "add_small":
        a, b = torch.randn(1 << 14), torch.randn(1 << 14)
        return lambda: torch.add(a, b)
    if name == "layernorm":
        ln = torch.nn.LayerNorm(1024)
        x = torch.randn(256, 1024)
        return lambda: ln(x)
    if name == "softmax":
        x = torch.randn(512, 2048)
        return lambda: torch.softmax(x, dim=-1)
    if name == "sort":
        x = torch.randn(1 << 18)
        return lambda: torch.sort(x)
    if name == "mlp_train":
        net = torch.nn.Sequential(
            torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256)
        )
        opt = torch.optim.SGD(net.parameters(), lr=1e-3)
        x = torch.randn(64, 256)

        def train() -> None:
            opt.zero_grad()
            net(x).square().mean().backward()
            opt.step()

        return train
    if name == "add_big":
        a, b = torch.randn(1 << 22), torch.randn(1 << 22)
        return lambda: torch.add(a, b)
    if name == "lstm":
        lstm = torch.nn.LSTM(64, 128, batch_first=True)
        x = torch.randn(8, 32, 64)  # (B, T, features)
        return lambda: lstm(x)
    raise ValueError(name)


def _worker(conn: Connection, block: float, warm: float) -> None:
    """A timing worker: builds, warms up and times blocks when the coordinator says so."""
    import torch  # noqa: F401  (the import, seconds, before the coordinator times anything)

    step: Any = None
    number = 1
    while True:
        msg = conn.recv()
        if msg is None:
            return
        if msg[0] == "build":
            step = _build(msg[1])
            end = time.perf_counter() + warm
            n = 0
            t0 = time.perf_counter()
            while time.perf_counter() < end or n < 3:
                step()
                n += 1
            per = (time.perf_counter() - t0) / n
            number = max(1, math.floor(block / per))
            conn.send(number)
        elif msg[0] == "time":
            gc.disable()
            began = time.time()
            t0 = time.perf_counter()
            for _ in range(number):
                step()
            t = (time.perf_counter() - t0) / number
            gc.enable()
            conn.send((began, t))
        elif msg[0] == "free":
            step = None
            gc.collect()
            conn.send("freed")


def replicate(out: Path, rep: int, rounds: int, block: float, warm: float, seed: int) -> None:
    """One replicate: two fresh workers of the same settings, every workload, R rounds each."""
    from detbench.store.paired import PairedWriter, line
    from detbench.worker.timing import median_ci, relative_half_width, summarise

    ctx = mp.get_context("spawn")
    pipes, procs = [], []
    for _ in range(2):
        parent, child = ctx.Pipe()
        p = ctx.Process(target=_worker, args=(child, block, warm), daemon=True)
        p.start()
        pipes.append(parent)
        procs.append(p)
    with PairedWriter(out) as w:
        for workload in WORKLOADS:
            numbers = []
            for c in pipes:  # one worker at a time builds and warms up
                c.send(("build", workload))
                numbers.append(c.recv())
            got: list[dict[str, list[Any]]] = [
                {"samples": [], "rounds": [], "positions": [], "block_start": []} for _ in pipes
            ]
            for r in range(rounds):
                order = list(range(len(pipes)))
                random.Random(f"{seed}|{workload}|{rep}|{r}").shuffle(order)
                for pos, i in enumerate(order):
                    pipes[i].send(("time",))
                    began, t = pipes[i].recv()
                    g = got[i]
                    g["samples"].append(t)
                    g["rounds"].append(r)
                    g["positions"].append(pos)
                    g["block_start"].append(began)
            for i, c in enumerate(pipes):
                c.send(("free",))
                c.recv()
                s = got[i]["samples"]
                median, iqr = summarise(s)
                ci = median_ci(s)
                timing = {
                    "samples": s,
                    "median": median,
                    "iqr": iqr,
                    "number_per_block": numbers[i],
                    "clock": "perf_counter",
                    **(
                        {}
                        if ci is None
                        else {
                            "ci_low": ci[0],
                            "ci_high": ci[1],
                            "ci_rel": relative_half_width(median, ci),
                        }
                    ),
                }
                w.append(
                    line(
                        suite="aa",
                        workload=workload,
                        mode="default",
                        replicate=rep,
                        copy=i,
                        workers=len(pipes),
                        number_per_block=numbers[i],
                        timing=timing,
                        worker_pid=procs[i].pid,
                        device="cpu",
                        device_name="cpu:0",
                        **got[i],
                    )
                )
    for c, p in zip(pipes, procs, strict=True):
        c.send(None)
        p.join(10)


def measure(args: argparse.Namespace) -> None:
    for e in range(args.experiments):
        out = args.out / f"e{e:03d}"
        if (out / "paired.jsonl").is_file():
            continue  # measured in an earlier call
        tmp = args.out / f".e{e:03d}"
        if tmp.exists():
            for f in tmp.iterdir():
                f.unlink()
        t0 = time.time()
        for rep in range(args.replicates):
            replicate(tmp, rep, args.rounds, args.block, args.warm, args.seed + e)
        tmp.rename(out)
        print(f"experiment {e}: {time.time() - t0:.1f} s", flush=True)


def report(args: argparse.Namespace) -> None:
    import numpy as np

    from detbench.analysis import paired_costs, variance
    from detbench.store.paired import load_paired

    runs = sorted(p for p in args.out.glob("e[0-9]*") if (p / "paired.jsonl").is_file())
    lines = [load_paired(p) for p in runs]
    print(paired_costs.coverage_table(lines).to_string())
    # The variance split of every A/A comparison, and Kalibera & Jones's repetitions for the
    # median split, with a round of 2 blocks and ``--process-seconds`` for a fresh process.
    splits = [variance.split(p) for d in lines for _, _, p in paired_costs.aa_pairs(d)]
    med = variance.Split(
        *(float(np.nanmedian([getattr(s, k) for s in splits])) for k in variance.LEVELS),
        per_process=float(np.median([s.per_process for s in splits])),
        n_processes=min(s.n_processes for s in splits),
    )
    limits = {k: sum(s.limited_by == k for s in splits) for k in variance.LEVELS}
    print(
        f"variance of the log per-round ratio (median over {len(splits)} comparisons): rounds "
        f"{med.rounds:.4g}, processes {med.processes:.4g}, time {med.time:.4g}; limited by {limits}"
    )
    for target in (0.05, 0.01):
        r = variance.repetitions(med, 2 * args.block, args.process_seconds, target)
        print(f"Kalibera & Jones for +-{target:.0%}: {r}")
    print(
        f"{len(runs)} experiments; python {sys.version.split()[0]}, "
        f"ATEN_CPU_CAPABILITY={os.environ.get('ATEN_CPU_CAPABILITY')}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--experiments", type=int, default=20)
    ap.add_argument("--replicates", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--block", type=float, default=0.01, help="seconds per block")
    ap.add_argument("--warm", type=float, default=0.1, help="seconds of warm-up")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--report", action="store_true")
    ap.add_argument(
        "--process-seconds", type=float, default=3.0, help="a fresh worker's start-up (report)"
    )
    args = ap.parse_args()
    if args.report:
        report(args)
    else:
        args.out.mkdir(parents=True, exist_ok=True)
        measure(args)


if __name__ == "__main__":
    main()

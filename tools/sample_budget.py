"""How many samples the +-1% interval needs, estimated from the recorded samples of GPU runs.

    python tools/sample_budget.py RUN/results.jsonl [RUN2/results.jsonl ...] [--reps 40]

For each successful record, the sampling rule of ``detbench.worker.timing`` (the real ``_sample``
loop, with CUDA's batches of 8 samples) is replayed on samples drawn from that record's own
samples: a smoothed bootstrap (a recorded sample picked at random, plus Gaussian noise of
Silverman's bandwidth, so that 6-16 recorded samples do not make a median that ties at once).
Each record is replayed ``--reps`` times under the old rule (the budget only) and under the new
one (on past the budget towards ``sampling_ceiling`` while the target is in reach). It prints,
for the records with 5-100 ms steps, the share that reach the target under each rule (the mean
over records of the share of replays that reached it), and for every record the sampling
seconds each rule takes, summed over the run.

These are estimates: a replay draws from the spread a record showed in its few samples, and a
GPU's samples are neither independent nor identically distributed (clocks drift, a neighbour's
work comes and goes). ``--quiet`` keeps the records timed with no other process on the GPU.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from detbench.worker.budget import sampling_ceiling
from detbench.worker.samplers import CUDA_BATCH
from detbench.worker.timing import _sample


class Replay:
    """A sampler whose samples are draws from one record's samples, on a virtual clock."""

    batch = CUDA_BATCH

    def __init__(self, draw: Callable[[], float], number: int) -> None:
        self.draw, self.number, self.t = draw, number, 0.0

    def now(self) -> float:
        return self.t

    def one_step(self, step: Callable[[], Any]) -> float:  # not used by _sample
        return self.draw()

    def samples(self, step: Callable[[], Any], number: int, k: int) -> list[float]:
        out = [max(self.draw(), 1e-12) for _ in range(k)]
        self.t += sum(out) * number
        return out


def smoothed(samples: list[float], rng: random.Random) -> Callable[[], float]:
    """Draws from ``samples`` plus Gaussian noise of Silverman's bandwidth."""
    n = len(samples)
    sd = statistics.pstdev(samples)
    q = statistics.quantiles(samples, n=4) if n >= 2 else [0.0, 0.0, 0.0]
    spread = min(sd, (q[2] - q[0]) / 1.34) or sd
    h = 0.9 * spread * n**-0.2
    return lambda: rng.choice(samples) + rng.gauss(0.0, h)


def replay(timing: dict[str, Any], ceiling: float | None, rng: random.Random) -> tuple[bool, float]:
    """(reached, sampling seconds) of one replay of ``timing``'s record under a rule."""
    number = int(timing["number_per_block"])
    sampler = Replay(smoothed(list(timing["samples"]), rng), number)
    _, _, reached = _sample(
        lambda: None,
        sampler,
        number,
        float(timing["median"]),
        float(timing["budget"]),
        float(timing["target_rel"]),
        int(timing.get("min_samples") or 6),
        ceiling,
    )
    return reached, sampler.t


def quiet(record: dict[str, Any]) -> bool:
    load = record.get("host_load") or {}
    return not load.get("gpu_other_processes") and record.get("timed_alone") is not False


def study(path: Path, reps: int, only_quiet: bool, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    band = {"records": 0, "old": 0.0, "new": 0.0, "recorded": 0}
    seconds = {"records": 0, "recorded": 0.0, "old": 0.0, "new": 0.0}
    # For the estimate: short steps' sampling as a share of the budget, long steps' samples.
    short: list[float] = []
    long: list[float] = []
    for line in path.read_text().splitlines():
        r = json.loads(line)
        t = r.get("timing") or {}
        if r.get("status") != "ok" or not t.get("samples") or "budget" not in t:
            continue
        if only_quiet and not quiet(r):
            continue
        per_sample = float(t["median"]) * int(t["number_per_block"])
        ceiling = sampling_ceiling(per_sample, float(t["budget"]), "cuda")
        old = [replay(t, None, rng) for _ in range(reps)]
        new = [replay(t, ceiling, rng) for _ in range(reps)]
        seconds["records"] += 1
        seconds["recorded"] += sum(t["samples"]) * int(t["number_per_block"])
        seconds["old"] += statistics.mean(s for _, s in old)
        seconds["new"] += statistics.mean(s for _, s in new)
        if int(t["number_per_block"]) > 1:
            short.append(statistics.mean(s for _, s in new) / float(t["budget"]))
        else:
            long.append(statistics.mean(s for _, s in new) / per_sample)
        if 0.005 <= float(r["seconds_per_step"]) <= 0.1:
            band["records"] += 1
            band["recorded"] += bool(t.get("reached_target"))
            band["old"] += sum(ok for ok, _ in old) / reps
            band["new"] += sum(ok for ok, _ in new) / reps
    return {"band": band, "seconds": seconds, "short": short, "long": long}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="+", type=Path, help="a run's results.jsonl")
    ap.add_argument("--reps", type=int, default=40, help="replays of each record (default 40)")
    ap.add_argument("--quiet", action="store_true", help="only records timed alone on the GPU")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    for path in a.results:
        if not path.is_file():
            print(f"no such file: {path}", file=sys.stderr)
            return 2
        got = study(path, a.reps, a.quiet, a.seed)
        b, s = got["band"], got["seconds"]
        n = max(b["records"], 1)
        print(f"{path} ({'quiet records only' if a.quiet else 'every record'}; estimates)")
        print(
            f"  5-100 ms steps: {b['records']} records; reached +-1%: recorded "
            f"{b['recorded'] / n:.0%}, replayed under the old rule {b['old'] / n:.0%}, "
            f"under the new rule {b['new'] / n:.0%}"
        )
        print(
            f"  sampling seconds over {s['records']} records: recorded {s['recorded']:.1f}, "
            f"replayed old {s['old']:.1f}, new {s['new']:.1f} "
            f"(+{s['new'] - s['old']:.1f} s, +{(s['new'] - s['old']) / max(s['records'], 1):.3f}"
            " s a record)"
        )
        sh, lo = got["short"], got["long"]
        print(
            f"  for the estimate: {len(sh)} records of several steps a sample sampled "
            f"{statistics.mean(sh or [0]):.2f} budgets on average; {len(lo)} of one step a "
            f"sample took {statistics.mean(lo or [0]):.1f} samples' seconds"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

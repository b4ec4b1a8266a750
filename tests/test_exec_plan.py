"""``detbench exec``'s order of runs, how it prints an interval, and the lines it reads as they
come (issue 40): each without a whole exec run."""

from __future__ import annotations

import io
import json
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from detbench.core.modes import get_mode
from detbench.report.execsection import aa_reading, fmt_interval, hung_lines
from detbench.run.execplan import ExecConfig, RunSlot, orders, plan
from detbench.run.execrun import ExecRunner


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_every_member_takes_every_place_once_in_a_block_of_rounds(seed: int) -> None:
    for members in (2, 3, 4):
        rows = orders(members, 2 * members, seed)
        assert len(rows) == 2 * members
        for block in (rows[:members], rows[members:]):
            assert all(sorted(r) == list(range(members)) for r in block)
            # each place holds each member once over the block: a Latin square
            for place in range(members):
                assert sorted(r[place] for r in block) == list(range(members))
    # a last block cut short keeps whole rounds
    assert [sorted(r) for r in orders(2, 3, seed)] == [[0, 1]] * 3


def test_the_default_plan_puts_each_mode_and_the_copy_in_each_place_once() -> None:
    c = ExecConfig(
        command=[sys.executable, "train.py"],
        modes=[get_mode("default"), get_mode("det-algos")],
        out=Path("unused"),
    )
    slots = plan(c)
    assert len(slots) == 9 and [s.round for s in slots] == [0] * 3 + [1] * 3 + [2] * 3
    places = Counter((s.mode.name, s.copy, s.position) for s in slots)
    assert set(places.values()) == {1} and len(places) == 9
    # the orders are drawn from the seed: another seed, other orders
    other = plan(ExecConfig(command=c.command, modes=c.modes, out=c.out, seed=5))
    assert [(s.mode.name, s.copy) for s in other] != [(s.mode.name, s.copy) for s in slots]


def test_an_interval_has_the_decimals_that_show_whether_it_holds_1() -> None:
    assert fmt_interval((1.06, 1.01, 1.12)) == "1.06x [1.01, 1.12]"
    assert fmt_interval((0.99, 0.981, 0.998)) == "0.990x [0.981, 0.998]"  # not [0.98, 1.00]
    assert fmt_interval((0.999, 0.9981, 0.99991)) == "0.9990x [0.9981, 0.9999]"
    assert fmt_interval((0.99, 0.97, 1.002)) == "0.99x [0.97, 1.00]"  # holds 1, and reads so
    assert fmt_interval(None) == "–"
    assert aa_reading((0.99, 0.97, 1.002), None) == "A/A copy: no false cost"
    assert aa_reading((0.99, 0.981, 0.998), (1.0, 0.9, 1.1)) == (
        "A/A copy: a false cost in throughput (its interval excludes 1)"
    )


#: Step lines 0.3 s apart, printed as people print them: no flush, stdout a pipe.
STEPS = """\
import time
for step in range(4):
    time.sleep(0.3)
    print(f"step {step} loss 1.0")
"""


def test_a_scripts_step_lines_reach_exec_as_they_are_printed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Python block-buffers stdout into a pipe: without the boot's line buffering the four lines
    arrive together at the exit and give no steps a second (unless the user's shell sets
    PYTHONUNBUFFERED, which this test takes away)."""
    monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    (tmp_path / "train.py").write_text(STEPS)
    c = ExecConfig(
        command=[sys.executable, "train.py"],
        modes=[get_mode("default")],
        out=tmp_path / "run",
        cwd=tmp_path,
    )
    runner = ExecRunner(c)
    runner.prepare()
    facts = runner.one(RunSlot(0, c.modes[0], 0, 0), census=False)
    assert facts["status"] == "ok" and facts["steps_seen"] == 4
    rate = facts["steps_per_second"]
    # 3 steps over at least 0.9 s of sleeps between the first line and the last
    assert rate is not None and 0 < rate <= 3 / 0.9


def test_ctrl_c_waits_until_a_runs_facts_and_records_are_both_written() -> None:
    import os
    import signal

    from detbench.run.execrun import held_interrupt

    # What the process had before (Python's handler; SIG_IGN where a shell started it in the
    # background): held_interrupt puts back whichever it was.
    before = signal.getsignal(signal.SIGINT)
    written = []
    with pytest.raises(KeyboardInterrupt), held_interrupt():
        written.append("exec.json")
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C between the two writes
        written.append("results.jsonl")
    assert written == ["exec.json", "results.jsonl"]
    assert signal.getsignal(signal.SIGINT) is before
    with held_interrupt():  # no Ctrl-C: nothing raised
        written.append("again")
    assert written[-1] == "again"


def _doc(aa_bodies: list[float]) -> dict:
    """An exec.json of one mode: the baseline's own time 1.0 s a round, its copy's as given."""
    runs = {}
    for r, body in enumerate(aa_bodies):
        for copy, b in ((0, 1.0), (1, body)):
            runs[f"r{r}-c{copy}"] = {
                "round": r,
                "mode": "default",
                "copy": copy,
                "status": "ok",
                "body": b,
            }
    return {"config": {"modes": [{"name": "default"}]}, "runs": runs}


def test_an_aa_copy_with_a_false_cost_says_what_it_means_for_the_costs() -> None:
    from detbench.report.execsection import aa_warning

    said = aa_warning(_doc([0.90, 0.91, 0.905]))  # 10% faster each round: excludes 1
    assert said is not None and said.startswith("the A/A copy, the baseline against itself")
    assert "throughput 1.10x [1.09, 1.12]" in said and "--replicates" in said
    assert aa_warning(_doc([0.90, 1.10, 1.0])) is None  # holds 1


def _script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> tuple[Path, Path]:
    """``text`` as ``train.py`` in a fresh folder (returned), run on the CPU, counting its starts
    in the file ``STARTS`` names (returned; outside the folder exec watches)."""
    starts = tmp_path / "starts"
    monkeypatch.setenv("STARTS", str(starts))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    work = tmp_path / "work"
    work.mkdir()
    (work / "train.py").write_text(text)
    return work, starts


#: A script that hangs on its third start (it counts its starts in a file outside the watched
#: folder): the way a torchrun rank hung at exit in one run of three.
HANGS_ONCE = """\
import os, sys, time
path = os.environ["STARTS"]
n = int(open(path).read()) + 1 if os.path.exists(path) else 1
open(path, "w").write(str(n))
print("loss 0.5")
sys.stdout.flush()
if n == 3:
    time.sleep(600)
"""


@pytest.mark.slow  # 6 runs of a fresh interpreter with the boot, one of them held about 12 s: 35 s
def test_a_run_that_hangs_is_killed_past_its_limit_and_run_once_more(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from detbench.run import execrun

    # in use, 5x the longest run and 60 s at least; here 3x (a run is about 4 s: the boot
    # imports torch) and 6 s: 1.5x once killed a run that CI's load had merely slowed
    monkeypatch.setattr(execrun, "HANG_FACTOR", 3.0)
    monkeypatch.setattr(execrun, "HANG_FLOOR", 6.0)
    work, starts = _script(tmp_path, monkeypatch, HANGS_ONCE)
    c = ExecConfig(
        command=[sys.executable, "train.py"],
        modes=[get_mode("default")],
        out=tmp_path / "run",
        replicates=2,
        census=False,
        cwd=work,
    )
    runner = ExecRunner(c, io.StringIO())
    t0 = time.monotonic()
    runner.run()
    assert time.monotonic() - t0 < 60  # not the 600 s sleep
    # the warm-up, then the second timed run hung; it was killed and run once more
    assert starts.read_text() == str(1 + len(plan(c)) + 1)
    [hung] = runner.hung
    longest = max(f["wall"] for f in [runner.warmup, *runner.facts.values()] if f)
    assert hung["status"] == "hung" and 6.0 <= hung["limit"] <= 3.0 * longest + 1e-9
    assert Path(hung["folder"]).name == f"{hung['key']}-hung"
    assert (Path(hung["folder"]) / "stdout.txt").read_text() == "loss 0.5\n"
    assert all(f["status"] == "ok" for f in runner.facts.values())
    assert len(runner.facts) == len(plan(c))
    said = runner.stream.getvalue()  # type: ignore[attr-defined]
    assert f"ran past {hung['limit']:.0f} s (" in said and "hung)" in said
    doc = json.loads((c.out / "exec.json").read_text())
    assert doc["hung"] == runner.hung


#: A script whose interpreter hangs in its teardown on its first start, after the boot's at-exit
#: report is written: a module-level object's finaliser sleeps, as the DDP rank's freeing of its
#: gloo group did (docs/measured.md, "A torchrun rank that hung at exit").
HANGS_AT_EXIT_ONCE = """\
import os, time
path = os.environ["STARTS"]
n = int(open(path).read()) + 1 if os.path.exists(path) else 1
open(path, "w").write(str(n))
print("loss 0.5")


class Teardown:
    def __del__(self):
        if n == 1:
            time.sleep(600)


held = Teardown()
"""


@pytest.mark.slow  # 4 runs of a fresh interpreter with the boot, one of them held 3 s: 20 s
def test_the_untimed_first_run_hung_at_exit_is_killed_and_run_once_more(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from detbench.run import execwait

    monkeypatch.setattr(execwait, "EXIT_GRACE", 3.0)  # 30 s in use
    work, starts = _script(tmp_path, monkeypatch, HANGS_AT_EXIT_ONCE)
    c = ExecConfig(
        command=[sys.executable, "train.py"],
        modes=[get_mode("default")],
        out=tmp_path / "run",
        replicates=1,
        census=True,
        cwd=work,
    )
    runner = ExecRunner(c, io.StringIO())
    t0 = time.monotonic()
    runner.run()
    assert time.monotonic() - t0 < 60  # not the 600 s sleep, and the first run has no limit
    # the census hung at exit, was killed and run once more; then the timed runs
    assert starts.read_text() == str(2 + len(plan(c)))
    [hung] = runner.hung
    assert hung["key"] == "census" and hung["status"] == "hung" and hung["round"] == -1
    boots = list(Path(hung["folder"]).glob("boot-*.json"))
    assert hung["stuck"]["how"] == "hung at exit"
    assert [f"boot-{hung['stuck']['pid']}.json"] == [p.name for p in boots]
    assert hung["wall"] >= 3.0
    assert runner.census is not None and runner.census["status"] == "ok"
    assert all(f["status"] == "ok" for f in runner.facts.values())
    said = runner.stream.getvalue()  # type: ignore[attr-defined]
    assert "the untimed first run (census) hung at exit (pid " in said
    (line,) = hung_lines(json.loads((c.out / "exec.json").read_text()))
    assert line.startswith("the untimed first run (census) hung at exit")


#: Two ranks under torchrun; on the first start, rank 1 outlives rank 0 deadlocked on a lock it
#: already holds (no CPU), as a DDP rank on gloo deadlocks in its process group's destructor
#: (docs/measured.md, "A DDP rank left behind").
RANK_LEFT_BEHIND = """\
import os, threading
rank = int(os.environ["RANK"])
path = os.environ["STARTS"] + f".{rank}"
n = int(open(path).read()) + 1 if os.path.exists(path) else 1
open(path, "w").write(str(n))
print(f"rank {rank} pid {os.getpid()} loss 0.5", flush=True)
if rank == 1 and n == 1:
    lock = threading.Lock()
    lock.acquire()
    lock.acquire()
"""


@pytest.mark.slow  # 5 torchrun launches of 2 ranks with the boot, one of them held 4 s: 40 s
def test_a_rank_left_behind_deadlocked_is_killed_and_run_once_more(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from detbench.run import execwait

    monkeypatch.setattr(execwait, "RANK_GRACE", 4.0)  # 60 s in use
    work, starts = _script(tmp_path, monkeypatch, RANK_LEFT_BEHIND)
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"]
    c = ExecConfig(
        command=[*torchrun, "train.py"],
        modes=[get_mode("default")],
        out=tmp_path / "run",
        replicates=1,
        census=True,
        cwd=work,
    )
    runner = ExecRunner(c, io.StringIO())
    t0 = time.monotonic()
    runner.run()
    assert time.monotonic() - t0 < 120  # the first run has no limit: without the watch, never
    [hung] = runner.hung
    assert hung["key"] == "census" and hung["stuck"]["how"] == "left behind"
    assert hung["wall"] >= 4.0
    # the process killed as stuck was rank 1, the one that deadlocked
    printed = (Path(hung["folder"]) / "stdout.txt").read_text()
    assert f"rank 1 pid {hung['stuck']['pid']} loss 0.5" in printed
    assert (starts.parent / "starts.1").read_text() == str(2 + len(plan(c)))
    assert runner.census is not None and runner.census["status"] == "ok"
    assert all(f["status"] == "ok" for f in runner.facts.values())
    said = runner.stream.getvalue()  # type: ignore[attr-defined]
    assert "the untimed first run (census) left a rank behind (pid " in said


@pytest.mark.slow  # 6 runs of a fresh interpreter with the boot, two of them held about 12 s: 55 s
def test_a_run_that_hangs_again_is_a_timeout_in_the_records_and_exec_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The second timed run hangs, and hangs again when run once more: exec keeps it as a
    timeout (a record's status; "hung" is none) and finishes its report. Under load, exec once
    ended here in a schema error on a paired line with status "hung"."""
    from detbench.cli.main import main
    from detbench.run import execrun

    monkeypatch.setattr(execrun, "HANG_FACTOR", 3.0)  # as above
    monkeypatch.setattr(execrun, "HANG_FLOOR", 6.0)
    hangs_twice = HANGS_ONCE.replace("if n == 3:", "if n in (3, 4):")
    work, _ = _script(tmp_path, monkeypatch, hangs_twice)
    monkeypatch.chdir(work)
    out = tmp_path / "run"
    args = ["--mode", "default", "--replicates", "2", "--no-census", "--out", str(out)]
    code = main(["exec", *args, "--", sys.executable, "train.py"])
    assert code == 0, capsys.readouterr().err
    lines = [json.loads(x) for x in (out / "paired.jsonl").read_text().splitlines()]
    assert sorted(x["status"] for x in lines) == ["ok", "ok", "ok", "timeout"]
    records = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert {r["status"] for r in records} <= {"ok", "timeout"}
    assert (out / "report.md").is_file()

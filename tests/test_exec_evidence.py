"""What ``detbench exec`` compares in what real training scripts leave (issue 47): evidence in
order of strength, files matched without the run in their names, logger files read by field, the
timings training code prints, pickled argument objects, the settings a script sets itself, true
diagnoses and the user's folder. Real writers throughout: TensorBoard's ``SummaryWriter``, real
clocks and pids, ``torch.save`` of a real ``argparse`` and dataclass object, a script run through
``detbench exec`` in fresh processes."""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from detbench.analysis.exec_verdict import diagnoses
from detbench.worker.evidence import labelled_numbers, split
from detbench.worker.outputs import digest_of, first_parting, read_outputs
from detbench.worker.printed import mask_line, timing_kind
from detbench.worker.runnames import canonical

from .conftest import ROOT, detbench_cli

CPU_ONLY = {"CUDA_VISIBLE_DEVICES": ""}
PY = sys.executable


# -- printed timings and results ------------------------------------------------------------------
#: Lines as common training code prints them (pytorch/examples' word_language_model, nanoGPT, the
#: Trainer's summary, tqdm), with the parts that are clocks.
TIMED = [
    "| epoch   1 |    20/  111 batches | lr 20.00 | ms/batch 78.66 | loss  8.30 | ppl  4017.03",
    "step 10: loss 2.3456, step time 14.51ms",
    "iter 10: loss 2.1000, time 32.43ms, mfu 0.04%",
    "12.3 it/s",
    "eta 0:01:23",
    "{'train_runtime': 0.74, 'train_samples_per_second': 867.0, 'train_loss': 2.25}",
    "tokens/s 12345 | samples/sec: 98.2 | dt 0.123",
    "| end of epoch   1 | time:  2.41s | valid loss  5.21 | valid ppl   183.04",
]


def test_the_timings_training_code_prints_are_masked_and_its_results_kept() -> None:
    masked = [mask_line(t)[0] for t in TIMED]
    for m in masked:
        assert not any(x in m for x in ("78.66", "14.51", "32.43", "0.04", "12.3", "0:01:23"))
        assert not any(x in m for x in ("0.74", "867.0", "12345", "98.2", "0.123", "2.41"))
    results = [labelled_numbers(m) for m in masked]
    assert results[0] == [("lr", "20.00"), ("loss", "8.30"), ("ppl", "4017.03")]
    assert results[1] == [("loss", "2.3456")] and results[2] == [("loss", "2.1000")]
    assert results[5] == [("train_loss", "2.25")]
    assert results[7] == [("loss", "5.21"), ("ppl", "183.04")]
    assert results[3] == results[4] == results[6] == []
    # a word that only starts like a label is no result
    assert labelled_numbers("accumulate 4 batches") == []


def test_timing_keys_are_named_by_their_words() -> None:
    for key in ("train_runtime", "log_history[3].train_samples_per_second", "time/step_ms"):
        assert timing_kind(key) is not None, key
    for key in ("loss", "eval_accuracy", "epoch", "global_step", "total_flos", "learning_rate"):
        assert timing_kind(key) is None, key


# -- names that hold the run ----------------------------------------------------------------------
def test_a_files_run_time_host_pid_and_counter_are_left_out_of_its_name() -> None:
    host = socket.gethostname()
    a = f"runs/Dec01_21-33-53_{host}/events.out.tfevents.1796157258.{host}.21557.0"
    b = f"runs/Dec01_21-34-10_{host}/events.out.tfevents.1796157275.{host}.21601.0"
    assert canonical(a) == canonical(b)
    assert canonical("lightning_logs/version_3/metrics.csv") == canonical(
        "lightning_logs/version_0/metrics.csv"
    )
    assert canonical("outputs/2026-12-01/21-33-53/log.txt") == "outputs/<time>/<time>/log.txt"
    # what a name says of the results stays
    kept = "ckpt/epoch=3-step=120.ckpt"
    assert canonical(kept) == kept and canonical("checkpoint-500/x") == "checkpoint-500/x"


# -- logger files read by field -------------------------------------------------------------------
def _tensorboard_run(folder: Path, losses: list[float]) -> None:
    """A real SummaryWriter in its default folder, as a script writes it (run in a subprocess:
    the writer's file names carry this pid and the second)."""
    code = (
        "import sys, time\n"
        "from torch.utils.tensorboard import SummaryWriter\n"
        "w = SummaryWriter()\n"
        "for step, loss in enumerate(map(float, sys.argv[1:])):\n"
        "    w.add_scalar('train/loss', loss, step)\n"
        "    w.add_scalar('train/samples_per_second', 1000 / (1 + time.time() % 7), step)\n"
        "w.add_text('args', f'started {time.strftime(\"%Y-%m-%d %H:%M:%S\")}')\n"
        "w.close()\n"
    )
    (folder / "files").mkdir(parents=True)
    subprocess.run(
        [PY, "-c", code, *map(str, losses)], cwd=folder / "files", check=True, timeout=120
    )


def test_tensorboard_scalars_are_compared_by_tag_and_step_and_its_clocks_set_aside(
    tmp_path: Path,
) -> None:
    pytest.importorskip("tensorboard")
    _tensorboard_run(tmp_path / "a", [0.5, 0.25])
    time.sleep(1.1)  # another second: another file and folder name
    _tensorboard_run(tmp_path / "b", [0.5, 0.25])
    _tensorboard_run(tmp_path / "c", [0.5, 0.2500001])
    a, b, c = (read_outputs(tmp_path / n) for n in "abc")
    assert a.unreadable == []
    scalars = [i for i in a.items if i.kind == "scalar"]
    assert [i.where["tag"] for i in scalars] == ["train/loss", "train/loss"]
    assert first_parting(a, b) is None and digest_of(a) == digest_of(b)
    p = first_parting(a, c)
    assert p is not None and p.kind == "scalar" and p.where == {**p.where, "step": 1}
    aside = " ".join(s.what for s in a.set_aside)
    assert "wall time of each logged event" in aside and "rates" in aside


def test_json_and_csv_logs_are_read_by_key(tmp_path: Path) -> None:
    def run(name: str, loss: float, runtime: float) -> Path:
        d = tmp_path / name / "files"
        d.mkdir(parents=True)
        state = {
            "global_step": 8,
            "log_history": [
                {"loss": loss, "grad_norm": 1.5, "step": 4},
                {"train_runtime": runtime, "train_samples_per_second": 80 / runtime},
            ],
        }
        (d / "trainer_state.json").write_text(json.dumps(state))
        (d / "metrics.csv").write_text(f"epoch,step,train_loss,time\n0,4,{loss},{runtime}\n")
        return tmp_path / name

    a, b = read_outputs(run("a", 0.5, 1.2)), read_outputs(run("b", 0.5, 3.4))
    assert first_parting(a, b) is None
    kinds = {i.name: i.kind for i in a.items}
    assert kinds["trainer_state.json:log_history[0].loss"] == "result"
    assert kinds["trainer_state.json:global_step"] == "value"
    assert kinds["metrics.csv:2:train_loss"] == "result"
    assert not any("runtime" in n or n.endswith(":time") for n in kinds)
    c = read_outputs(run("c", 0.5000001, 1.2))
    p = first_parting(a, c)
    # files in name order: the CSV's loss first, then the JSON's, and nothing else
    assert p is not None and p.item == "metrics.csv:2:train_loss" and p.differing == 2


@dataclasses.dataclass
class TrainingArguments:
    """As a framework's argument object is pickled: a dataclass holding a dated log folder."""

    output_dir: str
    logging_dir: str
    learning_rate: float


def test_a_pickled_argument_object_is_read_by_field(tmp_path: Path) -> None:
    for name, stamp in (("a", "Dec01_21-33-53"), ("b", "Dec01_21-34-10")):
        (tmp_path / name / "files").mkdir(parents=True)
        args = TrainingArguments("out", f"out/runs/{stamp}_{socket.gethostname()}", 5e-5)
        torch.save(args, tmp_path / name / "files" / "training_args.bin")
    a, b = read_outputs(tmp_path / "a"), read_outputs(tmp_path / "b")
    assert a.unreadable == []
    names = [i.name for i in a.items]
    assert "training_args.bin:logging_dir" in names and "training_args.bin:learning_rate" in names
    assert first_parting(a, b) is None


# -- the verdict's evidence -----------------------------------------------------------------------
def test_tensors_and_results_decide_and_other_text_is_shown(tmp_path: Path) -> None:
    def run(name: str, loss: str, note: str) -> Path:
        d = tmp_path / name
        (d / "files").mkdir(parents=True)
        (d / "stdout.txt").write_text(f"step 1 loss {loss}\nsampled: {note}\n")
        torch.save({"w": torch.arange(4.0)}, d / "files" / "model.pt")
        return d

    a = split(read_outputs(run("a", "0.5", "the cat")))
    b = split(read_outputs(run("b", "0.5", "a dog")))
    c = split(read_outputs(run("c", "0.6", "the cat")))
    assert a.basis == "tensors and results" and a.counts == {"tensors": 1, "results": 1, "text": 2}
    assert digest_of(a.decisive) == digest_of(b.decisive)  # the verdict: the same
    p = first_parting(a.rest, b.rest)  # and where the text differs, for the user to judge
    assert p is not None and p.a == "sampled: the cat"
    assert digest_of(a.decisive) != digest_of(c.decisive)
    # a run with neither tensors nor labelled results is judged on its text
    d = tmp_path / "d"
    d.mkdir()
    (d / "stdout.txt").write_text("done: 42\n")
    assert split(read_outputs(d)).basis == "text"


# -- the settings a script sets itself ------------------------------------------------------------
SETS = """\
import os
import torch
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = False
torch.set_float32_matmul_precision("medium")
torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":16:8"
torch.backends.cudnn.allow_tf32 = False
"""


def test_every_setting_a_script_sets_is_noted_with_its_line(tmp_path: Path) -> None:
    """In a fresh interpreter (the watches replace torch's setters), as exec's boot installs
    them; a write that leaves its setting as it was (line 8) is noted as such."""
    (tmp_path / "train.py").write_text(SETS)
    code = (
        "import json, runpy, sys\n"
        "from detbench.locate.watched import Watch\n"
        "changes = []\n"
        "Watch(changes).install()\n"
        "runpy.run_path(sys.argv[1], run_name='__main__')\n"
        "print(json.dumps(changes))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CUBLAS_WORKSPACE_CONFIG": ""}
    env.pop("CUBLAS_WORKSPACE_CONFIG")
    out = subprocess.run(
        [PY, "-c", code, str(tmp_path / "train.py")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    )
    changes = json.loads(out.stdout.strip().splitlines()[-1])
    said = {(c["setting"], c["line"]) for c in changes}
    assert ("float32_matmul_precision", 3) in said
    assert ("cudnn_tf32", 4) in said
    assert ("float32_matmul_precision", 5) in said
    assert ("bf16_reduced_precision_reduction", 6) in said
    assert ("cublas_workspace_config", 7) in said
    # the same write again: noted as leaving the level as it was
    assert [c.get("same") for c in changes if c["line"] == 8] == [True]
    assert not any(c.get("same") for c in changes if c["line"] != 8)
    first = next(c for c in changes if c["line"] == 3)
    assert first["via"] == "torch.backends.cuda.matmul.allow_tf32"
    assert first["code"] == "torch.backends.cuda.matmul.allow_tf32 = True"


# -- diagnoses ------------------------------------------------------------------------------------
def _doc(seeds: list[str], loader: dict[str, Any]) -> dict[str, Any]:
    """An exec.json whose two modes both parted, with what the boots saw."""
    seen = {
        "seeds": [{"call": s, "file": "/x/train.py", "line": 3} for s in seeds],
        "dataloaders": [loader, dict(loader)],  # the same line seen twice
        "changes": [],
    }
    run = {"status": "ok", "mode": "default", "copy": 0, "round": 0, "script": seen}
    return {
        "config": {"modes": [{"name": "default"}, {"name": "det-algos"}]},
        "runs": {"r0": run},
        "partings": {"default": {"kind": "line"}, "det-algos": {"kind": "line"}},
    }


LOADER = {"file": "/x/train.py", "line": 9, "shuffle": True, "num_workers": 2}
LOADER |= {"generator": False, "worker_init_fn": False}


def test_a_loader_without_a_generator_in_a_seeded_script_is_no_diagnosis() -> None:
    # transformers.set_seed, lightning's seed_everything and accelerate's set_seed reach these
    seeded = ["torch.manual_seed", "random.seed", "numpy.random.seed"]
    assert diagnoses(_doc(seeded, LOADER)) == []
    assert diagnoses(_doc(["torch.manual_seed"], LOADER)) == []


def test_diagnoses_name_what_is_unseeded_once() -> None:
    said = diagnoses(_doc([], LOADER))
    assert said[0].startswith("no seeding call was seen")
    assert sum("train.py:9 shuffles" in s for s in said) == 1
    assert sum("train.py:9 has 2 workers" in s for s in said) == 1
    numpy_only = diagnoses(_doc(["numpy.random.seed", "random.seed"], LOADER))
    assert numpy_only[0].startswith("torch's generator is never seeded")
    doc = _doc([], LOADER)
    doc["partings"]["det-algos"] = None  # one mode agreed: nothing points anywhere
    assert diagnoses(doc) == []


# -- the user's folder ----------------------------------------------------------------------------
#: A script as loggers write: a counted version folder, a file named after the second and the pid,
#: a log it appends to if it is there, and a checkpoint; it reads a file that was there before.
FOLDER = """\
import os, time
import torch
os.makedirs("logs", exist_ok=True)
version = len([d for d in os.listdir("logs") if d.startswith("version_")])
os.makedirs(f"logs/version_{version}")
with open(f"logs/version_{version}/events.{int(time.time())}.{os.getpid()}.log", "w") as f:
    f.write(f"loss 0.5 at {time.time()}\\n")
with open("history.txt", "a") as f:
    f.write("run\\n")
torch.manual_seed(int(open("seed.txt").read()))
torch.save({"w": torch.randn(3)}, "model.pt")
print("version", version, "loss", 0.5)
"""


@pytest.mark.slow  # 4 runs and a warm-up, each a fresh interpreter with torch: 20 s here
def test_each_run_starts_from_the_folder_as_it_was_and_the_last_runs_files_stay(
    tmp_path: Path,
) -> None:
    (tmp_path / "train.py").write_text(FOLDER)
    (tmp_path / "seed.txt").write_text("3\n")
    (tmp_path / "history.txt").write_text("before\n")
    proc = detbench_cli(
        "exec",
        "--mode",
        "default",
        "--replicates",
        "2",
        "--no-census",
        "--out",
        str(tmp_path / "run"),
        "--",
        PY,
        "train.py",
        cwd=tmp_path,
        env=CPU_ONLY,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads((tmp_path / "run" / "exec.json").read_text())
    # every run saw no version folder before it: each wrote version_0
    for f in doc["runs"].values():
        logs = next(n for n in f["created"] if n.startswith("logs/"))
        assert logs.startswith("logs/version_0/")
    assert "default: reproducible (2 runs)" in proc.stdout
    # the folder: the seed file as it was, one run's files where the script put them
    assert (tmp_path / "seed.txt").read_text() == "3\n"
    assert sorted(p.name for p in (tmp_path / "logs").iterdir()) == ["version_0"]
    assert len(list((tmp_path / "logs" / "version_0").iterdir())) == 1
    assert torch.load(tmp_path / "model.pt")["w"].shape == (3,)
    # a file there before that each run changed: as the last run left it (5 runs appended), and
    # only text that differs, beside the verdict
    assert (tmp_path / "history.txt").read_text() == "before\n" + "run\n" * 5
    assert "other text differs" in proc.stdout

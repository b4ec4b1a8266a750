"""What a run of a user's script left, read as comparable items (detbench.worker.outputs), and
where two runs part. Real objects throughout: checkpoints written by torch.save from a small
model after one real Adam step, safetensors files from the library, a real tqdm bar, timestamps
from datetime.now(), temporary paths from tempfile."""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import io
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import save_file
from torch import nn
from tqdm import tqdm

from detbench.worker.outputs import (
    Outputs,
    digest_of,
    first_parting,
    read_outputs,
    read_safetensors,
)
from detbench.worker.printed import mask_line


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.head = nn.Linear(3, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.fc(x)))


def trained_state() -> dict[str, Any]:
    """A checkpoint as a training script saves one: model and Adam state after one step."""
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=3e-4)
    loss = model(torch.randn(5, 4)).square().mean()
    loss.backward()
    opt.step()
    return {"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": 1}


def bar(mininterval: float, loss: str) -> str:
    """What a real tqdm bar writes to its stream: ``mininterval=0`` redraws on every step."""
    buf = io.StringIO()
    with tqdm(range(20), file=buf, mininterval=mininterval) as b:
        for _ in b:
            b.set_postfix(loss=loss, refresh=False)
    return buf.getvalue()


def log(losses: list[str], scratch: str) -> str:
    """A training script's stdout: clock readings, a pid, a temporary path and losses."""
    start = time.perf_counter()
    out = [f"{dt.datetime.now()} starting, pid {os.getpid()}, scratch {scratch}"]
    for step, loss in enumerate(losses, 1):
        took = time.perf_counter() - start
        out.append(f"step {step}/{len(losses)} loss {loss} lr 3e-4 took {took:.3f}s")
    out.append(dt.datetime.now().isoformat())  # a line of a timestamp only
    out.append("")
    return "\n".join(out)


LOSSES = ["0.6931", "0.5412", "0.4123"]


def write_run(
    root: Path,
    name: str,
    *,
    state: dict[str, Any] | None = None,
    stdout: str | None = None,
    stderr: str | None = None,
    archive: str = "ckpt",
) -> Path:
    """One run's folder as detbench exec gathers it; each piece differs in its clock readings
    and temporary paths from the next run's, as a real second run would."""
    run = root / name
    (run / "files" / "out").mkdir(parents=True)
    scratch = tempfile.mkdtemp(prefix="detbench-outputs-test-")
    os.rmdir(scratch)
    (run / "stdout.txt").write_text(log(LOSSES, scratch) if stdout is None else stdout)
    (run / "stderr.txt").write_text(bar(0.0, "0.4123") if stderr is None else stderr)
    state = trained_state() if state is None else state
    torch.save(state, run / f"files/out/{archive}.pt")  # the zip's folder is named after it
    (run / f"files/out/{archive}.pt").rename(run / "files/out/ckpt.pt")
    save_file({k: v.contiguous() for k, v in state["model"].items()}, run / "files/out/model.st")
    (run / "files/out/model.st").rename(run / "files/out/model.safetensors")
    (run / "files/out/log.txt").write_text(f"{dt.datetime.now():%Y-%m-%d %H:%M:%S} done\n")
    (run / "files/out/tokens.npy").write_bytes(bytes(range(16)))
    return run


def test_identical_runs_agree(tmp_path: Path) -> None:
    a = read_outputs(write_run(tmp_path, "a"))
    b = read_outputs(write_run(tmp_path, "b", stderr=bar(10.0, "0.4123")))  # fewer redraws
    assert first_parting(a, b) is None
    assert digest_of(a) == digest_of(b)
    names = [i.name for i in a.items]
    # stdout's 4 lines (the timestamp-only line set aside), the bar's last state, then files
    printed = [i.name for i in a.items if i.kind == "line"]
    assert printed == ["stdout:1", "stdout:2", "stdout:3", "stdout:4", "stderr:1", "out/log.txt:1"]
    # each step line's loss and lr as results, the bar's postfix loss too
    results = [i.name for i in a.items if i.kind == "result"]
    assert results[:2] == ["stdout:2:loss", "stdout:2:lr"] and "stderr:1:loss" in results
    assert "out/ckpt.pt:model.fc.weight" in names
    assert "out/ckpt.pt:optimizer.state.0.exp_avg" in names
    assert "out/ckpt.pt:epoch" in names
    assert "out/model.safetensors:head.bias" in names
    assert names[-2:] == ["out/model.safetensors:head.weight", "out/tokens.npy"]
    assert a.unreadable == [] and len(a.items) == len(names)
    shown = next(i for i in a.items if i.name == "stderr:1").shown
    assert shown is not None and "20/20" in shown and "loss=0.4123" in shown


def test_same_state_saved_twice_is_equal(tmp_path: Path) -> None:
    state = trained_state()
    run_a = write_run(tmp_path, "a", state=state)
    run_b = write_run(tmp_path, "b", state=state, archive="renamed")
    ckpt = "files/out/ckpt.pt"
    assert (run_a / ckpt).read_bytes() != (run_b / ckpt).read_bytes()
    assert first_parting(read_outputs(run_a), read_outputs(run_b)) is None


def test_one_ulp_in_one_tensor_names_the_file_and_the_tensor(tmp_path: Path) -> None:
    state = trained_state()
    a = read_outputs(write_run(tmp_path, "a", state=state))
    w = state["model"]["fc.weight"]
    before = float(w[1, 2])
    w[1, 2] = torch.nextafter(w[1, 2], torch.tensor(float("inf")))
    b_dir = write_run(tmp_path, "b", state=state)
    save_file(
        {k: v.contiguous() for k, v in trained_state()["model"].items()},
        b_dir / "files/out/model.safetensors",
    )  # only the checkpoint carries the ulp
    p = first_parting(a, read_outputs(b_dir))
    assert p is not None
    assert (p.item, p.kind) == ("out/ckpt.pt:model.fc.weight", "tensor")
    assert p.where["file"] == "out/ckpt.pt" and p.where["tensor"] == "model.fc.weight"
    assert p.max_abs_diff == float(w[1, 2]) - before > 0
    assert p.differing == 1 and p.compared == len(a.items)
    assert p.a != p.b  # the shown digests differ


def test_a_loss_differing_in_its_last_digit_names_the_line_and_step(tmp_path: Path) -> None:
    a = read_outputs(write_run(tmp_path, "a"))
    scratch = tempfile.gettempdir() + "/other"
    b = read_outputs(write_run(tmp_path, "b", stdout=log(["0.6931", "0.5413", "0.4123"], scratch)))
    p = first_parting(a, b)
    assert p is not None
    # the line, and its loss as a result
    assert (p.item, p.kind, p.differing) == ("stdout:3", "line", 2)
    assert p.where["stream"] == "stdout" and p.where["line_no"] == 3 and p.where["step"] == 2
    assert p.a is not None and p.a.startswith("step 2/3 loss 0.5412")
    assert p.b is not None and p.b.startswith("step 2/3 loss 0.5413")
    assert p.max_abs_diff == pytest.approx(1e-4)


def test_clock_readings_paths_and_pids_are_set_aside_and_named(tmp_path: Path) -> None:
    a = read_outputs(write_run(tmp_path, "a"))
    time.sleep(0.01)
    later = f"{dt.datetime.now()} starting, pid {os.getpid() + 1}, scratch {tempfile.mkdtemp()}\n"
    b = read_outputs(
        write_run(tmp_path, "b", stdout=later + log(LOSSES, "/tmp/x").split("\n", 1)[1])
    )
    assert a.items[0].where["text"] != b.items[0].where["text"]
    assert first_parting(a, b) is None
    what = " | ".join(s.what for s in a.set_aside)
    for named in (
        "stdout: wall-clock timestamps (2, first on line 1)",
        "stdout: process ids (1, first on line 1)",
        "stdout: temporary paths (1, first on line 1)",
        "stdout: elapsed times (3, first on line 2)",
        "stdout: lines with nothing left once masked (1, first on line 5)",
        "stderr: progress-bar redraws",
        "stderr: rates and throughputs",
        "out/log.txt: wall-clock timestamps (1, first on line 1)",
    ):
        assert named in what
    assert all(s.why for s in a.set_aside)


def test_masks_keep_every_number_that_is_not_a_clock_reading() -> None:
    for kept in (
        "step 12/60 loss 0.4123 lr 3e-4 acc 98.5%",
        "epoch 2 batch 64 seed 1234 grad_norm 1.25e+00 bits 0x3f800000",
        "loss: nan, val_loss 0.5, time_step 5",
    ):
        assert mask_line(kept) == (kept, [])
    masked = "iter 10: loss 4.2345, time 123.45ms, mfu 12.34%, 1.5 it/s, <object at 0x7f3a2b1c4d50>"
    assert mask_line(masked)[0] == (
        "iter 10: loss 4.2345, time <elapsed>, mfu <rate>%, <rate>, <object at <addr>>"
    )


def test_one_extra_line_parts_there(tmp_path: Path) -> None:
    a = read_outputs(write_run(tmp_path, "a"))
    b = read_outputs(write_run(tmp_path, "b", stdout=log([*LOSSES, "0.4000"], "/tmp/x")))
    p = first_parting(a, b)
    assert p is not None
    # step 3's line reads "step 3/4" in b: the first parting; the extra line and its loss and lr
    # also differ
    assert p.item == "stdout:2" and p.max_abs_diff == 1.0 and p.differing == 6
    c_dir = write_run(tmp_path, "c", stdout=log(LOSSES, "/tmp/x") + "saved\n")
    (c_dir / "files/out/tokens.npy").write_bytes(bytes(16))  # a later difference too
    c = read_outputs(c_dir)
    p = first_parting(a, c)
    assert p is not None
    # the line only c printed comes before the files, though a has no item there
    assert (p.item, p.a, p.b, p.differing) == ("stdout:5", None, "saved", 2)
    assert p.where["line_no"] == 6  # the timestamp-only line 5 is not comparable, but counted
    assert first_parting(c, a) == dataclasses.replace(p, a="saved", b=None)


def test_a_run_that_printed_and_wrote_nothing_is_not_comparable(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    nothing = read_outputs(empty)
    assert len(nothing.items) == 0 and nothing.set_aside == []
    clock_only = tmp_path / "clock"
    (clock_only / "files").mkdir(parents=True)
    (clock_only / "stdout.txt").write_text(f"{dt.datetime.now()}\n\n")
    (clock_only / "stderr.txt").write_text("")
    o = read_outputs(clock_only)
    assert len(o.items) == 0 and len(o.set_aside) == 2
    (clock_only / "files" / "empty.log").write_text("")  # an empty file still counts: it exists
    assert [i.kind for i in read_outputs(clock_only).items] == ["file"]


def _special(bf: torch.Tensor) -> dict[str, Any]:
    return {
        "bf": bf,
        "scalar": torch.tensor(2.5),
        "empty": torch.empty(0, 3),
        "cplx": torch.tensor([1 + 2j, 3 - 1j]),
        "mask": torch.tensor([True, False]),
        "cfg": {"name": "run", "betas": (0.9, 0.999), "saved_at": str(dt.datetime.now())},
    }


def test_bfloat16_zero_dim_empty_and_complex_tensors(tmp_path: Path) -> None:
    bf = torch.tensor([1.0, -2.0, 3.5], dtype=torch.bfloat16)
    for name, obj in [("a", _special(bf)), ("b", _special(bf.clone()))]:
        (tmp_path / name / "files").mkdir(parents=True)
        torch.save(obj, tmp_path / name / "files/s.pth")
    a, b = read_outputs(tmp_path / "a"), read_outputs(tmp_path / "b")
    assert first_parting(a, b) is None
    assert [i.name.split(":")[1] for i in a.items] == [
        "bf",
        "scalar",
        "empty",
        "cplx",
        "mask",
        "cfg.name",
        "cfg.betas.0",
        "cfg.betas.1",
        "cfg.saved_at",
    ]
    assert [s.what for s in a.set_aside] == ["s.pth:cfg.saved_at: <time>"]
    nudged = bf.clone()
    nudged[1] = torch.nextafter(nudged[1], torch.tensor(0.0, dtype=torch.bfloat16))
    torch.save(_special(nudged), tmp_path / "b" / "files/s.pth")
    p = first_parting(a, read_outputs(tmp_path / "b"))
    assert p is not None and p.item == "s.pth:bf" and p.where["dtype"] == "torch.bfloat16"
    assert p.max_abs_diff == 2.0**-7  # -2 to the next toward 0: bfloat16 has 7 fraction bits
    changed = _special(bf)
    changed["scalar"] = torch.tensor(2.5).nextafter(torch.tensor(3.0))
    changed["cplx"][1] = torch.tensor(float("nan") + 0j)
    torch.save(changed, tmp_path / "b" / "files/s.pth")
    p = first_parting(a, read_outputs(tmp_path / "b"))
    assert p is not None and p.item == "s.pth:scalar" and p.where["shape"] == []
    assert p.max_abs_diff == 2.0**-22 and p.differing == 2


def test_nan_counts_as_infinitely_far_and_equal_to_itself(tmp_path: Path) -> None:
    x = torch.tensor([float("nan"), 1.0, float("inf")])
    for name, t in [("a", x), ("b", x.clone()), ("c", torch.tensor([0.0, 1.0, float("inf")]))]:
        (tmp_path / name / "files").mkdir(parents=True)
        torch.save({"x": t}, tmp_path / name / "files/t.pt")
    a, b, c = (read_outputs(tmp_path / n) for n in "abc")
    assert first_parting(a, b) is None
    p = first_parting(a, c)
    assert p is not None and p.max_abs_diff == float("inf")


def test_hand_parsed_safetensors_equal_the_library(tmp_path: Path) -> None:
    tensors = {
        "layers.10.w": torch.randn(3, 2),
        "layers.2.w": torch.randn(2, 2).to(torch.bfloat16),
        "half": torch.randn(5).half(),
        "ids": torch.arange(-3, 3),
        "mask": torch.tensor([True, False, True]),
        "scalar": torch.tensor(7, dtype=torch.int16),
        "empty": torch.empty(0, 4),
        "u8": torch.arange(6, dtype=torch.uint8).reshape(2, 3),
    }
    path = tmp_path / "m.safetensors"
    save_file(tensors, path, metadata={"format": "pt", "note": "ignored"})
    lib, hand = read_safetensors(path), read_safetensors(path, library=False)
    assert list(lib) == list(hand)
    assert list(lib)[:2] == ["empty", "half"] and list(lib)[-2:] == ["scalar", "u8"]
    assert list(lib).index("layers.2.w") < list(lib).index("layers.10.w")
    for k, t in tensors.items():
        for got in (lib[k], hand[k]):
            assert got.dtype == t.dtype and got.shape == t.shape
            assert torch.equal(got.reshape(-1).view(torch.uint8), t.reshape(-1).view(torch.uint8))
    header_len = int.from_bytes(path.read_bytes()[:8], "little")
    assert "__metadata__" in json.loads(path.read_bytes()[8 : 8 + header_len])


def test_pickled_objects_are_read_as_data_without_their_code(tmp_path: Path) -> None:
    (tmp_path / "files").mkdir()
    args = argparse.Namespace(lr=3e-4, out=Path("out"))
    torch.save({"w": torch.ones(2), "args": args}, tmp_path / "files/ckpt.pt")
    with pytest.raises(Exception, match=r"argparse\.Namespace"):  # what weights-only refuses
        torch.load(tmp_path / "files/ckpt.pt", weights_only=True)
    read = read_outputs(tmp_path)
    # the classes stood in for (worker.pickles): the tensor, the fields, the path's argument
    names = {i.name: i for i in read.items}
    assert list(names) == ["ckpt.pt:w", "ckpt.pt:args.lr", "ckpt.pt:args.out.arg0"]
    assert names["ckpt.pt:w"].kind == "tensor" and names["ckpt.pt:args.lr"].shown == "0.0003"
    assert read.unreadable == []
    trusted = read_outputs(tmp_path, trust_pickles=True)  # unpickled in full: the objects
    assert [i.name for i in trusted.items] == ["ckpt.pt:w", "ckpt.pt:args"]
    assert trusted.unreadable == [] and "ckpt.pt:args" in trusted.set_aside[0].what


def test_fingerprints_part_at_their_name_and_index(tmp_path: Path) -> None:
    def fingerprints(run: str, last: str) -> Outputs:
        (tmp_path / run).mkdir()
        recs = [
            {"name": "loss", "index": i, "digest": d, "dtype": "torch.float32", "shape": []}
            for i, d in [(0, "ab" * 32), (12, last)]
        ]
        lines = [json.dumps(r) for r in recs] + ["not json"]
        (tmp_path / run / "fingerprints.jsonl").write_text("\n".join(lines) + "\n")
        return read_outputs(tmp_path / run)

    a, b = fingerprints("a", "cd" * 32), fingerprints("b", "ce" * 32)
    assert [i.name for i in a.items] == ["fingerprint:loss#0", "fingerprint:loss#12"]
    assert a.unreadable[0].startswith("fingerprints.jsonl:3: not a fingerprint record")
    p = first_parting(a, b)
    assert p is not None and p.item == "fingerprint:loss#12" and p.where["step"] == 12
    assert p.max_abs_diff is None

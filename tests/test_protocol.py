"""The one child protocol (``detbench.worker.protocol``) and the one pipeline of passes
(``detbench.worker.passes``), with the hooks a rank and locate use."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import torch

from detbench.core.modes import get_mode
from detbench.core.workload import Context, Workload
from detbench.worker import protocol
from detbench.worker.measure import reference_path
from detbench.worker.passes import Hooks, fingerprint_pass

PACKAGE = Path(__file__).resolve().parent.parent / "detbench"


def test_the_package_has_one_child_main_and_at_most_three_main_blocks() -> None:
    blocks = [
        p.relative_to(PACKAGE).as_posix()
        for p in PACKAGE.rglob("*.py")
        if re.search(r"^if __name__ == .__main__.:", p.read_text(), re.M)
    ]
    assert "worker/child.py" in blocks and len(blocks) <= 3, blocks


def test_read_messages_leaves_out_a_line_cut_short(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    path.write_text('{"type": "ready", "pid": 7}\n{"type": "record", "index": 0, "rec')
    assert protocol.read_messages(path) == [{"type": "ready", "pid": 7}]
    assert protocol.read_messages(tmp_path / "missing.jsonl") == []


def test_a_one_shot_child_answers_with_its_result_message(tmp_path: Path) -> None:
    got = protocol.run_child("tests.gpu21_env_child:work", {}, tmp_path, "a", 60)
    assert set(got) == {"cublas"}
    messages = protocol.read_messages(tmp_path / "a.jsonl")
    assert [m["type"] for m in messages] == ["result"]


def test_a_kind_that_names_no_function_is_a_failed_child_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(protocol.ChildFailed, match=re.escape("package.module:function")):
        protocol.run_child("detbench.run.probe", {}, tmp_path, "bad", 60)


# --- the passes' hooks ------------------------------------------------------------------------


def _steps(ctx: Context) -> Any:
    x = torch.arange(16.0, device=ctx.device)

    def step() -> list[torch.Tensor]:
        x.mul_(1.5)
        return [x.sum(), x]

    return step


def _job(tmp_path: Path) -> dict[str, Any]:
    return {
        "fingerprint_steps": 3,
        "fingerprint": "both",
        "replicate": 0,
        "reference_dir": str(tmp_path),
    }


def test_a_rank_keeps_references_of_its_own_and_is_compared_with_default(
    tmp_path: Path,
) -> None:
    w = Workload(suite="t", name="w", factory=_steps, items_per_step=1)
    seen: list[int] = []
    hooks = Hooks(reference=".rank1", after_step=lambda i, outputs: seen.append(i))
    recs = {}
    for name in ("default", "det-algos"):
        ctx = Context(device=torch.device("cpu"), profile="quick", seed=0)
        rec: dict[str, Any] = {"fingerprint_method": "device"}
        fingerprint_pass(w, ctx, _job(tmp_path), get_mode(name), _steps(ctx), rec, hooks)
        recs[name] = rec
    assert seen == [0, 1, 2, 0, 1, 2]
    assert reference_path(tmp_path, w.key, "default.rank1").is_file()
    assert not reference_path(tmp_path, w.key, "default").exists()
    det = recs["det-algos"]
    assert det["max_abs_diff_vs_default"] == 0.0 and det["diff_reference"] == "self"
    assert len(det["step_fingerprints_sha256"]) == 3 and det["ops_called"] == []
    assert det["fingerprint"] == recs["default"]["fingerprint"]


def test_without_a_reference_directory_no_reference_is_written(tmp_path: Path) -> None:
    """Locate's recorder runs the fingerprint pass alone: each step in its context, no
    reference, no ops watched."""
    w = Workload(suite="t", name="w", factory=_steps, items_per_step=1)
    ctx = Context(device=torch.device("cpu"), profile="quick", seed=0)
    entered: list[int] = []

    def around(i: int) -> Any:
        entered.append(i)
        return torch.no_grad()

    rec: dict[str, Any] = {"fingerprint_method": "sha256"}
    hooks = Hooks(around_step=around, steps=2, watch_ops=False)
    fingerprint_pass(w, ctx, {}, get_mode("default"), _steps(ctx), rec, hooks)
    assert entered == [0, 1] and len(rec["step_fingerprints"]) == 2
    assert rec["ops_called"] is None and "diff_reference" not in rec
    assert not list(tmp_path.iterdir())

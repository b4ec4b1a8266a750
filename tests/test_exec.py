"""``detbench exec -- COMMAND`` and ``detbench locate -- COMMAND`` on real scripts (issue 40).

The three training scripts of docs/examples/scripts, as people write them, run unchanged on this
CPU (``CUDA_VISIBLE_DEVICES=""``: a GPU host must not make them CUDA runs): what is known of each
(docs/examples/scripts/README.md, measured there 3 of 3 times) is what exec must say. The race
is genuine: ``embedding_race.py``'s backward of ``self.table[idx]`` sums its gradient rows on 2
threads in an order set by their timing, unless deterministic algorithms are on. Whole scripts
take 5-10 s a run here, so those tests are slow (make test-slow, CI); make test runs a small
script of its own and every refusal.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from .conftest import ROOT, detbench_cli

SCRIPTS = ROOT / "docs" / "examples" / "scripts"
#: The scripts see no GPU, whatever the host has.
CPU_ONLY = {"CUDA_VISIBLE_DEVICES": ""}
PY = sys.executable

#: A script small enough for make test: it sets a cuDNN flag itself, seeds torch only, hands a
#: tensor to detbench.fingerprint, and races in the backward of table[idx] (2^16 indices).
SMALL = """\
import time
import torch
torch.backends.cudnn.benchmark = True
torch.manual_seed(0)
table = torch.nn.Parameter(torch.randn(64, 16))
idx = torch.randint(0, 64, (1 << 16,))
opt = torch.optim.SGD([table], lr=0.1)
print("started at", time.strftime("%Y-%m-%d %H:%M:%S"))
for step in range(3):
    opt.zero_grad()
    loss = table[idx].square().mean()
    loss.backward()
    opt.step()
    print(f"step {step} loss {loss.item():.6f}")
import detbench
detbench.fingerprint("table", table)
"""


def exec_cli(tmp: Path, *args: str, cwd: Path) -> tuple[int, str, str]:
    proc = detbench_cli("exec", *args, cwd=cwd, env=CPU_ONLY)
    return proc.returncode, proc.stdout, proc.stderr


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """SMALL in the default mode, 2 rounds (4 runs with the A/A copies), and its census."""
    d = tmp_path_factory.mktemp("small")
    (d / "train.py").write_text(SMALL)
    out = d / "run"
    code, stdout, stderr = exec_cli(
        d, "--mode", "default", "--replicates", "2", "--out", str(out), "--", PY, "train.py",
        cwd=d,
    )  # fmt: skip
    assert code == 0, stderr[-3000:]
    return out, stdout


@pytest.mark.slow  # 4 runs and a census, each a fresh interpreter with torch: 35 s here
def test_a_small_script_is_run_in_rounds_and_compared(small: tuple[Path, str]) -> None:
    out, stdout = small
    doc = json.loads((out / "exec.json").read_text())
    runs = doc["runs"]
    assert sorted((f["round"], f["mode"], f["copy"]) for f in runs.values()) == [
        (0, "default", 0), (0, "default", 1), (1, "default", 0), (1, "default", 1),
    ]  # fmt: skip
    for f in runs.values():
        assert f["status"] == "ok" and f["wall"] > f["startup"] > 0
        assert f["digest"] and f["comparable"] > 0  # the last run's too
        boot = f["boot"]
        assert boot["mode"] == "default" and boot["applied"]["deterministic_algorithms"] is False
        # the flag the script sets itself, with its line
        code = "torch.backends.cudnn.benchmark = True"
        assert boot["changes"] == [
            {"setting": "benchmark", "from": False, "to": True,
             "via": "torch.backends.cudnn.benchmark",
             "file": str(out.parent / "train.py"), "line": 3, "code": code},
        ]  # fmt: skip
        assert [s["call"] for s in boot["seeds"]] == ["torch.manual_seed"]
        assert (out / "runs" / f["key"] / "fingerprints.jsonl").exists()
    # the timestamp is set aside, not a difference
    assert any("started at" in s or "time" in s for f in runs.values() for s in f["set_aside"])
    records = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert [(r["suite"], r["workload"], r["mode"], r["replicate"]) for r in records] == [
        ("exec", "train.py", "default", 0), ("exec", "train.py", "default", 1),
    ]  # fmt: skip
    # on a CPU the cuDNN flag acts on nothing: the records still count
    assert all(r["settings_changed"] == [] and r["fingerprint"] for r in records)
    # the census is the untimed first run, before every timed one
    assert doc["census"]["start_unix"] < min(f["start_unix"] for f in runs.values())
    paired = (out / "paired.jsonl").read_text().splitlines()
    assert len(paired) == 4
    # the census names the racing line, though the runs may have agreed
    census = doc["census"]["boot"]["census"]
    assert [(e["op"], e["phase"], e["line"], e["count"]) for e in census] == [
        ("index_put", "backward", 11, 3)
    ]
    assert (
        "can race: index_put (accumulate=True) (backward), 3 calls in 3 steps at train.py:11"
        in (stdout)
    )
    md = (out / "report.md").read_text()
    # a page about the command: its name first, and no suite words
    assert md.startswith("# detbench exec: train.py on CPU")
    assert "train.py:3 (torch.backends.cudnn.benchmark = True)" in md
    assert "suites" not in md and "workloads" not in md


@pytest.mark.parametrize(
    ("command", "message"),
    [
        ([], "give the command after --"),
        (["no-such-program-here"], "command not found: no-such-program-here"),
        ([PY, "missing.py"], "script not found: "),
    ],
)
def test_bad_commands_are_one_line_before_anything_runs(
    tmp_path: Path, command: list[str], message: str
) -> None:
    out = tmp_path / "run"
    code, _, stderr = exec_cli(tmp_path, "--mode", "default", "--out", str(out), "--", *command,
                               cwd=tmp_path)  # fmt: skip
    assert code == 2
    assert stderr.strip().startswith("detbench: error: " + message), stderr
    assert len(stderr.strip().splitlines()) == 1 and not out.exists()


# each a fresh interpreter with torch (4-10 s here): make test-slow
@pytest.mark.parametrize(
    ("code", "extra", "message"),
    [
        pytest.param(
            "import sys; print('x'); sys.exit(3)",
            [],
            "the command failed (exit 3) in mode default",
            marks=pytest.mark.slow,
        ),
        pytest.param(
            "input()",
            [],
            "the command reads its standard input, which detbench exec leaves empty",
            marks=pytest.mark.slow,
        ),
        pytest.param(
            "import time; time.sleep(120)",
            ["--timeout", "8"],
            "the command ran past --timeout 8 s",
            marks=pytest.mark.slow,
        ),
        pytest.param(
            "pass",
            [],
            "the command printed nothing and wrote no file that detbench exec can compare",
            marks=pytest.mark.slow,
        ),
    ],
)
def test_a_command_that_cannot_be_measured_stops_at_its_first_run(
    tmp_path: Path, code: str, extra: list[str], message: str
) -> None:
    out = tmp_path / "run"
    rc, _, stderr = exec_cli(
        tmp_path, "--mode", "default", "--no-census", *extra, "--out", str(out), "--", PY, "-c",
        code, cwd=tmp_path,
    )  # fmt: skip
    assert rc == 2, stderr
    assert len(stderr.strip().splitlines()[-1:]) == 1
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("detbench: error: " + message), last
    assert f"what was is in {out}" in last
    doc = json.loads((out / "exec.json").read_text())
    # it stopped at once: at the untimed warm-up, or, where that ran well but left nothing to
    # compare, at the first timed run
    assert len(doc["runs"]) == (1 if code == "pass" else 0)
    assert (doc["warmup"]["status"] == "ok") == (code == "pass")


def test_a_used_folder_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    out = tmp_path / "run"
    out.mkdir()
    (out / "results.jsonl").write_text("mine\n")
    code, _, stderr = exec_cli(tmp_path, "--mode", "default", "--out", str(out), "--", PY, "-c",
                               "print(1)", cwd=tmp_path)  # fmt: skip
    assert code == 2 and "detbench: error:" in stderr
    assert sorted(p.name for p in out.iterdir()) == ["results.jsonl"]
    assert (out / "results.jsonl").read_text() == "mine\n"


# --- the three scripts, whole (slow) ---------------------------------------------------------


def _exec_script(tmp: Path, script: str) -> Path:
    out = tmp / "run"
    code, _, stderr = exec_cli(
        tmp, "--out", str(out), "--", PY, script, "--out", str(tmp / "ckpt"), cwd=SCRIPTS
    )
    assert code == 0, stderr[-3000:]
    return out


@pytest.mark.slow
def test_the_racing_script_parts_by_default_and_agrees_under_det_algos(tmp_path: Path) -> None:
    out = _exec_script(tmp_path, "embedding_race.py")
    doc = json.loads((out / "exec.json").read_text())
    parts = doc["partings"]
    assert parts["det-algos"] is None
    p = parts["default"]
    # the first result that differs: a printed loss, with its step and line
    assert p["kind"] == "result" and p["where"]["stream"] == "stdout"
    assert p["where"]["label"] == "loss" and p["where"]["step"] is not None
    assert p["where"]["text"].startswith("step ") and p["a"] != p["b"]
    digests = {m: {f["digest"] for f in doc["runs"].values() if f["mode"] == m and not f["copy"]}
               for m in ("default", "det-algos")}  # fmt: skip
    assert len(digests["default"]) > 1 and len(digests["det-algos"]) == 1
    # the checkpoint's tensors were compared (the watched --out folder)
    run = next(f for f in doc["runs"].values() if f["mode"] == "det-algos")
    assert any(name.endswith("checkpoint.pt") for name in run["files"])
    census = doc["census"]["boot"]["census"]
    assert census[0]["op"] == "index_put" and census[0]["file"].endswith("embedding_race.py")
    md = (out / "report.md").read_text()
    cells = [line.split(" | ") for line in md.splitlines() if line.startswith("| ")]
    rows: dict[str, list[str]] = {}
    for c in cells:  # the first table's rows: the verdicts (the timings' come later)
        rows.setdefault(c[0], c)
    # mode, verdict, what was compared, where the runs part, ...
    assert rows["| default"][1] == "not reproducible (3 runs)"
    assert "tensors" in rows["| default"][2] and rows["| default"][3].startswith("rounds 1 and")
    assert rows["| det-algos"][1] == "reproducible (3 runs)" and rows["| det-algos"][3] == "–"


@pytest.mark.slow
def test_the_cnn_script_is_reproducible_and_its_own_flag_is_named(tmp_path: Path) -> None:
    out = _exec_script(tmp_path, "cnn_dataloader.py")
    doc = json.loads((out / "exec.json").read_text())
    assert doc["partings"] == {"default": None, "det-algos": None}
    boot = next(iter(doc["runs"].values()))["boot"]
    change = boot["changes"][0]
    assert (Path(change["file"]).name, change["line"], change["setting"]) == (
        "cnn_dataloader.py", 23, "benchmark",
    )  # fmt: skip
    assert boot["dataloaders"][0]["num_workers"] == 2


@pytest.mark.slow
def test_the_transformers_script_is_reproducible(tmp_path: Path) -> None:
    out = _exec_script(tmp_path, "hf_tiny_lm.py")
    doc = json.loads((out / "exec.json").read_text())
    assert doc["partings"] == {"default": None, "det-algos": None}
    run = next(f for f in doc["runs"].values() if f["mode"] == "default")
    assert any(name.endswith("model.safetensors") for name in run["files"])


@pytest.mark.slow
@pytest.mark.default_device  # the script picks its device; CPU_ONLY hides any GPU from it
def test_locate_names_the_racing_line_of_the_script(tmp_path: Path) -> None:
    proc = detbench_cli(
        "locate", "--json", "--", PY, "embedding_race.py", "--out", str(tmp_path / "ckpt"),
        cwd=SCRIPTS, env=CPU_ONLY,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr[-3000:]
    loc = json.loads(proc.stdout)  # one object for one command
    assert loc["reproducible"] is False
    culprit = loc["culprits"][0]
    assert culprit["op"] == "aten.index_put" and culprit["phase"] == "backward"
    assert Path(culprit["file"]).name == "embedding_race.py" and culprit["line"] == 34


#: A command that fails in the run that counts the ops that can race, and only there.
FAILS_COUNTED = """\
import json, os, sys
import torch
if json.load(open(os.environ["DETBENCH_EXEC_JOB"]))["census"]:
    sys.exit("no counting here")
print("loss", torch.ones(3).sum().item())
"""


@pytest.mark.slow  # the census, a warm-up and 4 runs, each a fresh interpreter with torch: 15 s
def test_a_failed_counting_run_is_said_and_the_timed_runs_go_on(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(FAILS_COUNTED)
    out = tmp_path / "run"
    args = ["--mode", "default", "--replicates", "2", "--out", str(out), "--", PY, "train.py"]
    code, stdout, stderr = exec_cli(tmp_path, *args, cwd=tmp_path)
    assert code == 0, stderr[-3000:]
    assert "one untimed run without it" in stderr
    assert "can race: not counted, that run failed (exit 1: no counting here)" in stdout
    doc = json.loads((out / "exec.json").read_text())
    assert doc["census"]["status"] == "error" and doc["warmup"]["status"] == "ok"
    assert len(doc["runs"]) == 4
    assert doc["warmup"]["start_unix"] < min(f["start_unix"] for f in doc["runs"].values())
    md = (out / "report.md").read_text()
    assert "The run that counts the ops that can race failed: exit 1: no counting here." in md


@pytest.mark.slow  # a census, 2 runs, Ctrl-C, a warm-up and 2 more: 20 s here
def test_an_interrupted_exec_resumes_after_a_warm_up(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import time

    (tmp_path / "train.py").write_text(SMALL)
    out = tmp_path / "run"
    env = {**os.environ, **CPU_ONLY}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    args = ["--mode", "default", "--replicates", "2", "--out", str(out), "--", PY, "train.py"]
    proc = subprocess.Popen(
        [PY, "-m", "detbench", "exec", *args],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        done = (
            json.loads((out / "exec.json").read_text())["runs"]
            if (out / "exec.json").exists()
            else {}
        )
        if len(done) >= 2:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr[-2000:]
    kept = json.loads((out / "exec.json").read_text())
    assert 2 <= len(kept["runs"]) < 4 and kept["census"]["status"] == "ok"
    assert f"'detbench exec --resume {out}' runs the rest" in stderr
    code, stdout, stderr = exec_cli(tmp_path, "--resume", str(out), cwd=tmp_path)
    assert code == 0, stderr[-3000:]
    assert "first one untimed run of the baseline, a warm-up" in stderr  # the census is done
    doc = json.loads((out / "exec.json").read_text())
    assert len(doc["runs"]) == 4 and doc["census"] == kept["census"]
    assert doc["warmup"]["status"] == "ok"
    assert all(f["digest"] for f in doc["runs"].values())
    records = (out / "results.jsonl").read_text().splitlines()
    assert len(records) == 2  # one per round of copy 0, none twice
    assert "A/A copy" in stdout

"""A plain truth checker for training scripts: is a script bitwise reproducible from run to run?

    python tools/exec_truth.py [--det-algos] [--runs 2] [--json OUT.json] -- python SCRIPT.py ARGS
    python tools/exec_truth.py -- python -m torch.distributed.run --nproc_per_node 2 SCRIPT.py

Each run gets a fresh temporary folder holding a copy of the *.py files of the script's folder and
runs the command there (cwd), with ``CUDA_VISIBLE_DEVICES=""`` and an empty stdin; a leading
``python`` means this interpreter. ``--det-algos`` turns on ``torch.use_deterministic_algorithms``
from outside, without editing the script: a ``sitecustomize.py`` in a temporary folder placed
first on ``PYTHONPATH`` (so torchrun's workers get it too), plus
``CUBLAS_WORKSPACE_CONFIG=:4096:8``.

The first run is compared with each other run on what they leave:

- every tensor (and numpy array) of every checkpoint file (.pt .pth .bin .ckpt .pkl through
  ``torch.load(weights_only=False)``, .safetensors through safetensors), found by walking dicts,
  lists, tuples, modules' state dicts and objects' ``__dict__``. Bitwise: same dtype, same shape
  and the same bytes (so a NaN equals the same NaN, and -0.0 differs from 0.0);
- every scalar of every TensorBoard event file, by (tag, step), but for tags that name a
  timing (runtime, per_second, time, throughput, speed, elapsed: the Trainer's
  ``train/train_runtime`` and ``eval/samples_per_second``, for example);
- every number printed right after a result label (loss, ppl, perplexity, acc, accuracy,
  val_loss, train_loss, grad_norm, lr) on stdout and on stderr, in order, as printed text.
  A progress bar (tqdm) is redrawn as often as the clock says, so a bar line that shows the
  same values as the bar line before it is not counted again.

With more than 2 runs the counts add up over the pairs (run 1 vs run 2, run 1 vs run 3, ...).
Files are matched by their path with the run-specific parts replaced (TensorBoard's
``events.out.tfevents.<time>.<host>.<pid>.<n>``, ``runs/<Mon><DD>_<HH-MM-SS>_<host>``,
``version_<n>``). Timings are not compared. Exit status 0 whatever the verdict, 1 if a run failed.
This tool does not import detbench.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

CHECKPOINT_SUFFIXES = {".pt", ".pth", ".bin", ".ckpt", ".pkl", ".safetensors"}
LABEL = r"val_loss|train_loss|grad_norm|perplexity|accuracy|loss|ppl|acc|lr"
NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?nan|[-+]?inf"
RESULT = re.compile(rf"(?<![A-Za-z0-9])(?:{LABEL})['\"]?\s*[:=]?\s*({NUMBER})(?![A-Za-z0-9])")
TIMING_TAG = re.compile(r"runtime|per_sec|time|throughput|speed|elapsed", re.IGNORECASE)
PROGRESS_BAR = re.compile(r"(?:it/s|s/it)[,\]]")
RUN_PARTS = [
    (re.compile(r"events\.out\.tfevents\.\d+\.[^/]+\.\d+\.(\d+)$"), r"events.out.tfevents.*.\1"),
    (re.compile(r"(^|/)runs/[A-Z][a-z]{2}\d{2}_\d{2}-\d{2}-\d{2}_[^/]+"), r"\1runs/<date>_<host>"),
    (re.compile(r"(^|/)version_\d+(?=/|$)"), r"\1version_*"),
]
SITECUSTOMIZE = "import torch\n\ntorch.use_deterministic_algorithms(True)\n"


def run_once(command: list[str], script: Path, det_algos: bool, timeout: float) -> dict:
    """Run the command in a fresh folder; return the folder, its output and its wall time."""
    folder = Path(tempfile.mkdtemp(prefix="exec_truth-"))
    site = folder.with_name(folder.name + "-site")
    for py in script.parent.glob("*.py"):
        shutil.copy2(py, folder / py.name)
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    if det_algos:
        site.mkdir()
        (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), env.get("PYTHONPATH")) if p)
        env["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            command,
            cwd=folder,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=timeout,
        )
        rc, out, err = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as timed_out:
        rc, out, err = f"timed out after {timeout:.0f}s", timed_out.stdout, timed_out.stderr
    wall = time.perf_counter() - start
    shutil.rmtree(site, ignore_errors=True)
    return {
        "folder": folder,
        "rc": rc,
        "stdout": (out or b"").decode(errors="replace"),
        "stderr": (err or b"").decode(errors="replace"),
        "wall_s": wall,
    }


def normalise(rel: str) -> str:
    for pattern, replacement in RUN_PARTS:
        rel = pattern.sub(replacement, rel)
    return rel


def output_files(folder: Path) -> dict[str, Path]:
    """The run's checkpoint and event files by normalised path (a clash gets #0, #1, ...)."""
    found: dict[str, list[Path]] = {}
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        if not path.is_file() or "__pycache__" in rel:
            continue
        if path.suffix in CHECKPOINT_SUFFIXES or "tfevents" in path.name:
            found.setdefault(normalise(rel), []).append(path)
    files = {}
    for key, paths in found.items():
        for i, path in enumerate(paths):
            files[key if len(paths) == 1 else f"{key}#{i}"] = path
    return files


def walk(obj, prefix: str, out: dict, seen: set) -> None:
    """Collect every tensor and numpy array under obj into out, keyed by its path."""
    import numpy as np
    import torch

    if isinstance(obj, torch.Tensor | np.ndarray):
        out[prefix] = obj
        return
    if id(obj) in seen or isinstance(obj, str | bytes | int | float | bool | type(None)):
        return
    seen.add(id(obj))
    if isinstance(obj, torch.nn.Module):
        obj = obj.state_dict()
    if isinstance(obj, dict):
        for key, value in obj.items():
            walk(value, f"{prefix}.{key}", out, seen)
    elif isinstance(obj, list | tuple):
        for i, value in enumerate(obj):
            walk(value, f"{prefix}[{i}]", out, seen)
    elif hasattr(obj, "__dict__") and not isinstance(obj, type):
        walk(vars(obj), prefix, out, seen)


class Stub:
    """Stands for a class that cannot be imported here, such as a script's own model class
    pickled whole from its ``__main__`` (``torch.save(model, ...)``): its state is kept as
    its ``__dict__``, which is walked like any other."""


class StubUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        try:
            return super().find_class(module, name)
        except (AttributeError, ImportError):
            return type(name, (Stub,), {})


def load_tensors(path: Path, folder: Path) -> dict:
    """The file's tensors by their path inside it, with the run's folder in a name (Lightning's
    ``best_k_models`` is keyed by checkpoint paths) replaced by ``<run>``."""
    import numpy as np
    import torch

    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        return {f".{k}": v for k, v in load_file(str(path)).items()}
    pickle_module = types.ModuleType("stub_pickle")
    pickle_module.__dict__.update(vars(pickle), Unpickler=StubUnpickler)
    try:
        obj = torch.load(path, map_location="cpu", weights_only=False, pickle_module=pickle_module)
    except Exception:  # not a torch file after all: its bytes stand for it
        return {"<bytes>": np.frombuffer(path.read_bytes(), dtype=np.uint8)}
    out: dict = {}
    walk(obj, "", out, set())
    for run_path in {str(folder), str(folder.resolve())}:
        out = {normalise(name.replace(run_path, "<run>")): v for name, v in out.items()}
    return out


def same_bits(a, b) -> bool:
    import numpy as np
    import torch

    if type(a) is not type(b) or a.dtype != b.dtype or tuple(a.shape) != tuple(b.shape):
        return False
    if isinstance(a, np.ndarray):
        return a.tobytes() == b.tobytes()
    if a.is_sparse:
        a, b = a.to_dense(), b.to_dense()
    a = a.detach().contiguous().reshape(-1).view(torch.uint8)
    return torch.equal(a, b.detach().contiguous().reshape(-1).view(torch.uint8))


def gap(a, b) -> str:
    """How far apart two float tensors of one shape are, for the first difference's line."""
    import torch

    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        return ""
    if a.shape != b.shape or a.dtype != b.dtype or not a.is_floating_point() or a.numel() == 0:
        return ""
    diff = (a.detach().double() - b.detach().double()).abs()
    return f" (max abs diff {diff.max().item():.3g}, {int((diff > 0).sum())} of {a.numel()})"


def tb_scalars(path: Path) -> dict:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(path), size_guidance={"scalars": 0})
    acc.Reload()
    values: dict = {}
    for tag in acc.Tags()["scalars"]:
        if TIMING_TAG.search(tag):
            continue  # a timing, such as the Trainer's train/train_runtime
        for event in acc.Scalars(tag):
            values.setdefault((tag, event.step), []).append(event.value)
    return values


def result_numbers(text: str) -> list[str]:
    numbers: list[str] = []
    last_bar: list[str] = []
    for segment in re.split(r"[\r\n]", text):
        found = RESULT.findall(segment)
        if found and PROGRESS_BAR.search(segment):
            if found == last_bar:
                continue  # a redraw of the bar with the same values
            last_bar = found
        numbers.extend(found)
    return numbers


class Tally:
    def __init__(self) -> None:
        kinds = ("files", "tensors", "tb_scalars", "numbers")
        self.counts = {kind: {"compared": 0, "differed": 0} for kind in kinds}
        self.first: str | None = None

    def add(self, kind: str, same: bool, what: str) -> None:
        self.counts[kind]["compared"] += 1
        if not same:
            self.counts[kind]["differed"] += 1
            self.first = self.first or f"{kind}: {what}"


def compare(a: dict, b: dict, tally: Tally, pair: str) -> None:
    files_a, files_b = output_files(a["folder"]), output_files(b["folder"])
    for key in sorted(files_a.keys() | files_b.keys()):
        both = key in files_a and key in files_b
        tally.add("files", both, f"{key} only in one run ({pair})")
        if not both:
            continue
        if "tfevents" in key:
            sa, sb = tb_scalars(files_a[key]), tb_scalars(files_b[key])
            for tag_step in sorted(sa.keys() | sb.keys()):
                va, vb = sa.get(tag_step), sb.get(tag_step)
                tally.add("tb_scalars", va == vb, f"{key} {tag_step}: {va} vs {vb} ({pair})")
            continue
        ta, tb = load_tensors(files_a[key], a["folder"]), load_tensors(files_b[key], b["folder"])
        for name in sorted(ta.keys() | tb.keys()):
            same = name in ta and name in tb and same_bits(ta[name], tb[name])
            what = f"{key}:{name}" if same else f"{key}:{name}{gap(ta.get(name), tb.get(name))}"
            tally.add("tensors", same, f"{what} ({pair})")
    for stream in ("stdout", "stderr"):
        na, nb = result_numbers(a[stream]), result_numbers(b[stream])
        for i in range(max(len(na), len(nb))):
            va = na[i] if i < len(na) else None
            vb = nb[i] if i < len(nb) else None
            tally.add("numbers", va == vb, f"{stream} #{i + 1}: {va} vs {vb} ({pair})")


def main() -> int:
    argv = sys.argv[1:]
    if "--" not in argv:
        sys.exit("usage: exec_truth.py [--det-algos] [--runs N] [--json OUT] -- python SCRIPT.py")
    split = argv.index("--")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--det-algos", action="store_true")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--keep", action="store_true", help="keep the run folders")
    args = parser.parse_args(argv[:split])
    command = argv[split + 1 :]
    script_at = next(i for i, arg in enumerate(command) if arg.endswith(".py"))
    script = Path(command[script_at]).resolve()
    command[script_at] = script.name
    if command[0] in ("python", "python3"):
        command[0] = sys.executable

    mode = "det-algos" if args.det_algos else "default"
    runs = []
    for i in range(args.runs):
        run = run_once(command, script, args.det_algos, args.timeout)
        runs.append(run)
        print(f"run {i + 1}/{args.runs} ({mode}): rc {run['rc']}, {run['wall_s']:.1f}s")
        if run["rc"] != 0:
            print(run["stdout"][-3000:] + "\n" + run["stderr"][-3000:], file=sys.stderr)
            for failed in runs if not args.keep else []:
                shutil.rmtree(failed["folder"], ignore_errors=True)
            return 1

    tally = Tally()
    for i, other in enumerate(runs[1:], start=2):
        compare(runs[0], other, tally, f"run 1 vs run {i}")
    verdict = "reproducible" if tally.first is None else "not reproducible"
    print(f"\n{'compared':<12}{'count':>8}{'differed':>10}")
    for kind, count in tally.counts.items():
        print(f"{kind:<12}{count['compared']:>8}{count['differed']:>10}")
    print(f"first difference: {tally.first or '-'}")
    print(f"verdict ({mode}, {args.runs} runs): {verdict}")
    if args.json:
        report = {"command": argv[split + 1 :], "mode": mode, "runs": args.runs}
        report.update(verdict=verdict, first_difference=tally.first, **tally.counts)
        report["wall_s"] = [round(r["wall_s"], 2) for r in runs]
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    if not args.keep:
        for run in runs:
            shutil.rmtree(run["folder"], ignore_errors=True)
    else:
        print("run folders: " + " ".join(str(r["folder"]) for r in runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())

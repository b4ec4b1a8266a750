#!/usr/bin/env python
"""
Independent ground-truth check for the held-out training scripts (does NOT use detbench).

For a script it:
  * runs it N times, each in a fresh temporary folder (script copied there, cwd there);
  * collects every checkpoint it leaves (torch.load(weights_only=False) for
    .pt/.pth/.ckpt/.bin/.tar/.pkl, safetensors for .safetensors), every scalar of
    every TensorBoard event file keyed by (file, tag, step), and every number printed
    right after a loss / acc / accuracy / perplexity / ppl label (stdout and stderr,
    as a terminal would finally show them, i.e. the text after the last '\\r');
  * compares every run against run 0: tensors with torch.equal + dtype + shape
    (bit-equality fallback so NaN == NaN), TB scalars exactly, printed numbers as text.

Modes:
  default    torch as the script leaves it
  det-algos  a temporary sitecustomize.py first on PYTHONPATH calls
             torch.use_deterministic_algorithms(True); CUBLAS_WORKSPACE_CONFIG=:4096:8

Usage:
  check_truth.py --all                      # every script in SPECS, writes truth.json
  check_truth.py --only NAME [--only NAME]  # subset, writes truth.json entries for them (merged)
  check_truth.py --runs 3 --mode default -- python some_script.py --arg 1
"""

import argparse
import copy
import io
import json
import math
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
import time
import types

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON = sys.executable

# ----------------------------------------------------------------------------------------------
# what each script is; line numbers are looked up from these patterns at check time
SPECS = [
    {
        "script": "hf_trainer_textclf.py",
        "args": [],
        "libraries": ["transformers", "accelerate", "tensorboard"],
        "racing_pattern": None,
        "settings_patterns": {},
        "seeded": True,
        "runs": 2,
    },
    {
        "script": "lit_mnist_classifier.py",
        "args": [],
        "libraries": ["lightning", "tensorboard"],
        "racing_pattern": None,
        "settings_patterns": {"torch.set_float32_matmul_precision('high')": r"set_float32_matmul_precision\("},
        "seeded": True,
        "runs": 2,
    },
    {
        "script": "train_tabular_mlp.py",
        "args": [],
        "libraries": [],
        "racing_pattern": None,
        "settings_patterns": {
            "torch.backends.cudnn.deterministic = True": r"cudnn\.deterministic\s*=",
            "torch.backends.cudnn.benchmark = False": r"cudnn\.benchmark\s*=",
        },
        "seeded": True,
        "runs": 2,
    },
    {
        "script": "train_cnn_hydra_style.py",
        "args": [],
        "libraries": ["tensorboard"],
        "racing_pattern": None,
        "settings_patterns": {"torch.backends.cudnn.benchmark = True": r"cudnn\.benchmark\s*="},
        "seeded": True,
        "runs": 2,
    },
    {
        "script": "gcn_node_classification.py",
        "args": [],
        "libraries": [],
        "racing_pattern": r"\.index_put_\(.*accumulate=True",
        "settings_patterns": {},
        "seeded": True,
        "runs": 3,
    },
    {
        "script": "train_chargpt.py",
        "args": [],
        "libraries": ["tqdm"],
        "racing_pattern": None,
        "settings_patterns": {
            "torch.backends.cuda.matmul.allow_tf32 = True": r"cuda\.matmul\.allow_tf32\s*=",
            "torch.backends.cudnn.allow_tf32 = True": r"cudnn\.allow_tf32\s*=",
        },
        "seeded": True,
        "runs": 2,
    },
]

SITECUSTOMIZE = '''
import atexit as _atexit, sys as _sys
import torch as _torch
_torch.use_deterministic_algorithms(True)
def _truth_report():
    try:
        _sys.stderr.write("[truth-sitecustomize] deterministic_algorithms_at_exit=%s\\n"
                          % _torch.are_deterministic_algorithms_enabled())
        _sys.stderr.flush()
    except Exception:
        pass
_atexit.register(_truth_report)
'''

TIMING_TAG = re.compile(r"(?i)(runtime|per_second|_per_sec|samples_sec|it/s|throughput|(^|/|_)time(_|$)|_ms$|duration)")

CKPT_SUFFIXES = (".pt", ".pth", ".ckpt", ".bin", ".tar", ".pkl")

# ----------------------------------------------------------------------------------------------
# tolerant unpickling: classes defined in the training script's __main__ (e.g. a whole pickled
# nn.Module) are not importable here, so they are replaced by a stub whose __dict__ we walk.
_STUBS = {}


def _stub_class(module, name):
    key = (module, name)
    if key not in _STUBS:
        def _setstate(self, state):
            if isinstance(state, tuple) and len(state) == 2:
                d, slots = state
                state = dict(d or {}, **(slots or {}))
            if isinstance(state, dict):
                self.__dict__.update(state)
            else:
                self.__dict__["_state"] = state

        _STUBS[key] = type(name, (object,), {"__module__": "stub." + module, "__setstate__": _setstate,
                                             "__init__": lambda self, *a, **k: None})
    return _STUBS[key]


class _TolerantUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        try:
            return super().find_class(module, name)
        except (ImportError, AttributeError):
            return _stub_class(module, name)


tolerant_pickle = types.ModuleType("tolerant_pickle")
tolerant_pickle.__dict__.update({k: getattr(pickle, k) for k in dir(pickle) if not k.startswith("__")})
tolerant_pickle.Unpickler = _TolerantUnpickler
tolerant_pickle.load = lambda f, **kw: _TolerantUnpickler(f, **kw).load()


def flatten_tensors(obj, prefix="", out=None, seen=None, depth=0):
    if out is None:
        out, seen = {}, set()
    if isinstance(obj, torch.Tensor):
        out[prefix or "<root>"] = obj
        return out
    if isinstance(obj, np.ndarray):
        out[prefix or "<root>"] = obj
        return out
    if depth > 60 or isinstance(obj, (str, bytes, int, float, bool, type(None))):
        return out
    if id(obj) in seen:
        return out
    seen.add(id(obj))
    if isinstance(obj, dict):
        for k, v in obj.items():
            flatten_tensors(v, f"{prefix}/{k}", out, seen, depth + 1)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            flatten_tensors(v, f"{prefix}[{i}]", out, seen, depth + 1)
    elif hasattr(obj, "__dict__") and not isinstance(obj, (types.ModuleType, type, types.FunctionType)):
        flatten_tensors(vars(obj), f"{prefix}.{type(obj).__name__}", out, seen, depth + 1)
    return out


def load_checkpoint(path):
    if path.endswith(".safetensors"):
        from safetensors.torch import load_file
        return load_file(path)
    return torch.load(path, map_location="cpu", weights_only=False, pickle_module=tolerant_pickle)


def tensors_equal(a, b):
    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.is_sparse or b.is_sparse:
        a, b = a.to_dense(), b.to_dense()
    if torch.equal(a, b):
        return True
    try:  # bit-equality (NaN == NaN, -0.0 != 0.0 handled by bits)
        return torch.equal(a.detach().reshape(-1).contiguous().view(torch.uint8),
                           b.detach().reshape(-1).contiguous().view(torch.uint8))
    except Exception:
        return False


# ----------------------------------------------------------------------------------------------
# path normalisation so timestamped run folders / event files pair up across runs
_NORM = [
    (re.compile(r"events\.out\.tfevents\.\d+\.[^/]*?\.\d+\.(\d+)$"), r"events.out.tfevents.<T>.<HOST>.<PID>.\1"),
    (re.compile(r"[A-Z][a-z]{2}\d{2}_\d{2}-\d{2}-\d{2}_[^/]+"), "<HF_RUN>"),
    (re.compile(r"\d{4}-\d{2}-\d{2}[T_ ]?\d{2}[-:]\d{2}[-:]\d{2}"), "<DATETIME>"),
    (re.compile(r"\d{8}[-_]\d{6}"), "<DATETIME>"),
    (re.compile(r"\d{4}-\d{2}-\d{2}"), "<DATE>"),
    (re.compile(r"(?<!\d)\d{2}-\d{2}-\d{2}(?!\d)"), "<TIME>"),
    (re.compile(r"(run[-_])\d{9,}"), r"\1<TS>"),
]


def norm_path(rel):
    for rx, rep in _NORM:
        rel = rx.sub(rep, rel)
    return rel


# ----------------------------------------------------------------------------------------------
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Z0-9]|\x1b[=>]")
_LABEL_NUM = re.compile(
    r"(?i)(loss|accuracy|acc|perplexity|ppl)(?![a-z])[^0-9\n]{0,40}?"
    r"([-+]?(?:nan|inf|\d+\.\d*(?:e[-+]?\d+)?|\.\d+(?:e[-+]?\d+)?|\d+(?:e[-+]?\d+)?))"
)


def visible_lines(text):
    text = _ANSI.sub("", text)
    return [line.rsplit("\r", 1)[-1] for line in text.split("\n")]


def printed_numbers(text):
    nums = []
    for line in visible_lines(text):
        if line.startswith("[truth-sitecustomize]"):
            continue
        for m in _LABEL_NUM.finditer(line):
            nums.append((m.group(1).lower(), m.group(2)))
    return nums


def tb_scalars(path):
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.util import tensor_util
    vals = {}
    for ev in EventFileLoader(path).Load():
        if not ev.HasField("summary"):
            continue
        for v in ev.summary.value:
            plugin = v.metadata.plugin_data.plugin_name if v.HasField("metadata") else ""
            if v.HasField("simple_value"):
                val = float(v.simple_value)
            elif v.HasField("tensor") and plugin in ("", "scalars"):
                arr = tensor_util.make_ndarray(v.tensor)
                if arr.size != 1 or arr.dtype.kind not in "fiu":
                    continue
                val = float(arr.reshape(-1)[0])
            else:
                continue
            vals.setdefault((v.tag, int(ev.step)), []).append(val)
    return vals


# ----------------------------------------------------------------------------------------------
def run_once(script_path, args, mode, timeout):
    work = tempfile.mkdtemp(prefix="truth-run-")
    site = tempfile.mkdtemp(prefix="truth-site-")
    name = os.path.basename(script_path)
    shutil.copy(script_path, os.path.join(work, name))
    env = dict(os.environ)
    env["CUDA_VISIBLE_DEVICES"] = ""
    env["HF_HUB_OFFLINE"] = "1"
    env["TRANSFORMERS_OFFLINE"] = "1"
    env.pop("PYTHONHASHSEED", None)
    env.pop("CUBLAS_WORKSPACE_CONFIG", None)
    if mode == "det-algos":
        with open(os.path.join(site, "sitecustomize.py"), "w") as f:
            f.write(SITECUSTOMIZE)
        env["PYTHONPATH"] = site + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
    t0 = time.time()
    proc = subprocess.run([PYTHON, name] + list(args), cwd=work, env=env, stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    wall = time.time() - t0
    out = proc.stdout.decode("utf-8", "replace")
    err = proc.stderr.decode("utf-8", "replace")
    res = {"rc": proc.returncode, "wall_s": round(wall, 2), "stdout": out, "stderr": err, "workdir": work}
    det_flag = re.findall(r"deterministic_algorithms_at_exit=(\w+)", err)
    res["det_at_exit"] = det_flag[-1] if det_flag else None

    ckpts, tb, load_errors = {}, {}, []
    for root, dirs, files in os.walk(work):
        for fn in files:
            p = os.path.join(root, fn)
            rel = os.path.relpath(p, work)
            if rel == name:
                continue
            key = norm_path(rel)
            if fn.endswith(".safetensors") or fn.endswith(CKPT_SUFFIXES):
                try:
                    ckpts[key] = flatten_tensors(load_checkpoint(p))
                except Exception as e:  # noqa: BLE001
                    load_errors.append(f"{rel}: {type(e).__name__}: {e}")
            elif "tfevents" in fn:
                for (tag, step), v in tb_scalars(p).items():
                    tb[(key, tag, step)] = v
    res["ckpts"], res["tb"], res["load_errors"] = ckpts, tb, load_errors
    res["printed"] = {"stdout": printed_numbers(out), "stderr": printed_numbers(err)}
    shutil.rmtree(site, ignore_errors=True)
    return res


def compare(ref, other):
    diffs = []
    # checkpoints
    if set(ref["ckpts"]) != set(other["ckpts"]):
        diffs.append(f"checkpoint file sets differ: {sorted(set(ref['ckpts']) ^ set(other['ckpts']))}")
    n_t = n_t_bad = 0
    for f in sorted(set(ref["ckpts"]) & set(other["ckpts"])):
        a, b = ref["ckpts"][f], other["ckpts"][f]
        if set(a) != set(b):
            diffs.append(f"{f}: tensor key sets differ ({len(set(a) ^ set(b))} keys)")
        for k in sorted(set(a) & set(b)):
            n_t += 1
            if not tensors_equal(a[k], b[k]):
                n_t_bad += 1
                if n_t_bad <= 5:
                    diffs.append(f"tensor differs: {f}:{k}")
    # tensorboard (wall-clock tags such as eval/runtime or samples_per_second are expected to
    # differ run to run; they are compared and counted separately and do not decide the verdict)
    n_s = n_s_bad = n_timing = n_timing_bad = 0
    if set(ref["tb"]) != set(other["tb"]):
        diffs.append(f"TB (file,tag,step) key sets differ: {len(set(ref['tb']) ^ set(other['tb']))} keys")
    for k in sorted(set(ref["tb"]) & set(other["tb"]), key=str):
        va, vb = ref["tb"][k], other["tb"][k]
        if TIMING_TAG.search(k[1]):
            n_timing += len(va)
            n_timing_bad += int(va != vb)
            continue
        n_s += len(va)
        same = len(va) == len(vb) and all(
            (x == y) or (math.isnan(x) and math.isnan(y)) for x, y in zip(va, vb))
        if not same:
            n_s_bad += 1
            if n_s_bad <= 5:
                diffs.append(f"TB scalar differs: {k}: {va} vs {vb}")
    # printed numbers
    n_p = n_p_bad = 0
    for stream in ("stdout", "stderr"):
        pa, pb = ref["printed"][stream], other["printed"][stream]
        if len(pa) != len(pb):
            diffs.append(f"{stream}: number of printed metric values differs ({len(pa)} vs {len(pb)})")
        for x, y in zip(pa, pb):
            n_p += 1
            if x != y:
                n_p_bad += 1
                if n_p_bad <= 5:
                    diffs.append(f"{stream}: printed {x[0]} {x[1]} vs {y[1]}")
    return {
        "tensors_compared": n_t, "tensors_differing": n_t_bad,
        "tb_scalars_compared": n_s, "tb_keys_differing": n_s_bad,
        "tb_timing_scalars_excluded": n_timing, "tb_timing_keys_differing": n_timing_bad,
        "printed_numbers_compared": n_p, "printed_numbers_differing": n_p_bad,
        "diffs": diffs,
    }


def check(script_path, args, mode, runs, timeout=900, keep=False, verbose=True):
    results = []
    for i in range(runs):
        r = run_once(script_path, args, mode, timeout)
        if verbose:
            print(f"  [{mode}] run {i + 1}/{runs}: rc={r['rc']} wall={r['wall_s']}s "
                  f"ckpt_files={len(r['ckpts'])} tb_scalars={sum(len(v) for v in r['tb'].values())} "
                  f"printed={len(r['printed']['stdout']) + len(r['printed']['stderr'])} "
                  f"det_at_exit={r['det_at_exit']}", flush=True)
            if r["rc"] != 0:
                print(r["stderr"][-3000:])
            for e in r["load_errors"]:
                print("   load error:", e)
        results.append(r)
    ref = results[0]
    comparisons = [compare(ref, o) for o in results[1:]]
    ok_rc = all(r["rc"] == 0 for r in results)
    all_same = all(not c["diffs"] for c in comparisons)
    verdict = ("error" if not ok_rc else "reproducible" if all_same else "not reproducible")
    runs_differing = sum(1 for c in comparisons if c["diffs"])
    summary = {
        "verdict": verdict,
        "runs": runs,
        "runs_differing_from_run1": runs_differing,
        "checkpoint_files": len(ref["ckpts"]),
        "checkpoint_files_list": sorted(ref["ckpts"]),
        "tensors_compared": sum(c["tensors_compared"] for c in comparisons),
        "tensors_differing": sum(c["tensors_differing"] for c in comparisons),
        "tb_scalars_compared": sum(c["tb_scalars_compared"] for c in comparisons),
        "tb_keys_differing": sum(c["tb_keys_differing"] for c in comparisons),
        "tb_timing_scalars_excluded": sum(c["tb_timing_scalars_excluded"] for c in comparisons),
        "tb_timing_keys_differing": sum(c["tb_timing_keys_differing"] for c in comparisons),
        "printed_numbers_compared": sum(c["printed_numbers_compared"] for c in comparisons),
        "printed_numbers_differing": sum(c["printed_numbers_differing"] for c in comparisons),
        "load_errors": sorted({e for r in results for e in r["load_errors"]}),
        "wall_s": [r["wall_s"] for r in results],
        "det_at_exit": [r["det_at_exit"] for r in results] if mode == "det-algos" else None,
        "first_diffs": [d for c in comparisons for d in c["diffs"]][:8],
    }
    if verbose:
        print(f"  [{mode}] => {verdict}  (tensors {summary['tensors_compared']}/{summary['tensors_differing']} "
              f"differ, tb {summary['tb_scalars_compared']}/{summary['tb_keys_differing']}, printed "
              f"{summary['printed_numbers_compared']}/{summary['printed_numbers_differing']})", flush=True)
        for d in summary["first_diffs"]:
            print("     ", d)
    if not keep:
        for r in results:
            shutil.rmtree(r["workdir"], ignore_errors=True)
    return summary


def find_line(script_path, pattern):
    rx = re.compile(pattern)
    name = os.path.basename(script_path)
    with open(script_path) as f:
        for i, line in enumerate(f, 1):
            if not line.lstrip().startswith("#") and rx.search(line):
                return f"{name}:{i}"
    return None


def truth_entry(spec):
    path = os.path.join(HERE, spec["script"])
    print(f"== {spec['script']}", flush=True)
    d = check(path, spec["args"], "default", spec["runs"])
    t = check(path, spec["args"], "det-algos", spec["runs"])
    entry = {
        "script": spec["script"],
        "command": ["python", spec["script"]] + spec["args"],
        "default": d["verdict"],
        "det-algos": t["verdict"],
        "libraries": spec["libraries"],
        "racing_line": find_line(path, spec["racing_pattern"]) if spec["racing_pattern"] else None,
        "settings_lines": {k: find_line(path, p) for k, p in spec["settings_patterns"].items()},
        "seeded": spec["seeded"],
        "counts": {"default": d, "det-algos": t},
    }
    return entry


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--all", action="store_true")
    ap.add_argument("--only", action="append", default=[])
    ap.add_argument("--out", default=os.path.join(HERE, "truth.json"))
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--mode", choices=["default", "det-algos", "both"], default="both")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()

    if a.all or a.only:
        specs = [s for s in SPECS if a.all or s["script"] in a.only]
        existing = []
        if os.path.exists(a.out) and not a.all:
            with open(a.out) as f:
                existing = json.load(f)
        entries = {e["script"]: e for e in existing}
        for s in specs:
            entries[s["script"]] = truth_entry(s)
            ordered = [entries[x["script"]] for x in SPECS if x["script"] in entries]
            with open(a.out, "w") as f:
                json.dump(ordered, f, indent=2)
        print(json.dumps([{k: e[k] for k in ("script", "default", "det-algos")} for e in ordered], indent=1))
        return

    cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd
    if cmd and cmd[0] in ("python", "python3"):
        cmd = cmd[1:]
    script, args = os.path.abspath(cmd[0]), cmd[1:]
    modes = ["default", "det-algos"] if a.mode == "both" else [a.mode]
    for m in modes:
        check(script, args, m, a.runs, keep=a.keep)


if __name__ == "__main__":
    main()

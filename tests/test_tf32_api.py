"""cuDNN's TF32 switch through the API the installed torch prefers, never mixed with the other
(issue 21 item 3): torch 2.9+ has per-op ``fp32_precision`` settings and raises when the legacy
``allow_tf32`` is read after them; older torch has only ``allow_tf32``."""

from __future__ import annotations

import json
import subprocess
import sys

from .conftest import ROOT

CHECK = """
import json, torch
from detbench.core import torchstate as ts
cudnn = torch.backends.cudnn
new = hasattr(getattr(cudnn, "conv", None), "fp32_precision")
out = {"new": new, "default": ts.read_cudnn_tf32()}
for level in ("off", "on", "off"):
    ts.apply_cudnn_tf32(level)
    out[level] = ts.read_cudnn_tf32()
    if new:
        out[level + "_ops"] = [cudnn.conv.fp32_precision, cudnn.rnn.fp32_precision]
    else:
        out[level + "_ops"] = [bool(cudnn.allow_tf32)]
print(json.dumps(out))
"""


def test_cudnn_tf32_is_set_and_read_through_one_api() -> None:
    proc = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.splitlines()[-1])
    assert out["default"] == "on"  # torch's default: cuDNN may use TF32 for fp32
    assert (out["off"], out["on"]) == ("off", "on")
    if out["new"]:  # conv and rnn together, so they never differ
        assert out["off_ops"] == ["ieee", "ieee"] and out["on_ops"] == ["tf32", "tf32"]
    else:
        assert out["off_ops"] == [False] and out["on_ops"] == [True]


def test_the_snippet_uses_the_same_api() -> None:
    """A reproducing snippet sets cuDNN's TF32 the way the worker did."""
    from detbench.core import torchstate as ts

    lines = ts.cudnn_tf32_snippet("off")
    if ts._cudnn_fp32_precision_api() is None:
        assert lines == ["torch.backends.cudnn.allow_tf32 = False"]
    else:
        assert lines == [
            'torch.backends.cudnn.conv.fp32_precision = "ieee"',
            'torch.backends.cudnn.rnn.fp32_precision = "ieee"',
        ]

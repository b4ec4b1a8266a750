"""Issue 21, item 6: the pinned flash and cuDNN attention cases run in bf16 with no arbitrary mask
(causal, padding on the right), so a GPU can run them; on a CPU, cuDNN stays ``unsupported``."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from detbench.core import seeding
from detbench.core.workload import Context, load_file
from detbench.worker.measure import SettingUnsupported, classify

from .conftest import requires_cuda

SUITE = Path(__file__).resolve().parent.parent / "suites" / "invariance.py"
WORKLOADS = {w.name: w for w in load_file(SUITE)}


def _step(name: str, device: str, b: int) -> object:
    seeding.seed_all(0)
    return WORKLOADS[name].factory(Context(torch.device(device), "quick", 0, batch_size=b))


@pytest.mark.parametrize("level", ["flash", "cudnn"])
def test_half_pinned_cases_are_bf16_without_a_mask(level: str) -> None:
    w = WORKLOADS[f"sdpa_padded_{level}"]
    assert w.params["dtype"] == "bfloat16" and "no mask" in w.params["op"]
    step = _step(w.name, "cpu", 4)
    q, k, v = vars(step)["inputs"]
    assert q.dtype == k.dtype == v.dtype == torch.bfloat16


def test_flash_on_a_cpu_gives_causal_attention_of_each_request() -> None:
    step = _step("sdpa_padded_flash", "cpu", 4)
    q, k, v = vars(step)["inputs"]
    out = step()[0]  # type: ignore[operator]
    assert out.dtype == torch.bfloat16 and out.shape == q.shape
    want = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
    # request 0 has no padding: every position is the causal attention
    torch.testing.assert_close(out[0].float(), want[0], atol=2e-2, rtol=2e-2)


def test_cudnn_on_a_cpu_is_unsupported() -> None:
    with pytest.raises((RuntimeError, SettingUnsupported)) as info:
        _step("sdpa_padded_cudnn", "cpu", 2)()  # type: ignore[operator]
    assert classify(info.value)[0] == "unsupported"


@requires_cuda
@pytest.mark.parametrize("level", ["flash", "cudnn"])
def test_half_pinned_cases_run_on_a_gpu(level: str) -> None:
    """From sm80 (A100, H100) both kernels take bf16 and causal attention: the case must run."""
    step = _step(f"sdpa_padded_{level}", "cuda", 4)
    if torch.cuda.get_device_capability() < (8, 0):
        pytest.skip("flash and cuDNN attention in bf16 need sm80 or newer")
    out = step()[0]  # type: ignore[operator]
    assert out.dtype == torch.bfloat16 and bool(torch.isfinite(out).all())

"""A one-shot child for tests/test_gpu21_locate.py (kind ``tests.gpu21_env_child:work``): it
answers with the cuBLAS workspace variable of its environment."""

from __future__ import annotations

import os
from typing import Any

from detbench.worker.protocol import Channel


def work(job: dict[str, Any], out: Channel) -> int:
    return out.result({"cublas": os.environ.get("CUBLAS_WORKSPACE_CONFIG")})

"""A one-shot child for tests/test_gpu21_locate.py: it answers with the cuBLAS workspace variable
of its environment."""

from __future__ import annotations

import os
import sys

from detbench.worker.protocol import child_main

if __name__ == "__main__":
    sys.exit(
        child_main(lambda job: {"cublas": os.environ.get("CUBLAS_WORKSPACE_CONFIG")}, sys.argv[1:])
    )

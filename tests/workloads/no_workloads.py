"""A file that imports detbench but defines no workload: detbench run refuses it."""

import detbench  # noqa: F401

BATCH = 32

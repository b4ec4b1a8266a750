"""detbench's tests.

OpenMP's idle threads spin, waiting for the next parallel region, for as long as their runtime
allows. On a machine whose cores are all busy (this 2-core machine, with the tests on two
pytest-xdist workers and whatever else runs beside them) the spinning threads of one process
take the cores that another's working threads need: in-process tests of small torch ops ran
27x slower beside two busy processes (133 s against 4.9 s with passive waiting). Set before
anything imports torch (this runs before tests/conftest.py), and inherited by every process a
test starts. Passive waiting changes no result: two threads still run each parallel region, and
the CPU races the tests rely on still give other bits in every fresh process.
"""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# Two commands on a fresh machine: `make bench` and `make test`. Both set themselves up through
# tools/python, which installs nothing when the interpreter already has what detbench needs.
SHELL := /bin/bash
export PYTHONPATH := $(CURDIR)$(if $(PYTHONPATH),:$(PYTHONPATH))
# Python may keep its compiled bytecode (in __pycache__/, which git ignores): where the shell
# forbids it, every process compiles detbench's modules again, and pytest rewrites the asserts of
# every test module again in each of its processes (about 4 s of a collection here).
unexport PYTHONDONTWRITEBYTECODE
ARGS ?=

.PHONY: bench test test-cuda test-slow lint docs gpu-check bench-matrix pytest-bench clean-venv

## bench: the main job: the matrix, every mode x 3 replicates (cuda/full on a GPU: the 5 core suites; else cpu/quick: every suite)
bench:
	@py=$$(tools/python) && $$py -m detbench run $(ARGS)

## gpu-check: the first command on a new GPU host: one small workload per suite on CUDA, in plain words
gpu-check:
	@py=$$(tools/python) && $$py -m detbench gpu-check $(ARGS)

## test: the test suite (CUDA tests skip without a GPU), but for the tests marked slow: on
## XDIST's workers (pytest-xdist, one group per module or shared run: tests/conftest.py), then the
## tests marked serial alone (collected from the files that mark any: SERIAL). Without
## pytest-xdist installed, or with XDIST=, all in one process.
XDIST ?= -n 2 --dist loadgroup
SERIAL = $(shell grep -l 'mark\.serial' tests/test_*.py)
test:
	@py=$$(tools/python) || exit 1; xdist=$$($$py -c 'import xdist' 2>/dev/null && echo "$(XDIST)"); \
	$$py -m pytest -q tests -m "not slow and not serial" $$xdist $(ARGS); a=$$?; \
	[ $$a = 0 ] || [ $$a = 5 ] || exit $$a; \
	$$py -m pytest -q $(SERIAL) -m "not slow and serial" $(ARGS); b=$$?; \
	[ $$b = 0 ] || [ $$b = 5 ] || exit $$b; \
	[ $$a = 0 ] || [ $$b = 0 ]  # pytest's 5, no test selected: an error only if neither ran one

## test-cuda: only the tests that need a CUDA GPU (on a GPU host; without one they all skip)
test-cuda:
	@py=$$(tools/python) && $$py -m pytest -q tests --cuda-only $(ARGS)

## test-slow: the tests marked slow: whole suites end to end (CI runs them too), on XDIST's workers,
## then those also marked serial alone (timings compared, the CPU races of locate's two threads)
test-slow:
	@py=$$(tools/python) || exit 1; xdist=$$($$py -c 'import xdist' 2>/dev/null && echo "$(XDIST)"); \
	$$py -m pytest -q tests -m "slow and not serial" $$xdist $(ARGS); a=$$?; \
	[ $$a = 0 ] || [ $$a = 5 ] || exit $$a; \
	$$py -m pytest -q $(SERIAL) -m "slow and serial" $(ARGS); b=$$?; \
	[ $$b = 0 ] || [ $$b = 5 ] || exit $$b; \
	[ $$a = 0 ] || [ $$b = 0 ]  # pytest's 5, no test selected: an error only if neither ran one

## lint: ruff, mypy and the layers (import-linter: no import points up; tools/import_graph.py: no
## cycle inside a layer, no private name imported from another module, no class name defined twice).
## Dev tools, installed in .venv.
lint:
	@py=$$(tools/python) && $$py -m ruff check . && $$py -m ruff format --check . && $$py -m mypy \
		&& $$py -c "import sys; from importlinter.cli import lint_imports_command as c; sys.exit(c())" && $$py tools/import_graph.py

## docs: the manual in docs/ as a site in site/ (mkdocs-material, installed where missing); --strict fails on a broken link
docs:
	@py=$$(tools/python) && { $$py -c 'import material' 2>/dev/null || $$py -m pip install -q 'mkdocs-material>=9'; } && $$py -m mkdocs build --strict --site-dir site

## bench-matrix: how long the CPU quick matrix of all suites takes, and where the time goes
bench-matrix:
	@py=$$(tools/python) && $$py -m pytest -q -s benchmarks/test_matrix.py --benchmark-json=benchmarks/matrix.json $(ARGS)

## pytest-bench: the suites as pytest-benchmark tests under one mode: make pytest-bench MODE=det-algos
MODE ?= default
pytest-bench:
	@py=$$(tools/python) && $$py -m pytest -q benchmarks/test_workloads.py --detbench-mode $(MODE) $(ARGS)

clean-venv:
	rm -rf .venv

"""The built-in suites. Each file is a suite of @detbench.workload functions, loaded by its path
(detbench.core.workload.load_file); files starting with "_" are their helpers."""

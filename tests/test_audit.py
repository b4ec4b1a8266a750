"""`detbench audit` on CPU: the ops with no deterministic implementation, with the lines of the
user's code that called them, and the verdicts from fresh processes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from detbench.locate.audit import Audit, Finding, to_text

from .conftest import WORKLOADS, detbench_cli

FILE = WORKLOADS / "audit_me.py"


def marked_line(marker: str) -> int:
    lines = FILE.read_text().splitlines()
    return next(i + 1 for i, text in enumerate(lines) if text.endswith(f"# AUDIT: {marker}"))


@pytest.fixture(scope="module")
def audits() -> dict[str, dict[str, Any]]:
    proc = detbench_cli("audit", str(FILE), "--json", "--replicates", "2", "--device", "cpu")
    assert proc.returncode == 0, proc.stderr
    return {a["workload"]: a for a in json.loads(proc.stdout)}


@pytest.mark.slow  # a whole run end to end: make test-slow and CI run it
def test_the_culprits_and_their_lines(audits: dict[str, dict[str, Any]]) -> None:
    a = audits["audit/unpool_and_put"]
    found = {(f["op"], Path(f["file"]), f["line"], f["phase"]) for f in a["findings"]}
    assert found == {
        ("max_unpooling2d_forward_out", FILE, marked_line("max_unpool2d"), "step"),
        ("put_", FILE, marked_line("put_"), "step"),
    }
    assert all(f["count"] == 2 for f in a["findings"])  # once per probe step
    assert a["probe_error"] is None


@pytest.mark.slow  # a whole run end to end: make test-slow and CI run it
def test_verdicts_from_fresh_processes(audits: dict[str, dict[str, Any]]) -> None:
    bad = audits["audit/unpool_and_put"]["verdicts"]
    assert bad["cudnn-det+det-algos"]["verdict"] == "unsupported"
    assert (
        "max_unpooling2d_forward_out does not have a deterministic implementation"
        in (bad["cudnn-det+det-algos"]["message"])
    )
    clean = audits["audit/clean_mlp"]
    assert clean["findings"] == []
    assert {m: v["verdict"] for m, v in clean["verdicts"].items()} == {
        "default": "reproducible",
        "cudnn-det+det-algos": "reproducible",
    }
    assert clean["settings"].splitlines()[-1] == "torch.use_deterministic_algorithms(False)"


@pytest.mark.slow  # a whole run end to end: make test-slow and CI run it
def test_nondeterministic_by_default_fixed_by_the_deterministic_mode(
    audits: dict[str, dict[str, Any]],
) -> None:
    a = audits["audit/racing_accumulate"]
    assert a["findings"] == []  # it has a deterministic implementation, used when asked
    assert a["verdicts"]["default"]["verdict"] == "nondeterministic"
    assert a["verdicts"]["cudnn-det+det-algos"]["verdict"] == "reproducible"
    assert a["settings"].splitlines()[-1] == "torch.use_deterministic_algorithms(True)"
    # where the default mode's runs part: located at the line, fixed by the deterministic mode
    (c,) = a["located"]["culprits"]
    lines = FILE.read_text().splitlines()
    line = next(i + 1 for i, text in enumerate(lines) if text.endswith("# LOCATE: the race"))
    assert (c["op"], c["line"], c["phase"], c["module"]) == ("aten.index_put_", line, "forward",
                                                             None)  # fmt: skip
    assert c["max_abs_diff"] > 0 and c["fixed_by_deterministic_mode"] is True
    assert audits["audit/clean_mlp"]["located"] is None  # reproducible: nothing to locate
    # named by the census whatever the runs said (issue 40): the op, its count and its line
    (race,) = a["can_race"]
    assert (race["op"], race["accumulate"], race["line"], race["count"]) == (
        "index_put_", True, line, 2,
    )  # fmt: skip
    assert audits["audit/clean_mlp"]["can_race"] == []


@pytest.mark.slow  # a whole run end to end: make test-slow and CI run it
def test_text_output_for_one_workload(audits: dict[str, dict[str, Any]]) -> None:
    a = audits["audit/unpool_and_put"]
    text = to_text([Audit(**{**a, "findings": [Finding(**f) for f in a["findings"]]})])
    lines = text.splitlines()
    assert lines[0] == "audit/unpool_and_put on cpu (torch " + lines[0].split("torch ")[1]
    assert lines[1] == "  ops with no deterministic implementation here (2):"
    assert lines[2].split() == [
        "max_unpooling2d_forward_out", "(x2)", "at",
        f"tests/workloads/audit_me.py:{marked_line('max_unpool2d')}",
        "restored", "=", "F.max_unpool2d(pooled,", "where,", "(2,", "2))", "#", "AUDIT:",
        "max_unpool2d",
    ]  # fmt: skip
    assert "audit/clean_mlp" not in text
    assert (
        "    cudnn-det+det-algos    unsupported: fingerprint: max_unpooling2d_forward_out" in text
    )


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("missing.py", "workload file not found: missing.py"),
        (
            f"{FILE}:nope",
            f"no workload 'nope' in {FILE}; its workloads: unpool_and_put, clean_mlp, "
            "racing_accumulate",
        ),
        (str(WORKLOADS / "no_workloads.py"), "defines no workload"),
    ],
)
def test_audit_bad_input(target: str, message: str) -> None:
    proc = detbench_cli("audit", target, "--device", "cpu")
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0, proc.stderr
    assert proc.stderr.startswith("detbench: error: ") and message in proc.stderr


def test_the_probe_runs_in_the_deterministic_modes_environment(monkeypatch: Any) -> None:
    """The probe is a process of the fully deterministic mode: it gets the mode's
    ``CUBLAS_WORKSPACE_CONFIG`` (cuBLAS refuses deterministic algorithms on CUDA without it),
    not the bare environment of the shell."""
    from detbench.core.modes import CUBLAS_ENV
    from detbench.locate.audit import run_probe

    monkeypatch.delenv(CUBLAS_ENV, raising=False)
    first = json.loads(detbench_cli("list", "--workload", str(FILE), "--json").stdout)[0]
    key = f"{first['suite']}/{first['workload']}"
    result = run_probe(FILE, key, "cpu")
    assert result["error"] is None, result
    assert result["cublas_workspace_config"] == ":4096:8"

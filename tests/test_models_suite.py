"""The models suite (suites/models.py): Transformers and torchvision models where they import,
an ``unsupported`` record with the reason where they do not; and what a user's own Transformers
model needs (issue 24 item 7): outputs as any nesting of tensors, the ops a step calls seen
rather than declared, failing workloads' first error lines and exit status, and a time left that
learns from the first records."""

from __future__ import annotations

import importlib
import importlib.util
import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

import detbench
from detbench.analysis.attribution import build_study
from detbench.analysis.failures import all_failed, failure_lines
from detbench.core.workload import Context, builtin_suite_files, load_file
from detbench.run.probe import probe_ops
from detbench.worker.fingerprint import OutputError, step_outputs
from detbench.worker.ops import OpsSeen
from tests.conftest import WORKLOADS, detbench_cli

# Whether the models extra is installed, without importing transformers at collection (1.5 s in
# every process that collects the tests).
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None, reason="the models extra is not installed"
)

TRANSFORMERS = ["gpt2_lm", "llama_lm", "bert_classify", "vit_classify", "convnext_classify",
                "whisper_seq2seq", "gpt2_generate"]  # fmt: skip
TORCHVISION = ["tv_resnet50", "tv_efficientnet_b0", "tv_vit_b_16"]
#: suites/_models_more.py: each library's workloads.
MORE = {"diffusers": ["diffusers_unet2d"], "torch_geometric": ["pyg_gcn", "pyg_sage"],
        "timm": ["timm_mobilenetv3"]}  # fmt: skip


def _imports(name: str) -> bool:
    try:
        importlib.import_module(name)
    except Exception:
        return False
    return True


def _has_torchvision() -> bool:
    return _imports("torchvision")


def test_the_suite_lists_its_models_and_the_library_each_needs() -> None:
    proc = detbench_cli("list", "--suite", "models", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert {r["suite"] for r in rows} == {"models"}
    by_lib: dict[str, list[str]] = {}
    for r in rows:
        by_lib.setdefault(r["params"]["library"], []).append(r["workload"])
    assert by_lib == {"transformers": TRANSFORMERS, "torchvision": TORCHVISION, **MORE}
    text = detbench_cli("list", "--suite", "models").stdout
    assert re.search(r"^models/tv_resnet50 +library=torchvision, ", text, re.M)
    assert re.search(r"^models/gpt2_lm +library=transformers, ", text, re.M)


@pytest.fixture(scope="module")
def models_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("models") / "run"
    proc = detbench_cli(
        "run", "--suite", "models", "--mode", "default", "--mode", "det-algos",
        "--replicates", "2", "--device", "cpu", "--profile", "quick", "--out", str(out),
        "--no-report",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.mark.slow  # a whole run end to end: make test-slow and CI run it
def test_every_transformers_model_runs_in_both_modes(models_run: Path) -> None:
    df = detbench.load_results(models_run)
    tf = df[df["workload"].isin(TRANSFORMERS)]
    assert len(tf) == len(TRANSFORMERS) * 2 * 2
    assert (tf["status"] == "ok").all(), tf[tf["status"] != "ok"][["workload", "message"]]
    # The attention they ran, as the model says (ConvNeXt has none), and the op seen running.
    first = tf.drop_duplicates("workload").set_index("workload")
    attn = {w: a if isinstance(a, str) else None for w, a in first["attn_implementation"].items()}
    assert attn == {**{w: "sdpa" for w in TRANSFORMERS}, "convnext_classify": None}
    assert tf.groupby("workload")["attn_implementation"].nunique().max() <= 1
    called = first["ops_called"].to_dict()
    assert called["convnext_classify"] == ["convolution"]
    assert called["gpt2_lm"] == ["scaled_dot_product_attention"]
    assert (tf["flops_per_step"] > 0).all()
    # The loss of every fingerprint step, from the dict the training steps return.
    gpt2 = tf[tf["workload"] == "gpt2_lm"]
    assert all(len(x) == 4 and all(v > 0 for v in x) for x in gpt2["losses"])
    # generate() at every declared batch size: the batch-invariance verdict is made.
    gen = tf[tf["workload"] == "gpt2_generate"]
    assert gen["batch_invariant"].notna().all() and (gen["batch_distinct_results"] >= 1).all()
    tv = df[df["workload"].isin(TORCHVISION)]
    if _has_torchvision():
        assert (tv["status"] == "ok").all()
    else:
        assert (tv["status"] == "unsupported").all()
        assert tv["message"].str.contains("needs torchvision, which does not import here").all()


@pytest.mark.slow  # a whole run end to end: make test-slow and CI run it
def test_diffusers_pyg_and_timm_models_train_where_their_library_imports(
    models_run: Path,
) -> None:
    """The same run: each of suites/_models_more.py's workloads is ok in every record, with one
    fingerprint across replicates and modes (a CPU's step is deterministic here), where its
    library imports, and unsupported with the reason where it does not (timm here: it needs
    torchvision)."""
    df = detbench.load_results(models_run)
    for library, names in MORE.items():
        got = df[df["workload"].isin(names)]
        assert len(got) == len(names) * 2 * 2, library
        if not _imports(library):
            assert (got["status"] == "unsupported").all(), library
            assert got["message"].str.contains(f"needs {library}, which does not import").all()
            continue
        assert (got["status"] == "ok").all(), got[got["status"] != "ok"][["workload", "message"]]
        assert (got.groupby("workload")["fingerprint"].nunique() == 1).all(), library
        assert (got["flops_per_step"] > 0).all() and (got["seconds_per_step"] > 0).all()
        assert all(len(x) == 4 and all(v > 0 for v in x) for x in got["losses"])
    unet = df[df["workload"] == "diffusers_unet2d"]
    if _imports("diffusers"):  # its self-attention is diffusers' AttnProcessor2_0: SDPA, seen
        assert set(unet["attn_implementation"]) == {"sdpa"}


@pytest.mark.slow  # whole runs end to end: make test-slow and CI run it
def test_without_diffusers_pyg_or_timm_the_records_say_unsupported_and_why(
    tmp_path: Path,
) -> None:
    """Each library hidden for real: a module of its name first on the workers' PYTHONPATH
    raises ImportError when imported, so the factory's import fails as a missing one would."""
    hide = tmp_path / "hide"
    hide.mkdir()
    for library in MORE:
        (hide / f"{library}.py").write_text(f"raise ImportError('{library} is hidden')\n")
    only = [a for names in MORE.values() for n in names for a in ("--only", f"models/{n}")]
    out = tmp_path / "run"
    proc = detbench_cli(
        "run", "--suite", "models", *only, "--mode", "default", "--replicates", "2",
        "--device", "cpu", "--profile", "quick", "--out", str(out), "--no-report",
        env={"PYTHONPATH": str(hide)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    df = detbench.load_results(out)
    assert len(df) == 4 * 2 and (df["status"] == "unsupported").all()
    for library, names in MORE.items():
        msgs = df[df["workload"].isin(names)]["message"]
        hint = "it needs the torchvision" if library == "timm" else "pip install 'detbench[models]'"
        assert msgs.str.fullmatch(
            f"build: needs {library}, which does not import here \\(.*{re.escape(hint)}.*\\): "
            f"ImportError: {library} is hidden"
        ).all(), msgs.tolist()


@pytest.mark.slow  # a whole run end to end: make test-slow and CI run it
def test_without_transformers_the_records_say_unsupported_and_why(tmp_path: Path) -> None:
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "transformers.py").write_text("raise ImportError('transformers is hidden')\n")
    out = tmp_path / "run"
    proc = detbench_cli(
        "run", "--suite", "models", "--only", "models/gpt2_lm", "--only", "models/vit_classify",
        "--mode", "default", "--mode", "det-algos", "--replicates", "2", "--device", "cpu",
        "--profile", "quick", "--out", str(out), "--no-report",
        env={"PYTHONPATH": str(hide)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    df = detbench.load_results(out)
    assert len(df) == 8 and (df["status"] == "unsupported").all()
    assert (
        df["message"]
        .str.contains("needs transformers, which does not import here .* transformers is hidden")
        .all()
    )
    assert "models: none: no workload of the suite ran in any mode" in proc.stdout


# --- a step's result: any nesting of tensors -------------------------------------------------


@dataclass
class Pair:
    first: torch.Tensor
    second: list[torch.Tensor | None]


def test_step_outputs_flatten_dicts_dataclasses_and_model_outputs() -> None:
    a, b, c = torch.zeros(2), torch.ones(3), torch.arange(4)
    assert step_outputs(a)[0] is a  # one tensor is one output, not its rows
    got = step_outputs({"x": a, "rest": Pair(b, [None, c])})
    assert [t is x for t, x in zip(got, [a, b, None, c], strict=True)] == [True] * 4
    from transformers.modeling_outputs import CausalLMOutput

    out = CausalLMOutput(**{"loss": a, "logits": b})
    assert step_outputs(out) == [a, b]  # loss first: loss_output=0 indexes it


def test_a_step_that_returns_no_tensor_is_named_in_one_line() -> None:
    with pytest.raises(OutputError) as err:
        step_outputs({"y": torch.zeros(1), "name": "hello"})
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith("the step returned a str ('hello') at ['name']; expected tensors")


# --- the ops a step calls, seen --------------------------------------------------------------


def test_ops_seen_sees_sdpa_however_it_is_reached() -> None:
    q = torch.randn(2, 2, 4, 8)
    with OpsSeen() as seen:
        torch.nn.functional.scaled_dot_product_attention(q, q, q)
    assert seen.called == ["scaled_dot_product_attention"]
    mha = torch.nn.MultiheadAttention(8, 2, batch_first=True)
    x = torch.randn(2, 4, 8)
    with OpsSeen() as seen:
        mha(x, x, x, need_weights=True)  # the weights are a softmax written out: no SDPA
    assert seen.called == []
    with OpsSeen() as seen:
        mha(x, x, x, need_weights=False)
    assert seen.called == ["scaled_dot_product_attention"]


def test_attribute_runs_the_sdpa_switch_on_models_that_do_not_declare_it() -> None:
    """The new user's tiny GPT-2 and BERT declare nothing; a step of each is seen calling SDPA,
    so the study runs the sdpa_backend variants on them, where it used to skip the switch."""
    source = WORKLOADS / "hf_user.py"
    workloads = load_file(source)
    assert not any(w.attention for w in workloads)
    probed = probe_ops(workloads, [str(source)], "cpu", "quick", 0)
    keys = ["custom/tiny_gpt2", "custom/tiny_bert"]
    assert probed.failed == {} and probed.calling("scaled_dot_product_attention") == keys
    study = build_study("cpu", workloads, called=probed.calls)
    sdpa = [v for v in study["variants"] if v["switch"] == "sdpa_backend"]
    assert sdpa and all(v["workloads"] == keys for v in sdpa)
    assert study["attention"] == {"declared": [], "seen": keys}
    blind = build_study("cpu", workloads)  # declarations alone: the old, false skip
    assert not any(v["switch"] == "sdpa_backend" for v in blind["variants"])


def test_a_declaration_adds_to_what_is_seen_never_hides_it() -> None:
    training = [w for w in load_file(builtin_suite_files()["training"])]
    study = build_study("cpu", training, called={w.key: [] for w in training})
    sdpa = {tuple(v["workloads"]) for v in study["variants"] if v["switch"] == "sdpa_backend"}
    assert sdpa == {("training/transformer_encoder",)}  # declared, though "seen" said nothing


# --- failures: the first error line, and the exit status ---------------------------------------


@pytest.mark.slow  # a whole run end to end: make test-slow and CI run it
def test_every_own_workload_failing_exits_1_with_each_first_error_line(tmp_path: Path) -> None:
    proc = detbench_cli(
        "run", "--workload", str(WORKLOADS / "all_fail.py"), "--mode", "default",
        "--replicates", "2", "--device", "cpu", "--out", str(tmp_path / "run"), "--no-report",
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    typo = next(ln for ln in lines if ln.startswith("  custom/shape_typo: "))
    assert typo.endswith("error in 2 of 2 records (default): fingerprint: RuntimeError: mat1 "
                         "and mat2 shapes cannot be multiplied (4x8 and 7x3) [raised at "
                         f"{WORKLOADS / 'all_fail.py'}:13 (in <lambda>)]")  # fmt: skip
    name = next(ln for ln in lines if ln.startswith("  custom/returns_a_name: "))
    assert "OutputError: the step returned a str ('hello') at ['name']" in name
    assert "every record of your own workloads failed" in proc.stderr
    # No record succeeded: the run's state never says "Complete" (issue 35).
    assert "Complete" not in proc.stdout
    assert "\nNo successful record: all 4 planned records ran, and none is ok (4 error)." in (
        proc.stdout
    )
    df = detbench.load_results(tmp_path / "run")
    assert all_failed(df, ["custom/shape_typo", "custom/returns_a_name"])
    assert len(failure_lines(df)) == 2


@pytest.mark.slow  # a user's Transformers models run end to end: test-slow (CI runs it)
def test_own_workloads_that_run_exit_0(tmp_path: Path) -> None:
    proc = detbench_cli(
        "run", "--workload", str(WORKLOADS / "hf_user.py"), "--mode", "default",
        "--replicates", "2", "--budget", "0.02", "--device", "cpu", "--out",
        str(tmp_path / "run"), "--no-report",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    df = detbench.load_results(tmp_path / "run")
    assert (df["status"] == "ok").all(), df["message"].tolist()
    assert set(df["attn_implementation"]) == {"sdpa"}  # seen, since they noted nothing
    assert "failed (the first line" not in proc.stdout


def test_a_context_note_is_checked() -> None:
    ctx = Context(device=torch.device("cpu"), profile="quick", seed=0)
    ctx.note(attn_implementation="eager")
    assert ctx.notes == {"attn_implementation": "eager"}
    with pytest.raises(detbench.DetbenchError, match=r"ctx\.note knows attn_implementation"):
        ctx.note(colour="blue")


# --- the H100 estimate: the suite's own arithmetic ---------------------------------------------


def test_the_suite_is_costed_on_paper_from_its_flops_and_left_out_of_the_cuda_matrix() -> None:
    from detbench.run import figures
    from detbench.run.config import MATRIX_OPT_IN

    assert "models" in MATRIX_OPT_IN["cuda"]
    own = figures.WORKLOAD_RECORD_SECONDS[("cuda", "full")]
    assert {k.split("/")[1] for k in own if k.startswith("models/")} == set(
        TRANSFORMERS + TORCHVISION + [n for names in MORE.values() for n in names]
    )
    # GPT-2 small: 7.00 TFLOP a step at the Transformer encoder's 41.3 TFLOP/s on the H100, 10
    # fingerprint steps with a digest of 124.4M parameters, 12.4 timed steps, a third of a
    # FLOP-count step, the build.
    step = 7.00e12 / 41.3e12
    assert own["models/gpt2_lm"] == pytest.approx(
        0.61 + 10 * (step + 0.73e-9 * 124.4e6) + (12.4 + 1 / 3) * step
    )
    # A verdict record has no timing pass (the paired phase times the step): each model's figure
    # less the model's timing pass (0.5 x the 0.3 s budget), a third of the figure at least.
    proc = detbench_cli(
        "run", "--suite", "models", "--device", "cuda", "--profile", "full", "--dry-run", "--json"
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    if doc["estimate_basis"] == "paper":  # no GPU here: the paper figures alone
        assert doc["costed_records"] == doc["records"] == 14 * 10 * 3
        verdicts = [max(v / 3, v - 0.15) for k, v in own.items() if k.startswith("models/")]
        assert doc["record_seconds"] == pytest.approx(30 * sum(verdicts), abs=0.1)


def test_the_cpu_flash_attention_is_counted_as_the_gpu_one() -> None:
    """On a CPU, SDPA without a mask runs the CPU flash kernel, which torch's FLOP registry does
    not know: the Transformers models' attention would count 0 FLOPs there."""
    from torch.utils.flop_counter import sdpa_backward_flop_count, sdpa_flop_count

    from detbench.worker.flops import count_flops

    q = torch.randn(2, 4, 128, 32, requires_grad=True)

    def step() -> None:
        out = torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
        out.sum().backward()

    shape = q.shape
    assert count_flops(step) == sdpa_flop_count(shape, shape, shape) + sdpa_backward_flop_count(
        shape, shape, shape, shape
    )

"""Which of what a run left decides whether two runs are the same: evidence in order of strength.

A training script leaves much that is not its result: its own timings in forms no mask knows, the
run's start time in a pickled argument object, a host name in a log's header. Two runs whose
tensors and results agree while such text differs did not compute different things, and calling
them "not reproducible" sends the user after a problem they do not have. So the items of a run
(``worker.outputs``) fall into three tiers: tensors (``TENSOR_KINDS``: checkpoints' and
safetensors' tensors, ``detbench.fingerprint`` calls, what was logged to TensorBoard), results
(numbers that a printed line, a JSON key or a CSV column labels with one of ``RESULT_WORDS``, as
printed) and text (every other printed line, value and file). A verdict rests on the first two
together where a run has any item in them (``split``); the text is still compared, and where it
alone differs the report shows it beside the verdict. A run with neither tensors nor labelled
results is decided by its text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from detbench.worker.items import Item
    from detbench.worker.outputs import Outputs

#: The kinds of item of each tier (``Item.kind``).
TENSOR_KINDS = frozenset({"tensor", "fingerprint", "scalar"})
RESULT_KINDS = frozenset({"result"})
#: The words that label a number as a result: a label holds one (``train_loss``, ``val/acc``,
#: ``valid ppl``'s ``ppl``, ``top1``), whatever comes before it.
RESULT_WORDS = (
    "loss",
    "acc",
    "accuracy",
    "ppl",
    "perplexity",
    "lr",
    "learning_rate",
    "grad_norm",
    "gnorm",
    "f1",
    "auc",
    "bleu",
    "rouge",
    "mse",
    "mae",
    "rmse",
    "nll",
    "kl",
    "top1",
    "top5",
    "reward",
    "score",
    "precision",
    "recall",
    "error",
    "err",
    "bpc",
    "bpb",
    "metric",
)
_WORDS = "|".join(sorted(RESULT_WORDS, key=len, reverse=True))
_NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf)\b"
#: A label (a result word, with what is glued to it: ``train_loss``, ``val/acc1``), then the
#: separators people print (``:``, ``=``, quotes, spaces), then its number.
_LABELLED = re.compile(
    rf"(?<![A-Za-z0-9])(?P<label>[A-Za-z0-9_/.-]*?(?:{_WORDS})(?:[_/.-][A-Za-z0-9]+|\d+)*)"
    rf"['\"]?\s*[:=]?\s*['\"]?(?P<v>{_NUM})(?![\w.])",
    re.IGNORECASE,
)
_KEY = re.compile(rf"(?:^|[^A-Za-z])(?:{_WORDS})(?:$|[^A-Za-z])|^(?:{_WORDS})\d*$", re.I)


def is_result_key(key: str) -> bool:
    """Whether a JSON key or a CSV column names a result (``eval_loss``, ``train/acc``,
    ``best_metric``), not a time or a count."""
    last = re.split(r"[./]", key)[-1] if key else key
    return bool(_KEY.search(last) or _KEY.search(key))


def labelled_numbers(masked: str) -> list[tuple[str, str]]:
    """(label, number as printed) of each result a masked line labels: ``loss 8.30``,
    ``'eval_loss': 2.1``, ``train_loss=2.300``, ``valid ppl 183.04``. Masked values (timings) are
    placeholders, never numbers."""
    return [(m.group("label"), m.group("v")) for m in _LABELLED.finditer(masked)]


def tier_of(kind: str) -> str:
    if kind in TENSOR_KINDS:
        return "tensors"
    if kind in RESULT_KINDS:
        return "results"
    return "text"


@dataclass(frozen=True)
class Evidence:
    """One run's items split into what decides (``decisive``) and the rest, compared and shown
    but not deciding (``rest``); ``basis`` names the tiers that decide."""

    decisive: Outputs
    rest: Outputs
    basis: str
    counts: dict[str, int]


def split(o: Outputs) -> Evidence:
    """The verdict's evidence in ``o`` (module docstring)."""
    counts = {"tensors": 0, "results": 0, "text": 0}
    for item in o.items:
        counts[tier_of(item.kind)] += 1
    strong: list[Item] = [i for i in o.items if tier_of(i.kind) != "text"]
    if not strong:
        return Evidence(o, replace(o, items=[]), "text", counts)
    weak = [i for i in o.items if tier_of(i.kind) == "text"]
    basis = " and ".join(t for t in ("tensors", "results") if counts[t])
    return Evidence(replace(o, items=strong), replace(o, items=weak), basis, counts)


def counts_text(counts: dict[str, Any]) -> str:
    """``57 tensors, 53 results, 120 lines of text``: what one run left to compare."""
    words = {"tensors": ("tensor", "tensors"), "results": ("result", "results")}
    words["text"] = ("other item", "other items")
    parts = []
    for key in ("tensors", "results", "text"):
        n = int(counts.get(key) or 0)
        if n:
            parts.append(f"{n} {words[key][n != 1]}")
    return ", ".join(parts) or "nothing"

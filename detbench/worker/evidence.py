"""Which of what a run left decides whether two runs are the same: evidence in order of strength.

A run leaves much that is not its result (timings no mask knows, a start time in a pickled
argument, a host name): two runs whose tensors and results agree while such text differs did not
compute different things. So a run's items fall into three tiers: tensors (``TENSOR_KINDS``),
results (numbers labelled with one of ``RESULT_WORDS``) and text (the rest). A verdict rests on
the first two where a run has any (``split``); the text is still compared and shown beside it. A
run with neither is decided by its text.
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
    """Whether a JSON key or a CSV column names a result (``eval_loss``, ``train/acc``)."""
    last = re.split(r"[./]", key)[-1] if key else key
    return bool(_KEY.search(last) or _KEY.search(key))


def labelled_numbers(masked: str) -> list[tuple[str, str]]:
    """(label, number as printed) of each result a masked line labels: ``loss 8.30``."""
    return [(m.group("label"), m.group("v")) for m in _LABELLED.finditer(masked)]


def tier_of(kind: str) -> str:
    if kind in TENSOR_KINDS:
        return "tensors"
    if kind in RESULT_KINDS:
        return "results"
    return "text"


@dataclass(frozen=True)
class Evidence:
    """One run's items split into what decides and the rest; ``basis`` names the deciding tiers."""

    decisive: Outputs
    rest: Outputs
    basis: str
    counts: dict[str, int]


def split(o: Outputs) -> Evidence:
    """The verdict's evidence in ``o``."""
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
    words = {"tensors": "tensor", "results": "result", "text": "other item"}
    found = ((int(counts.get(key) or 0), word) for key, word in words.items())
    return ", ".join(f"{n} {word}{'s' * (n != 1)}" for n, word in found if n) or "nothing"

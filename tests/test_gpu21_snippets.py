"""Issue 21, item 2: a setting the installed torch lacks appears in no reproducing snippet.

torch 2.11 has no ``torch._inductor.config.batch_invariant`` (setting it raises
``AttributeError``); the torch here has it, so its absence is simulated by replacing the
setting's ``unavailable()``.
"""

from __future__ import annotations

import dataclasses

import pytest

from detbench.core import settings as st
from detbench.core.modes import get_mode

MISSING = "torch 2.11 has no torch._inductor.config.batch_invariant (AttributeError)"
MODE = "det-algos[execution=compile,inductor_deterministic=on,inductor_batch_invariant=on]"


@pytest.fixture
def batch_invariant_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    row = st.BY_NAME["inductor_batch_invariant"]
    monkeypatch.setitem(
        st.BY_NAME,
        "inductor_batch_invariant",
        dataclasses.replace(row, unavailable=lambda: MISSING),
    )


def test_an_available_setting_is_in_the_snippet() -> None:
    """The control: where torch has the option, its line is there."""
    if st.BY_NAME["inductor_batch_invariant"].unavailable() is not None:
        pytest.skip("this torch lacks batch_invariant")
    assert "torch._inductor.config.batch_invariant = True" in get_mode(MODE).snippet()


def test_a_missing_setting_is_in_no_snippet(batch_invariant_missing: None) -> None:
    mode = get_mode(MODE)
    for text in (mode.snippet(), mode.to_json()["snippet"]):
        assert "batch_invariant" not in text
        # the settings this torch has are still there, and the snippet still compiles
        assert "torch._inductor.config.deterministic = True" in text
        compile(text, "<snippet>", "exec")
    assert "batch_invariant" not in "\n".join(st.snippet_lines(mode.settings))


def test_a_recommendation_names_no_missing_setting(batch_invariant_missing: None) -> None:
    """The recommendation table's snippet column comes from Mode.snippet: the same rule."""
    from detbench.analysis import recommend

    snippet = recommend.get_mode(MODE).snippet()
    assert "batch_invariant" not in snippet

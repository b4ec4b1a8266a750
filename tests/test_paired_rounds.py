"""How many copies of a workload a paired group builds at once (``paired_rounds.copies_at_once``):
the rule ``fits`` asks of one more copy, for k of them; the real run is in test_paired_memory."""

from __future__ import annotations

from detbench.run.paired import group_line, time_left
from detbench.run.paired_rounds import (
    HEADROOM_BYTES,
    HEADROOM_FACTOR,
    TwinRoom,
    copies_at_once,
    fits,
)

GIB = 1 << 30


def test_copies_at_once_leaves_the_headroom_fits_asks() -> None:
    """k copies at once fit where k more would each pass ``fits``'s rule; never fewer than 1,
    never more than asked; unknown memory asks no limit."""
    free, head = 22 * GIB, HEADROOM_BYTES["cpu"]
    assert copies_at_once(None, free, "cpu", 8) == 8 and copies_at_once(GIB, None, "cpu", 8) == 8
    assert copies_at_once(8 * GIB, free, "cpu", 8) == 2  # 21 GiB / (1.25 x 8 GiB)
    assert copies_at_once(20 * GIB, free, "cpu", 8) == 1  # not even one: still one
    assert copies_at_once(GIB, free, "cpu", 2) == 2
    for size in (3, 5, 7.5, 9):
        footprint = int(size * GIB)
        k = copies_at_once(footprint, free, "cpu", 99)
        assert free - HEADROOM_FACTOR * k * footprint >= head or k == 1
        assert free - HEADROOM_FACTOR * (k + 1) * footprint < head
        # fits, one copy at a time, agrees: k - 1 copies held, one more fits.
        assert fits(footprint, free - (k - 1) * footprint, "cpu") or k == 1


def test_twins_wait_for_a_footprint_then_go_as_many_as_fit() -> None:
    """A workload's first twin goes alone; once its verdict said what one copy holds, as many as
    fit and no more than asked; a worker that takes every core (most 1) always goes alone."""
    room = TwinRoom("cpu", 8)
    assert room.at_once("a") == 1
    room.saw("a", {"footprint_bytes": 8 * GIB, "free_bytes": 22 * GIB})
    assert room.at_once("a") == 2 and room.at_once("b") == 1
    room.saw("a", {"footprint_bytes": None, "free_bytes": 22 * GIB})  # the largest stays
    assert room.at_once("a") == 2
    room.saw("b", {"footprint_bytes": 1 << 20, "free_bytes": 22 * GIB})
    assert room.at_once("b") == 8
    room.saw("c", {"footprint_bytes": None, "free_bytes": None})  # memory not read: no limit
    assert room.at_once("c") == 8
    alone = TwinRoom("cpu", 1)
    alone.saw("b", {"footprint_bytes": 1 << 20, "free_bytes": 22 * GIB})
    assert alone.at_once("b") == 1


def test_the_first_group_line_reads_the_plan_then_the_pace_of_the_groups_done() -> None:
    """Before any group is done the time left is the plan's seconds for the groups less those
    spent (the plan line's figure, continued), where the weights are the estimate's seconds;
    otherwise, nothing; after a group, its pace (start-ups apart) for the plan's seconds left."""
    assert time_left((60.0, 0.0), 4.0, (4.0, 1, 3), estimated=True) == 56.0
    assert time_left((60.0, 0.0), 70.0, (4.0, 1, 3), estimated=True) == 0.0
    assert time_left((6.0, 0.0), 4.0, (4.0, 1, 3)) is None
    # One group of 20 planned seconds took 24 s, 4 of them its start-up: 1x pace for the 40 s
    # left, and two more start-ups of 4 s.
    assert time_left((60.0, 20.0), 24.0, (4.0, 1, 3), estimated=True) == 40.0 + 8.0
    line = group_line(True, (1, 10), (0, 3), "ops/x", (3, 3), (65.0, 56.0))
    assert line == (
        "verdicts and costs [ 1/10] replicate 1/3 ops/x: 3 workers side by side  "
        "elapsed 1:05 left ~0:56\n"
    )
    assert group_line(False, (2, 10), (0, 3), "ops/x", (4, 3), (5.0, None)).startswith(
        "costs [ 2/10]"
    )
    # A run that times nothing (detbench audit): its groups make verdicts, none takes a turn.
    assert group_line(True, (2, 6), (0, 2), "a/x", (2, 0), (9.0, None)) == (
        "verdicts [2/6] replicate 1/2 a/x: 2 workers  elapsed 0:09\n"
    )

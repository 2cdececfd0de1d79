"""Unit tests of the session-summary operator, with plain CPython: ``python3 -m unittest`` in
this directory, with ``weir_sdk`` importable (in the Weir repository,
``PYTHONPATH=../../../guest-sdk/python``)."""

import unittest

from app import SessionSummary
from weir_sdk import Events, Window
from weir_sdk.testing import MemoryState

OPERATOR = SessionSummary()


def batch(times: list[int]) -> Events:
    """A batch of page views at these times."""
    return Events.of(["page"], [(time, ["/"]) for time in times])


class SessionSummaryTest(unittest.TestCase):
    def test_summarises_out_of_order_events(self) -> None:
        memory = MemoryState("v1")
        OPERATOR.add(memory.state(), batch([5_000, 2_000, 9_000]))
        OPERATOR.add(memory.state(), batch([1_000]))
        output = OPERATOR.finish(memory.state(), Window(1_000, 39_000))
        expected = {"events": 4, "first": 1_000, "last": 9_000, "duration_ms": 8_000}
        self.assertEqual(output, expected)
        self.assertEqual(list(output), list(expected))

    def test_merging_sessions_sums_counts_and_widens_the_span(self) -> None:
        target, source, empty = MemoryState("v1"), MemoryState("v1"), MemoryState("v1")
        OPERATOR.add(target.state(), batch([50_000, 60_000]))
        OPERATOR.add(source.state(), batch([20_000, 30_000]))
        OPERATOR.merge(target.state(), source.state())
        OPERATOR.merge(target.state(), empty.state())
        output = OPERATOR.finish(target.state(), Window(20_000, 90_000))
        expected = {"events": 4, "first": 20_000, "last": 60_000, "duration_ms": 40_000}
        self.assertEqual(output, expected)

    def test_an_empty_state_finishes_at_the_window_start(self) -> None:
        output = OPERATOR.finish(MemoryState("v1").state(), Window(7_000, 37_000))
        self.assertEqual(output, {"events": 0, "first": 7_000, "last": 7_000, "duration_ms": 0})


if __name__ == "__main__":
    unittest.main()

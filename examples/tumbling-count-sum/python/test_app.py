"""Unit tests of the count-sum operator, with plain CPython: ``python3 -m unittest`` in
this directory, with ``weir_sdk`` importable (in the Weir repository,
``PYTHONPATH=../../../guest-sdk/python``)."""

import unittest

from app import NOT_NUMERIC, CountSum
from weir_sdk import Events, OperatorError, Value, Window
from weir_sdk.testing import MemoryState

WINDOW = Window(0, 60_000)
OPERATOR = CountSum()


def batch(amounts: list[Value]) -> Events:
    """A batch of user u1's events with these amounts."""
    return Events.of(["user", "amount"], [(1_000, ["u1", amount]) for amount in amounts])


class CountSumTest(unittest.TestCase):
    def test_sum_stays_int_until_a_float_arrives(self) -> None:
        memory = MemoryState("u1")
        OPERATOR.add(memory.state(), batch([2, 3]))
        output = OPERATOR.finish(memory.state(), WINDOW)
        self.assertEqual(output, {"count": 2, "sum": 5})
        self.assertIs(type(output["sum"]), int)

        OPERATOR.add(memory.state(), batch([0.5]))
        output = OPERATOR.finish(memory.state(), WINDOW)
        self.assertEqual(output, {"count": 3, "sum": 5.5})
        self.assertEqual(list(output), ["count", "sum"])

    def test_an_int_sum_beyond_64_bits_becomes_a_float(self) -> None:
        memory = MemoryState("u1")
        OPERATOR.add(memory.state(), batch([2**62, 2**62, -1]))
        self.assertEqual(memory.get("sum"), 2.0**63 - 1)
        self.assertIs(type(memory.get("sum")), float)

    def test_a_batch_with_a_bad_amount_is_rejected_whole(self) -> None:
        memory = MemoryState("u1")
        for bad in [None, "12", True]:
            with self.assertRaises(OperatorError) as raised:
                OPERATOR.add(memory.state(), batch([1, bad]))
            self.assertEqual(raised.exception.message, NOT_NUMERIC)
        no_amount = Events(["user"]).with_row(1_000, ["u1"])
        with self.assertRaises(OperatorError):
            OPERATOR.add(memory.state(), no_amount)
        self.assertIsNone(memory.get("count"))
        self.assertIsNone(memory.get("sum"))

    def test_merge_adds_counts_and_sums(self) -> None:
        target, source, empty = MemoryState("u1"), MemoryState("u1"), MemoryState("u1")
        OPERATOR.add(target.state(), batch([1, 2]))
        OPERATOR.add(source.state(), batch([1.5]))
        OPERATOR.merge(target.state(), source.state())
        OPERATOR.merge(target.state(), empty.state())
        output = OPERATOR.finish(target.state(), WINDOW)
        self.assertEqual(output, {"count": 3, "sum": 4.5})

        OPERATOR.merge(empty.state(), source.state())
        self.assertEqual(empty.get("sum"), 1.5)
        self.assertEqual(empty.get("count"), 1)


if __name__ == "__main__":
    unittest.main()

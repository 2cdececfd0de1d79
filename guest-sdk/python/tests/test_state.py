"""Tests of `State` over `testing.MemoryState`."""

import unittest

from weir_sdk.testing import MemoryState
from weir_sdk.values import I64_MAX, I64_MIN


class StateTest(unittest.TestCase):
    def test_typed_reads_only_match_their_kind(self) -> None:
        memory = MemoryState("k")
        state = memory.state()
        state.put("n", 3)
        state.put("x", 1.5)
        state.put("t", "hi")
        state.put("b", True)
        state.put("null", None)
        self.assertEqual(state.key(), "k")
        self.assertEqual(state.get_int("n"), 3)
        self.assertEqual(state.get_float("n"), 3.0)
        self.assertIsNone(state.get_int("x"))
        self.assertIsNone(state.get_int("b"))
        self.assertEqual(state.get_float("x"), 1.5)
        self.assertIsNone(state.get_float("b"))
        self.assertEqual(state.get_text("t"), "hi")
        self.assertIsNone(state.get_text("n"))
        self.assertIsNone(state.get("missing"))
        state.remove("n")
        self.assertIsNone(state.get("n"))

    def test_defaults_apply_to_missing_values_only(self) -> None:
        state = MemoryState("k").state()
        state.put("null", None)
        state.put("t", "hi")
        self.assertEqual(state.get("missing", 0), 0)
        self.assertIsNone(state.get("null", 0))
        self.assertEqual(state.get_int("t", 7), 7)
        self.assertEqual(state.get_float("missing", 0.5), 0.5)
        self.assertEqual(state.get_text("missing", "x"), "x")
        self.assertEqual(state.map_get("m", "e", "d"), "d")

    def test_add_int_starts_from_zero_and_saturates(self) -> None:
        state = MemoryState("k").state()
        self.assertEqual(state.add_int("count", 2), 2)
        self.assertEqual(state.add_int("count", 3), 5)
        state.put("big", I64_MAX)
        self.assertEqual(state.add_int("big", 1), I64_MAX)
        state.put("small", I64_MIN)
        self.assertEqual(state.add_int("small", -1), I64_MIN)
        state.put("text", "x")
        self.assertEqual(state.add_int("text", 4), 4)

    def test_add_int_takes_ints_of_64_bits_only(self) -> None:
        state = MemoryState("k").state()
        with self.assertRaises(TypeError):
            state.add_int("count", 1.5)  # type: ignore[arg-type]
        with self.assertRaises(OverflowError):
            state.add_int("count", 2**64)
        self.assertIsNone(state.get("count"))

    def test_puts_are_checked(self) -> None:
        state = MemoryState("k").state()
        with self.assertRaisesRegex(OverflowError, "does not fit"):
            state.put("n", 2**63)
        with self.assertRaisesRegex(TypeError, "list is not a Weir value"):
            state.put("n", [1])  # type: ignore[arg-type]
        with self.assertRaises(OverflowError):
            state.map_put("m", "e", -(2**63) - 1)

    def test_maps_hold_sorted_entries(self) -> None:
        memory = MemoryState("k")
        state = memory.state()
        state.map_put("m", "b", 2)
        state.map_put("m", "a", None)
        state.map_put("other", "z", True)
        self.assertEqual(state.map_len("m"), 2)
        self.assertEqual(state.map_entries("m"), ["a", "b"])
        self.assertEqual(state.map_get("m", "b"), 2)
        state.map_remove("m", "a")
        self.assertEqual(state.map_entries("m"), ["b"])
        state.map_remove("m", "b")
        self.assertNotIn("m", memory.maps)
        self.assertEqual(state.map_len("none"), 0)
        self.assertEqual(state.map_entries("none"), [])


if __name__ == "__main__":
    unittest.main()

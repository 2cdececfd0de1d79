"""Tests of `weir_sdk.values`: checking, reading and adding values."""

import enum
import unittest

from weir_sdk.values import (
    I64_MAX,
    I64_MIN,
    as_float,
    as_int,
    as_text,
    check,
    is_number,
    plus,
    plus_all,
    to_text,
)


class CheckTest(unittest.TestCase):
    def test_plain_values_pass_unchanged(self) -> None:
        for value in [None, True, 0, I64_MIN, I64_MAX, 1.5, "text", b"\x00\xff"]:
            self.assertIs(check(value), value)

    def test_subclasses_become_their_base_kind(self) -> None:
        class Level(enum.IntEnum):
            HIGH = 3

        self.assertIs(type(check(Level.HIGH)), int)
        self.assertEqual(check(bytearray(b"ab")), b"ab")
        self.assertEqual(check(memoryview(b"ab")), b"ab")

    def test_ints_beyond_64_bits_and_other_types_raise(self) -> None:
        for big in [I64_MAX + 1, I64_MIN - 1, 2**100]:
            with self.assertRaisesRegex(OverflowError, "does not fit in a Weir int"):
                check(big)
        for other in [[1], {"a": 1}, object(), 1j]:
            with self.assertRaisesRegex(TypeError, "is not a Weir value"):
                check(other)


class ReadTest(unittest.TestCase):
    def test_reads_only_match_their_kind(self) -> None:
        self.assertEqual(as_int(3), 3)
        self.assertIsNone(as_int(True))
        self.assertIsNone(as_int(3.0))
        self.assertEqual(as_float(3), 3.0)
        self.assertIs(type(as_float(3)), float)
        self.assertIsNone(as_float(False))
        self.assertIsNone(as_float("3"))
        self.assertEqual(as_text("a"), "a")
        self.assertIsNone(as_text(b"a"))
        self.assertTrue(is_number(1) and is_number(1.0))
        self.assertFalse(is_number(True) or is_number(None))

    def test_to_text_names_like_the_host(self) -> None:
        self.assertEqual(to_text(42), "42")
        self.assertEqual(to_text("42"), "42")
        for other in [4.2, True, None, b"42"]:
            self.assertIsNone(to_text(other))


class PlusTest(unittest.TestCase):
    def test_plus_is_int_while_it_fits(self) -> None:
        self.assertEqual(plus(2, 3), 5)
        self.assertIs(type(plus(2, 3)), int)
        self.assertEqual(plus(2, 0.5), 2.5)
        self.assertEqual(plus(I64_MAX, 1), float(I64_MAX) + 1.0)
        self.assertIs(type(plus(I64_MAX, 1)), float)
        self.assertEqual(plus(I64_MIN, -1), float(I64_MIN) - 1.0)
        for other in [None, "3", True, b"3"]:
            self.assertIsNone(plus(2, other))
            self.assertIsNone(plus(other, 2))

    def test_plus_all_is_a_loop_of_plus(self) -> None:
        cases = [
            (0, []),
            ("x", []),
            (0, [1, 2, 3, 4, 5]),
            (0, [1, 2, 0.5, 3, 4]),
            (0.5, [1, 2, 3, 4, I64_MAX]),
            (0, [I64_MAX, 1, -1, -2, 5]),
            (I64_MAX, [1, 1, 1, 1]),
            (0, [0.1] * 10),
            (0, [1, 2, None, 4, 5]),
            (0, [1, 2, "3", 4, 5]),
            (0, [1, 2, True, 4]),
            ("0", [1, 2, 3, 4]),
            (None, [1]),
            (1.5, [1e300, -1e300, 1e-300, 3, 4]),
        ]
        for start, values in cases:
            expected = start
            for value in values:
                expected = plus(expected, value) if expected is not None else None
            actual = plus_all(start, values)
            self.assertEqual(repr(actual), repr(expected), (start, values))
            self.assertIs(type(actual), type(expected), (start, values))

    def test_plus_all_adds_floats_in_order(self) -> None:
        values = [1e16, 1.0, -1e16, 1.0, 1.0]
        self.assertEqual(plus_all(0.0, values), (((1e16 + 1.0) - 1e16) + 1.0) + 1.0)

    def test_plus_all_takes_any_iterable(self) -> None:
        self.assertEqual(plus_all(1, iter([1, 2, 3, 4, 5])), 16)


if __name__ == "__main__":
    unittest.main()

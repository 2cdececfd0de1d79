"""Tests of `Events`, `OutputEvents` and `Window`."""

import unittest

from weir_sdk import Event, Events, OutputEvent, OutputEvents, Window


class EventsTest(unittest.TestCase):
    def test_columns_values_and_padding(self) -> None:
        batch = Events.of(["a", "b"], [(1, [1, None]), (2, [2])])
        self.assertEqual(batch.column("b"), 1)
        self.assertIsNone(batch.column("c"))
        self.assertEqual(batch.values("b"), [None, None])
        self.assertEqual(batch.values("a"), [1, 2])
        self.assertEqual(batch.values("zzz"), [None, None])
        c = batch.add_column("c")
        self.assertEqual((c, batch.add_column("a")), (2, 0))
        batch.rows[1].set(c, "x")
        self.assertEqual(batch.rows[1].values, [2, None, "x"])
        self.assertEqual(batch.rows[1].get(c), "x")
        self.assertIsNone(batch.rows[1].get(1))
        self.assertIsNone(batch.rows[1].get(None))

    def test_a_batch_iterates_over_its_events(self) -> None:
        batch = Events(["id"]).with_row(1_000, ["a"]).with_row(2_000, ["b"])
        self.assertEqual(len(batch), 2)
        self.assertEqual(batch.timestamps(), [1_000, 2_000])
        self.assertEqual(list(batch), [Event(1_000, ["a"]), Event(2_000, ["b"])])
        self.assertFalse(Events(["id"]))

    def test_rows_are_checked_when_built(self) -> None:
        with self.assertRaises(OverflowError):
            Events(["n"]).with_row(1, [2**64])
        with self.assertRaises(TypeError):
            Events(["n"]).with_row(1.5, [1])  # type: ignore[arg-type]
        self.assertEqual(Events.of(["b"], [(1, [bytearray(b"x")])]).values("b"), [b"x"])

    def test_output_events_keep_their_origin(self) -> None:
        output = Events.of(["a"], [(5, [1]), (6, [2])]).into_output()
        output.push(OutputEvent(1, 7, [3]))
        self.assertEqual([(e.origin, e.timestamp) for e in output], [(0, 5), (1, 6), (1, 7)])
        self.assertEqual(output.values("a"), [1, 2, 3])
        output.retain(lambda event: event.timestamp > 5)
        self.assertEqual(len(output), 2)
        self.assertEqual(output.rows[0].origin, 1)

    def test_into_output_moves_the_events(self) -> None:
        batch = Events(["id"]).with_row(1_000, ["a"]).with_row(2_000, ["b"])
        output = batch.into_output()
        self.assertEqual(len(batch), 0)
        self.assertEqual(
            output,
            OutputEvents(["id"], [OutputEvent(0, 1_000, ["a"]), OutputEvent(1, 2_000, ["b"])]),
        )
        column = output.add_column("new")
        output.rows[0].set(column, 1)
        self.assertEqual(output.rows[0].values, ["a", 1])
        self.assertEqual(output.values("new"), [1, None])


class WindowTest(unittest.TestCase):
    def test_windows_are_half_open(self) -> None:
        window = Window(1_000, 2_000)
        self.assertEqual(window.duration_ms(), 1_000)
        self.assertTrue(window.contains(1_000))
        self.assertTrue(window.contains(1_999))
        self.assertFalse(window.contains(2_000))
        self.assertFalse(window.contains(999))

    def test_duration_saturates(self) -> None:
        self.assertEqual(Window(-(2**63), 2**63 - 1).duration_ms(), 2**63 - 1)


if __name__ == "__main__":
    unittest.main()

"""Tests of the exported adapters, over stand-ins for the componentize-py bindings."""

import gc
import unittest
import weakref
from collections.abc import Sequence
from typing import Any

from tests import fake_bindings as wit

wit.install()

import weir_sdk  # noqa: E402  (after the stand-ins, as in a component)
from weir_sdk import Events, OperatorError, OutputEvents, State, Window  # noqa: E402


class Hoard:
    """Something a failed call held, to see it freed."""


class Sum(weir_sdk.Aggregate):
    """Sums `amount`; raises on demand through the `action` field."""

    def add(self, state: State, batch: Events) -> None:
        actions = batch.values("action")
        if "fail" in actions:
            raise OperatorError("explicit failure")
        if "raise" in actions:
            raise ValueError("boom")
        if "hoard" in actions:
            hoard = Hoard()
            self.hoarded = weakref.ref(hoard)
            raise MemoryError()
        if "wit" in actions:
            raise wit.Err("straight through")
        state.put("sum", weir_sdk.plus_all(state.get("sum", 0), batch.values("amount")))

    def merge(self, target: State, source: State) -> None:
        target.put("sum", weir_sdk.plus(target.get("sum", 0), source.get("sum", 0)))

    def finish(self, state: State, window: Window) -> weir_sdk.Output:
        if state.key() == "bad":
            return [("sum", 1)]  # type: ignore[return-value]
        if state.key() == "huge":
            return {"sum": 2**64}
        return {"window": window.duration_ms(), "sum": state.get("sum", 0), "none": None}


def batch(*rows: list[Any], fields: Sequence[str] = ("amount", "action")) -> Any:
    """A host batch: WIT events whose values are WIT values."""
    return wit.Events(list(fields), [wit.Event(1_000 + i, list(row)) for i, row in enumerate(rows)])


def amounts(*values: Any) -> Any:
    return batch(*[[value, wit.Value_Null()] for value in values])


def action(name: str) -> Any:
    return batch([wit.Value_Int(1), wit.Value_Text(name)])


class AggregateExportTest(unittest.TestCase):
    def setUp(self) -> None:
        self.export = weir_sdk.export_aggregate(Sum)()

    def test_state_and_output_are_wit_values(self) -> None:
        scope = wit.FakeScope("k")
        self.export.add(scope, amounts(wit.Value_Int(2), wit.Value_Int(3)))
        self.assertEqual(scope.values, {"sum": wit.Value_Int(5)})
        self.assertEqual(scope.calls, [("get", "sum"), ("put", "sum")])
        self.export.add(scope, amounts(wit.Value_Float(0.5)))
        fields = self.export.finish(scope, wit.Window(0, 60_000))
        self.assertEqual(
            fields,
            [
                wit.Field("window", wit.Value_Int(60_000)),
                wit.Field("sum", wit.Value_Float(5.5)),
                wit.Field("none", wit.Value_Null()),
            ],
        )

    def test_merge_reads_both_scopes(self) -> None:
        target, source = wit.FakeScope("k"), wit.FakeScope("k")
        source.values["sum"] = wit.Value_Int(4)
        self.export.merge(target, source)
        self.assertEqual(target.values["sum"], wit.Value_Int(4))
        self.export.migrate(target, "0.9.0")  # the default does nothing

    def test_an_operator_error_is_its_message(self) -> None:
        with self.assertRaises(wit.Err) as raised:
            self.export.add(wit.FakeScope("k"), action("fail"))
        self.assertEqual(raised.exception.value, "explicit failure")

    def test_any_exception_names_its_type_and_place(self) -> None:
        with self.assertRaises(wit.Err) as raised:
            self.export.add(wit.FakeScope("k"), action("raise"))
        self.assertRegex(
            raised.exception.value, r"^ValueError: boom \(at test_export\.py, line \d+, in add\)$"
        )

    def test_a_wit_error_passes_through(self) -> None:
        with self.assertRaises(wit.Err) as raised:
            self.export.add(wit.FakeScope("k"), action("wit"))
        self.assertEqual(raised.exception.value, "straight through")

    def test_what_a_failed_call_held_is_freed(self) -> None:
        operator = Sum()
        export = weir_sdk.export_aggregate(operator)()
        with self.assertRaises(wit.Err) as raised:
            export.add(wit.FakeScope("k"), action("hoard"))
        self.assertRegex(
            raised.exception.value, r"^MemoryError \(at test_export\.py, line \d+, in add\)$"
        )
        gc.collect()
        self.assertIsNone(operator.hoarded())

    def test_bad_output_is_an_error_not_a_trap(self) -> None:
        with self.assertRaises(wit.Err) as raised:
            self.export.finish(wit.FakeScope("bad"), wit.Window(0, 1))
        self.assertIn("TypeError: finish must return a dict", raised.exception.value)
        with self.assertRaises(wit.Err) as raised:
            self.export.finish(wit.FakeScope("huge"), wit.Window(0, 1))
        self.assertIn(
            "OverflowError: int 18446744073709551616 does not fit", raised.exception.value
        )

    def test_only_operators_are_exported(self) -> None:
        with self.assertRaisesRegex(TypeError, "is not a weir_sdk.Aggregate"):
            weir_sdk.export_aggregate(object)  # type: ignore[arg-type]


class HostBatchTest(unittest.TestCase):
    def test_host_values_read_as_native_values(self) -> None:
        values = [
            wit.Value_Null(),
            wit.Value_Boolean(True),
            wit.Value_Int(-3),
            wit.Value_Float(0.25),
            wit.Value_Text("t"),
            wit.Value_Bytes(b"b"),
        ]
        fields = ["n", "b", "i", "f", "t", "y"]
        host = batch(values, values[:2], fields=fields)  # the second row is short
        events = Events._from_host(host.fields, host.rows)
        self.assertEqual(events.values("i"), [-3, None])
        self.assertEqual(events.values("b"), [True, True])
        self.assertEqual(events.values("missing"), [None, None])
        self.assertEqual(events.timestamps(), [1_000, 1_001])
        self.assertEqual(events.rows[0].values, [None, True, -3, 0.25, "t", b"b"])


class Tag(weir_sdk.Enrich):
    """Tags each event with the key's reference `tier`, drops `drop` events."""

    def process(self, state: State, batch: Events) -> OutputEvents:
        if batch.fields == ["pass"]:
            return batch  # type: ignore[return-value]
        tier = state.map_get("reference", "tier", "none")
        output = batch.into_output()
        column = output.add_column("tier")
        output.retain(lambda event: event.get(0) != "drop")
        for event in output:
            event.set(column, tier)
            if event.get(0) == "bad-origin":
                event.origin = 7
        return output


class EnrichExportTest(unittest.TestCase):
    def setUp(self) -> None:
        self.export = weir_sdk.export_enrich(Tag)()

    def test_output_is_wit_output_events(self) -> None:
        scope = wit.FakeScope("c1")
        scope.map_put("reference", "tier", wit.Value_Text("gold"))
        host = batch([wit.Value_Text("keep")], [wit.Value_Text("drop")], fields=["id"])
        output = self.export.process(scope, host)
        self.assertEqual(
            output,
            wit.OutputEvents(
                ["id", "tier"],
                [wit.OutputEvent(0, 1_000, [wit.Value_Text("keep"), wit.Value_Text("gold")])],
            ),
        )

    def test_a_batch_passes_through(self) -> None:
        host = batch([wit.Value_Int(1)], fields=["pass"])
        output = self.export.process(wit.FakeScope("c1"), host)
        self.assertEqual(output.rows, [wit.OutputEvent(0, 1_000, [wit.Value_Int(1)])])

    def test_origins_must_index_the_batch(self) -> None:
        host = batch([wit.Value_Text("bad-origin")], fields=["id"])
        with self.assertRaises(wit.Err) as raised:
            self.export.process(wit.FakeScope("c1"), host)
        self.assertIn("ValueError: origin 7 is not the index of a row", raised.exception.value)


if __name__ == "__main__":
    unittest.main()

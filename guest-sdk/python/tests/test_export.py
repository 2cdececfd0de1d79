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
    """A host batch as contract 0.2 sends it: WIT values field after field."""
    values = [row[field] for field in range(len(fields)) for row in rows]
    return wit.ColumnEvents(list(fields), [1_000 + i for i in range(len(rows))], values)


def amounts(*values: Any) -> Any:
    return batch(*[[value, wit.Value_Null()] for value in values])


def action(name: str) -> Any:
    return batch([wit.Value_Int(1), wit.Value_Text(name)])


class AggregateExportTest(unittest.TestCase):
    def setUp(self) -> None:
        self.export = weir_sdk.export_aggregate(Sum)()

    def test_state_and_output_are_wit_values(self) -> None:
        scope = wit.FakeScope("k")
        changes = self.export.add(scope, [], amounts(wit.Value_Int(2), wit.Value_Int(3)))
        self.assertEqual(changes, [wit.Change("sum", wit.Value_Int(5))])
        self.assertEqual(scope.calls, [], "named values cross with the call, not through it")
        named = [wit.Field("sum", wit.Value_Int(5))]
        changes = self.export.add(scope, named, amounts(wit.Value_Float(0.5)))
        self.assertEqual(changes, [wit.Change("sum", wit.Value_Float(5.5))])
        scope.values["sum"] = wit.Value_Float(5.5)  # as the host applies the changes
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
            self.export.add(wit.FakeScope("k"), [], action("fail"))
        self.assertEqual(raised.exception.value, "explicit failure")

    def test_any_exception_names_its_type_and_place(self) -> None:
        with self.assertRaises(wit.Err) as raised:
            self.export.add(wit.FakeScope("k"), [], action("raise"))
        self.assertRegex(
            raised.exception.value, r"^ValueError: boom \(at test_export\.py, line \d+, in add\)$"
        )

    def test_a_wit_error_passes_through(self) -> None:
        with self.assertRaises(wit.Err) as raised:
            self.export.add(wit.FakeScope("k"), [], action("wit"))
        self.assertEqual(raised.exception.value, "straight through")

    def test_what_a_failed_call_held_is_freed(self) -> None:
        operator = Sum()
        export = weir_sdk.export_aggregate(operator)()
        with self.assertRaises(wit.Err) as raised:
            export.add(wit.FakeScope("k"), [], action("hoard"))
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


class Distinct(weir_sdk.Aggregate):
    """Counts distinct `user`s in a map; `seen` counts events in a named value."""

    def add(self, state: State, batch: Events) -> None:
        state.add_int("seen", len(batch))
        for user in batch.values("user"):
            state.map_put("users", str(user), True)

    def merge(self, target: State, source: State) -> None:
        pass

    def finish(self, state: State, window: Window) -> weir_sdk.Output:
        return {"users": state.map_len("users"), "seen": state.get_int("seen", 0)}


class Count(weir_sdk.Aggregate):
    """Counts events; refuses a batch holding the amount 13; outputs under a new name."""

    def add(self, state: State, batch: Events) -> None:
        if 13 in batch.values("amount"):
            raise OperatorError("unlucky")
        state.add_int("count", len(batch))
        state.put("last", batch.values("amount")[-1])
        state.remove("gone")

    def merge(self, target: State, source: State) -> None:
        pass

    def finish(self, state: State, window: Window) -> weir_sdk.Output:
        if state.get_int("count") == 0:
            raise OperatorError("nothing counted")
        return {"count": state.get_int("count", 0), "width": window.duration_ms()}


def windows_call(*windows: tuple[dict[str, Any], list[tuple[int, Any]]]) -> Any:
    """An `add-windows` input: per window its named values and its `amount` column, as a
    kind and its values."""
    names = sorted({"amount", *(name for named, _ in windows for name in named)})
    call = wit.WindowBatches(names, [], [], [], [], [], [], [], [])
    for named, column in windows:
        call.counts.append(wit.WindowCounts(len(named), 1, len(column)))
        call.values += [wit.Named(names.index(n), value) for n, value in named.items()]
        call.fields.append(names.index("amount"))
        call.timestamps += [time for time, _ in column]
        values = [value for _, value in column]
        if all(type(value) is int for value in values):
            call.kinds.append(wit.ColumnKind.INTS)
            call.ints += values
        elif all(type(value) is float for value in values):
            call.kinds.append(wit.ColumnKind.FLOATS)
            call.floats += values
        else:
            call.kinds.append(wit.ColumnKind.VALUES)
            call.columns += values
    return call


class WindowsExportTest(unittest.TestCase):
    """Contract 0.3: many windows per call, each answered as its own call would be."""

    def setUp(self) -> None:
        self.windows = weir_sdk.export_aggregate(Count).Windows()

    def test_the_calling_module_gets_windows_beside_aggregate(self) -> None:
        module: dict[str, Any] = {"weir_sdk": weir_sdk, "Count": Count}
        exec("Aggregate = weir_sdk.export_aggregate(Count)", module)
        self.assertIs(module["Windows"], module["Aggregate"].Windows)
        exec("Aggregate = weir_sdk.export_aggregate(Count)", module)  # again: replaced
        self.assertIs(module["Windows"], module["Aggregate"].Windows)
        module["Windows"] = object
        with self.assertRaisesRegex(TypeError, "rename the module's own `Windows`"):
            exec("Aggregate = weir_sdk.export_aggregate(Count)", module)

    def test_a_name_that_is_not_text_fails_the_window_not_the_call(self) -> None:
        class Bad(Count):
            def add(self, state: State, batch: Events) -> None:
                state.remove(5)  # type: ignore[arg-type]

        added = weir_sdk.export_aggregate(Bad).Windows().add_windows(windows_call(({}, [(1, 1)])))
        self.assertEqual(added.outcomes, [wit.Outcome.FAILED])
        self.assertEqual(added.changes, [])

    def test_each_window_is_added_as_its_own_call(self) -> None:
        five = {"count": wit.Value_Int(5), "gone": wit.Value_Null()}
        added = self.windows.add_windows(
            windows_call(
                (five, [(1, 7), (2, 8)]),
                ({}, [(3, 0.5)]),
                ({}, [(4, 1), (5, 13)]),
                ({}, [(6, wit.Value_Text("t")), (7, wit.Value_Null())]),
            )
        )
        done, failed = wit.Outcome.DONE, wit.Outcome.FAILED
        self.assertEqual(added.outcomes, [done, done, failed, done])
        self.assertEqual(added.change_counts, [3, 3, 0, 3])
        names = ["amount", "count", "gone"] + added.new_names
        changes = [(names[c.name], c.value) for c in added.changes]
        self.assertEqual(added.new_names, ["last"])
        self.assertEqual(
            changes,
            [
                ("count", wit.Value_Int(7)),
                ("gone", None),
                ("last", wit.Value_Int(8)),
                ("count", wit.Value_Int(1)),
                ("gone", None),
                ("last", wit.Value_Float(0.5)),
                ("count", wit.Value_Int(2)),
                ("gone", None),
                ("last", wit.Value_Null()),
            ],
        )

    def test_a_window_asking_for_a_map_or_the_key_needs_its_scope(self) -> None:
        windows = weir_sdk.export_aggregate(Distinct).Windows()
        added = windows.add_windows(windows_call(({}, [(1, 1)])))
        self.assertEqual(added.outcomes, [wit.Outcome.NEEDS_SCOPE])
        self.assertEqual((added.change_counts, added.changes), ([0], []))
        states = wit.WindowStates([], [0], [], [wit.Window(0, 10)])
        finished = windows.finish_windows(states)
        self.assertEqual(finished.outcomes, [wit.Outcome.NEEDS_SCOPE])
        # With its scope (0.2's `add`), the same window's maps go to the host.
        scope = wit.FakeScope("k")
        aggregate = weir_sdk.export_aggregate(Distinct)()
        changes = aggregate.add(scope, [], batch([wit.Value_Text("u1")], fields=["user"]))
        self.assertEqual(changes, [wit.Change("seen", wit.Value_Int(1))])
        self.assertEqual(scope.maps, {"users": {"u1": wit.Value_Boolean(True)}})

    def test_each_window_is_finished_as_its_own_call(self) -> None:
        states = wit.WindowStates(
            ["count"],
            [1, 1, 0],
            [wit.Named(0, wit.Value_Int(4)), wit.Named(0, wit.Value_Int(0))],
            [wit.Window(0, 10), wit.Window(0, 20), wit.Window(0, 30)],
        )
        finished = self.windows.finish_windows(states)
        done, failed = wit.Outcome.DONE, wit.Outcome.FAILED
        self.assertEqual(finished.outcomes, [done, failed, done])
        self.assertEqual(finished.field_counts, [2, 0, 2])
        self.assertEqual(finished.new_names, ["width"])
        self.assertEqual(
            [(f.name, f.value) for f in finished.fields],
            [(0, wit.Value_Int(4)), (1, wit.Value_Int(10)), (0, wit.Value_Int(0)), (1, wit.Value_Int(30))],
        )


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
        # Every kind of value; the second event's last four fields are nulls.
        nulls = [wit.Value_Null()] * 4
        host = batch(values, values[:2] + nulls, fields=fields)
        events = weir_sdk.export._host_columns(host)
        self.assertEqual(events.values("i"), [-3, None])
        self.assertEqual(events.values("b"), [True, True])
        self.assertEqual(events.values("missing"), [None, None])
        self.assertEqual(events.timestamps(), [1_000, 1_001])
        self.assertEqual(events.rows[0].values, [None, True, -3, 0.25, "t", b"b"])

    def test_host_columns_read_as_native_values(self) -> None:
        host = batch([wit.Value_Int(1), wit.Value_Text("a")], [wit.Value_Float(0.5), wit.Value_Int(9)])
        host.values.pop()  # a short list: the last value is null
        events = weir_sdk.export._host_columns(host)
        self.assertEqual(len(events), 2)
        amounts = events.values("amount")
        amounts.append("mine")  # a copy
        self.assertEqual(events.values("amount"), [1, 0.5])
        self.assertEqual(events.values("action"), ["a", None])
        self.assertEqual(events.values("missing"), [None, None])
        self.assertEqual(events.add_column("new"), 2)
        self.assertEqual(events.values("new"), [None, None])
        self.assertEqual(events.timestamps(), [1_000, 1_001])
        self.assertEqual([row.values for row in events], [[1, "a"], [0.5, None]])
        self.assertEqual(events.values("amount"), [1, 0.5], "rows made, same values")


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

    def test_a_batch_is_read_field_after_field_and_short_lists_as_nulls(self) -> None:
        seen: list[tuple[int, list[Any]]] = []

        class Record(weir_sdk.Enrich):
            def process(self, state: State, batch: Events) -> OutputEvents:
                seen.extend((event.timestamp, list(event.values)) for event in batch)
                return batch  # type: ignore[return-value]

        export = weir_sdk.export_enrich(Record)()
        host = batch(
            [wit.Value_Int(1), wit.Value_Text("x")],
            [wit.Value_Float(2.5), wit.Value_Null()],
            [wit.Value_Null(), wit.Value_Text("z")],
            fields=["a", "b"],
        )
        output = export.process(wit.FakeScope("k"), host)
        self.assertEqual(seen, [(1_000, [1, "x"]), (1_001, [2.5, None]), (1_002, [None, "z"])])
        self.assertEqual([row.origin for row in output.rows], [0, 1, 2])
        self.assertEqual(
            [row.values for row in output.rows],
            [
                [wit.Value_Int(1), wit.Value_Text("x")],
                [wit.Value_Float(2.5), wit.Value_Null()],
                [wit.Value_Null(), wit.Value_Text("z")],
            ],
        )
        # A crafted batch whose values stop short: the missing ones are nulls.
        seen.clear()
        export.process(wit.FakeScope("k"), wit.ColumnEvents(["a", "b"], [5, 6], [wit.Value_Int(7)]))
        self.assertEqual(seen, [(5, [7, None]), (6, [None, None])])

    def test_origins_must_index_the_batch(self) -> None:
        host = batch([wit.Value_Text("bad-origin")], fields=["id"])
        with self.assertRaises(wit.Err) as raised:
            self.export.process(wit.FakeScope("c1"), host)
        self.assertIn("ValueError: origin 7 is not the index of a row", raised.exception.value)


if __name__ == "__main__":
    unittest.main()

"""Unit tests of the customer enricher, with plain CPython: ``python3 -m unittest`` in
this directory, with ``weir_sdk`` importable (in the Weir repository,
``PYTHONPATH=../../../guest-sdk/python``)."""

import unittest

from app import EnrichCustomers
from weir_sdk import Events
from weir_sdk.testing import MemoryState

OPERATOR = EnrichCustomers()


def orders(ids: list[str]) -> Events:
    """A batch of customer c1's orders with these ids, at times 1, 2, …"""
    rows = [(time, ["c1", id]) for time, id in enumerate(ids, start=1)]
    return Events.of(["customer_id", "order_id"], rows)


class EnrichCustomersTest(unittest.TestCase):
    def test_adds_reference_fields_and_drops_duplicate_orders(self) -> None:
        memory = MemoryState("c1")
        memory.map_put("reference", "name", "Ada")
        memory.map_put("reference", "tier", "gold")
        output = OPERATOR.process(memory.state(), orders(["o1", "o2", "o1"]))
        self.assertEqual(output.fields, ["customer_id", "order_id", "customer_name", "tier"])
        self.assertEqual([row.origin for row in output.rows], [0, 1])
        self.assertEqual(output.rows[1].values, ["c1", "o2", "Ada", "gold"])

        # A later batch of the same customer repeats o2: dropped as well.
        output = OPERATOR.process(memory.state(), orders(["o2", "o3"]))
        self.assertEqual(len(output), 1)
        self.assertEqual(output.rows[0].origin, 1)

    def test_unknown_customers_get_defaults_and_events_without_order_id_pass(self) -> None:
        memory = MemoryState("c9")
        batch = Events(["customer_id"]).with_row(1, ["c9"]).with_row(2, ["c9"])
        output = OPERATOR.process(memory.state(), batch)
        self.assertEqual(len(output), 2)
        self.assertEqual(output.rows[0].values, ["c9", "unknown", "none"])

    def test_int_order_ids_count_as_their_decimal_text(self) -> None:
        memory = MemoryState("c1")
        batch = Events.of(["order_id"], [(1, [7]), (2, ["7"]), (3, [True]), (4, [True])])
        output = OPERATOR.process(memory.state(), batch)
        self.assertEqual([row.origin for row in output.rows], [0, 2, 3])
        self.assertEqual(memory.map_entries("seen_orders"), ["7"])


if __name__ == "__main__":
    unittest.main()

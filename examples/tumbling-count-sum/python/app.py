"""Counts events and sums their `amount` per key and tumbling window: the Python twin of
`examples/tumbling-count-sum/src/lib.rs`, with the same results.

Build the component and run the sample pipeline from the workspace root (``weir build
examples/tumbling-count-sum/python`` runs the same componentize-py command)::

    componentize-py -d wit/v0.3 -w aggregator componentize -p guest-sdk/python \
        -p examples/tumbling-count-sum/python app \
        -o target/weir-components/tumbling-count-sum-python.wasm
    target/debug/weir run examples/tumbling-count-sum/python/pipeline.toml

Each window's output has `count` (int) and `sum`: an int while every `amount` was an int, a
float once any was a float (or an int sum left 64 bits). An event lacking a numeric `amount`
goes to the dead-letter output (its batch is refused, and the host retries the events one at a
time).
"""

import weir_sdk
from weir_sdk import Events, OperatorError, Output, State, Window, plus, plus_all

NOT_NUMERIC = "event without a numeric `amount` field"


class CountSum(weir_sdk.Aggregate):
    """The count-and-sum aggregate."""

    def add(self, state: State, batch: Events) -> None:
        total = plus_all(state.get("sum", 0), batch.values("amount"))
        if total is None:
            raise OperatorError(NOT_NUMERIC)
        state.add_int("count", len(batch))
        state.put("sum", total)

    def merge(self, target: State, source: State) -> None:
        count, total = source.get_int("count"), source.get("sum")
        if count is None or total is None:
            return  # an empty source
        merged = plus(target.get("sum", 0), total)
        if merged is None:
            raise OperatorError("state `sum` is not a number")
        target.put("sum", merged)
        target.add_int("count", count)

    def finish(self, state: State, window: Window) -> Output:
        return {"count": state.get_int("count", 0), "sum": state.get("sum", 0)}


Aggregate = weir_sdk.export_aggregate(CountSum)

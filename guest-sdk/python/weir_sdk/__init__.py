"""Write Weir stream operators in Python and build them as WebAssembly components with
componentize-py.

A complete aggregate operator, a count per key and window::

    import weir_sdk
    from weir_sdk import Events, State, Window


    class Count(weir_sdk.Aggregate):
        def add(self, state: State, batch: Events) -> None:
            state.add_int("count", len(batch))

        def merge(self, target: State, source: State) -> None:
            target.add_int("count", source.get_int("count", 0))

        def finish(self, state: State, window: Window) -> weir_sdk.Output:
            return {"count": state.get_int("count", 0)}


    Aggregate = weir_sdk.export_aggregate(Count)

Build it (module ``app.py``) with::

    componentize-py -d wit/v0.3 -w aggregator componentize -p guest-sdk/python -p . app -o app.wasm

Values are native Python values: ``None``, ``bool``, ``int`` (64 bits), ``float``, ``str`` and
``bytes`` (see `weir_sdk.values`). Any exception `add` or `process` raises refuses the call's
batch (nothing the call wrote is kept); the host retries the batch's events one at a time and
sends each event refused alone to the dead-letter output with its own call's error:
`OperatorError` with exactly its message, any other with its type, message and the place it
was raised. `weir_sdk.testing.MemoryState` runs operators without a host.
"""

from .events import Event, Events, OutputEvent, OutputEvents, Window
from .export import describe, export_aggregate, export_enrich
from .operator import Aggregate, Enrich, OperatorError, Output
from .state import State
from .values import (
    I64_MAX,
    I64_MIN,
    Value,
    as_float,
    as_int,
    as_text,
    check,
    is_number,
    plus,
    plus_all,
    to_text,
)

__all__ = [
    "Aggregate",
    "Enrich",
    "Event",
    "Events",
    "I64_MAX",
    "I64_MIN",
    "OperatorError",
    "Output",
    "OutputEvent",
    "OutputEvents",
    "State",
    "Value",
    "Window",
    "as_float",
    "as_int",
    "as_text",
    "check",
    "describe",
    "export_aggregate",
    "export_enrich",
    "is_number",
    "plus",
    "plus_all",
    "to_text",
]

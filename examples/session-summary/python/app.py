"""Summarises each session of a key: its event count, first and last event time. The Python
twin of `examples/session-summary/src/lib.rs`, with the same results.

Build the component and run the sample pipeline from the workspace root (``weir build
examples/session-summary/python`` runs the same componentize-py command)::

    componentize-py -d wit/v0.3 -w aggregator componentize -p guest-sdk/python \
        -p examples/session-summary/python app \
        -o target/weir-components/session-summary-python.wasm
    target/debug/weir run examples/session-summary/python/pipeline.toml

Each session's output has `events`, `first` and `last` (event times, ms since the epoch) and
`duration_ms` (`last - first`), all ints. When sessions merge, their summaries combine.
"""

import weir_sdk
from weir_sdk import Events, Output, State, Window


class SessionSummary(weir_sdk.Aggregate):
    """The session-summary aggregate."""

    def add(self, state: State, batch: Events) -> None:
        times = batch.timestamps()
        combine(state, len(batch), min(times, default=None), max(times, default=None))

    def merge(self, target: State, source: State) -> None:
        events = source.get_int("events", 0)
        combine(target, events, source.get_int("first"), source.get_int("last"))

    def finish(self, state: State, window: Window) -> Output:
        first = state.get_int("first", window.start)
        last = state.get_int("last", first)
        return {
            "events": state.get_int("events", 0),
            "first": first,
            "last": last,
            "duration_ms": last - first,
        }


def combine(state: State, events: int, first: int | None, last: int | None) -> None:
    """Adds `events` events spanning `first..=last` to the summary in `state`."""
    state.add_int("events", events)
    firsts = [time for time in (first, state.get_int("first")) if time is not None]
    if firsts:
        state.put("first", min(firsts))
    lasts = [time for time in (last, state.get_int("last")) if time is not None]
    if lasts:
        state.put("last", max(lasts))


Aggregate = weir_sdk.export_aggregate(SessionSummary)

"""Test fixture: a Python aggregator that misbehaves on demand, for the host's hostile-guest
tests. `add` looks at the batch's `action` field:

* ``"raise"``: raises ``ValueError("boom from python")`` (a dead letter with that message);
* ``"spin"``: loops forever, until the host's call deadline interrupts it;
* ``"hog"``: allocates 1 MiB blocks without bound, until the host's memory cap stops it;
* anything else (or no `action`): counts the events into `count`.

Build (from the workspace root)::

    componentize-py -d wit/v0.3 -w aggregator componentize -p guest-sdk/python \\
        -p tests/guests/py-hostile app -o target/weir-components/py-hostile.wasm
"""

import weir_sdk
from weir_sdk import Events, Output, State, Window


class Hostile(weir_sdk.Aggregate):
    """Counts events, unless an event asks for trouble."""

    def add(self, state: State, batch: Events) -> None:
        actions = set(batch.values("action"))
        if "raise" in actions:
            raise ValueError("boom from python")
        if "spin" in actions:
            spin()
        if "hog" in actions:
            hog()
        state.add_int("count", len(batch))

    def merge(self, target: State, source: State) -> None:
        target.add_int("count", source.get_int("count", 0))

    def finish(self, state: State, window: Window) -> Output:
        return {"count": state.get_int("count", 0)}


def spin() -> None:
    """Never returns."""
    while True:
        pass


def hog() -> None:
    """Keeps 1 MiB blocks of non-zero bytes, every page written, until allocation fails."""
    hoard: list[bytearray] = []
    while True:
        hoard.append(bytearray(b"\xa5" * (1 << 20)))


Aggregate = weir_sdk.export_aggregate(Hostile)

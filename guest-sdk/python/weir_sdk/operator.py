"""The operator base classes `Aggregate` and `Enrich`, and `OperatorError`."""

from __future__ import annotations

from abc import ABC, abstractmethod

from .events import Events, OutputEvents, Window
from .state import State
from .values import Value

#: The output record of a window: field names to values, in insertion order.
Output = dict[str, Value]


class OperatorError(Exception):
    """An error an operator raises on purpose: the call's batch is refused, the host retries
    its events one at a time, and each event refused alone goes to the dead-letter output with
    exactly its call's `message` as its reason (any other exception's reason names its type
    and where it was raised)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Aggregate(ABC):
    """A mergeable windowed aggregation: the logic of an ``aggregator`` component.

    Every call sees the `State` of one key and one window. Subclass it and export the class
    with ``Aggregate = weir_sdk.export_aggregate(MyOperator)`` in the component's module.

    If `add` raises, nothing the call wrote to the state is kept, and the host retries the
    batch's events one at a time, so that only the events the operator cannot take go to the
    dead-letter output, with the message.
    """

    @abstractmethod
    def add(self, state: State, batch: Events) -> None:
        """Adds a batch of events (of the state's key, in arrival order) to the window's
        state. An error changes no state (the host drops what the call wrote): the host
        retries the batch's events one at a time, so the events this refuses become dead
        letters with the message, and the others are added."""

    @abstractmethod
    def merge(self, target: State, source: State) -> None:
        """Folds the partial state `source` into `target`, as when two session windows merge.
        Leave `source` unchanged."""

    @abstractmethod
    def finish(self, state: State, window: Window) -> Output:
        """The output record of `window` from its state, as a dict of field names to values
        (kept in order). Must not change the state."""

    def migrate(self, state: State, from_version: str) -> None:
        """Converts state written by another version of this operator (`from_version`, as the
        pipeline names it) before this version first touches it. The default does nothing,
        which is right whenever the state layout did not change."""
        del state, from_version


class Enrich(ABC):
    """A per-key event transformer: the logic of an ``enricher`` component.

    Every call sees the `State` of one key, which also holds that key's reference data in the
    map ``reference`` (one entry per field of the key's reference row). Subclass it and export
    the class with ``Enrich = weir_sdk.export_enrich(MyOperator)``.
    """

    @abstractmethod
    def process(self, state: State, batch: Events) -> OutputEvents | Events:
        """Turns a batch of events of the state's key into zero or more events of the same
        key. Each output event names the input row it came from (`OutputEvent.origin`); start
        from `Events.into_output` to keep, drop, change or add fields one for one. Returning
        the batch itself passes it through unchanged."""

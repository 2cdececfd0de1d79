"""Batches of events (`Events`, `Event`), an enricher's output (`OutputEvents`,
`OutputEvent`) and windows (`Window`).

Values are native Python values (see `weir_sdk.values`). A batch handed over by the host is
held as its columns (one list of native values per field); rows are made only if asked for:
`Events.values` copies one field's column, the fast way through a batch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from .values import I64_MAX, I64_MIN, Value, check, check_int


def _column(fields: list[str], name: str) -> int | None:
    """The index of `name` in `fields`."""
    try:
        return fields.index(name)
    except ValueError:
        return None


def _add_column(fields: list[str], name: str) -> int:
    """The index of `name` in `fields`, appending it if absent."""
    column = _column(fields, name)
    if column is None:
        fields.append(name)
        column = len(fields) - 1
    return column


def _get(values: Sequence[Value], column: int | None) -> Value:
    """The value at `column` of `values`, ``None`` if null or missing."""
    if column is None or not 0 <= column < len(values):
        return None
    return values[column]


def _set(values: list[Value], column: int, value: Value) -> None:
    """Sets the value at `column` of `values`, padding with nulls."""
    if len(values) <= column:
        values.extend([None] * (column + 1 - len(values)))
    values[column] = check(value)


@dataclass(slots=True)
class Event:
    """One event: its event time (ms since the epoch) and its values, in the order of its
    batch's fields."""

    timestamp: int
    values: list[Value] = field(default_factory=list)

    def get(self, column: int | None) -> Value:
        """The value at index `column` (see `Events.column`); ``None`` if it is null or
        missing, or `column` is ``None``."""
        return _get(self.values, column)

    def set(self, column: int, value: Value) -> None:
        """Sets the value at index `column` (see `Events.add_column`), padding with nulls."""
        _set(self.values, column, value)


@dataclass(slots=True)
class OutputEvent:
    """One event of an enricher's output: the input row `origin` (an index into the input
    batch's rows) it came from, its event time and its values, in the order of its output's
    fields. The host judges its lateness by its origin's."""

    origin: int
    timestamp: int
    values: list[Value] = field(default_factory=list)

    def get(self, column: int | None) -> Value:
        """The value at index `column` (see `OutputEvents.column`); ``None`` if it is null or
        missing, or `column` is ``None``."""
        return _get(self.values, column)

    def set(self, column: int, value: Value) -> None:
        """Sets the value at index `column` (see `OutputEvents.add_column`), padding with
        nulls."""
        _set(self.values, column, value)


#: A row as tests may write it: ``(timestamp, values)``.
RowLike = Event | tuple[int, Iterable[Any]]


class Events:
    """A batch of events of one key, in arrival order, with the field names once.

    ``len(batch)`` is the number of events; iterating over the batch (or `rows`) gives
    `Event`\\ s with native values. Tests build batches with `Events.of` or `with_row`.
    """

    __slots__ = ("fields", "_rows", "_timestamps", "_columns")

    def __init__(self, fields: Iterable[str] = (), rows: Iterable[RowLike] = ()) -> None:
        self.fields: list[str] = list(fields)
        self._rows: list[Any] = []
        # While not None: the batch as the host sent it, one list of native values per field
        # (`_rows` is then made on first use).
        self._timestamps: list[int] | None = None
        self._columns: list[list[Value]] = []
        for row in rows:
            self._rows.append(row if isinstance(row, Event) else _event(*row))

    @classmethod
    def of(cls, fields: Iterable[str], rows: Iterable[RowLike]) -> Events:
        """A batch with the given fields and rows, each an `Event` or
        ``(timestamp, values)``: ``Events.of(["user", "amount"], [(1000, ["u1", 2])])``."""
        return cls(fields, rows)

    @classmethod
    def _from_columns(
        cls, fields: list[str], timestamps: list[int], columns: list[list[Value]]
    ) -> Events:
        """A batch over the host's columns: one list of native values per field, each as long
        as `timestamps` (`values` hands out a copy of one; rows are made when asked for)."""
        batch = object.__new__(cls)
        batch.fields, batch._rows = fields, []
        batch._timestamps, batch._columns = timestamps, columns
        return batch

    def with_row(self, timestamp: int, values: Iterable[Any]) -> Events:
        """This batch, with one more event at `timestamp` (ms since the epoch), its values in
        the order of `fields`. Handy in tests."""
        self.rows.append(_event(timestamp, values))
        return self

    @property
    def rows(self) -> list[Event]:
        """The events, with native values (converted on first access)."""
        if self._timestamps is not None:
            columns = self._columns
            self._rows = [
                Event(timestamp, [column[i] for column in columns])
                for i, timestamp in enumerate(self._timestamps)
            ]
            self._timestamps, self._columns = None, []
        return self._rows

    def __len__(self) -> int:
        timestamps = self._timestamps
        return len(self._rows) if timestamps is None else len(timestamps)

    def __iter__(self) -> Iterator[Event]:
        return iter(self.rows)

    def __repr__(self) -> str:
        return f"Events(fields={self.fields!r}, rows={self.rows!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Events):
            return NotImplemented
        return self.fields == other.fields and self.rows == other.rows

    def column(self, name: str) -> int | None:
        """The index of the field `name` in `fields`, for `Event.get`."""
        return _column(self.fields, name)

    def add_column(self, name: str) -> int:
        """The index of the field `name`, adding it (null in every event) if the batch lacks
        it."""
        return _add_column(self.fields, name)

    def values(self, name: str) -> list[Value]:
        """The value of the field `name` in each event, in order, as a new list: ``None``
        where it is null or missing (and for every event if the batch has no such field)."""
        rows = self._rows
        try:
            column = self.fields.index(name)
        except ValueError:
            return [None] * len(self)
        if self._timestamps is not None:
            columns = self._columns
            return list(columns[column]) if column < len(columns) else [None] * len(self)
        try:
            return [row.values[column] for row in rows]
        except IndexError:  # a row shorter than the fields
            return [_get(event.values, column) for event in self.rows]

    def timestamps(self) -> list[int]:
        """The event time of each event, in order."""
        if self._timestamps is not None:
            return list(self._timestamps)
        return [row.timestamp for row in self._rows]

    def into_output(self) -> OutputEvents:
        """The same events as an enricher's output, each with its row index as its `origin`:
        the start of a one-for-one transformation. Leaves this batch empty."""
        rows = [
            OutputEvent(origin, row.timestamp, row.values)
            for origin, row in enumerate(self.rows)  # made from the host's columns, if need be
        ]
        output = OutputEvents(self.fields, rows)
        self.fields, self._rows = [], []
        return output


class OutputEvents:
    """The events an enricher produces from one batch: field names once, and rows of
    `OutputEvent`. Its fields may differ from the input's."""

    __slots__ = ("fields", "rows")

    def __init__(self, fields: Iterable[str] = (), rows: Iterable[OutputEvent] = ()) -> None:
        self.fields: list[str] = list(fields)
        self.rows: list[OutputEvent] = list(rows)

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Iterator[OutputEvent]:
        return iter(self.rows)

    def __repr__(self) -> str:
        return f"OutputEvents(fields={self.fields!r}, rows={self.rows!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, OutputEvents):
            return NotImplemented
        return self.fields == other.fields and self.rows == other.rows

    def column(self, name: str) -> int | None:
        """The index of the field `name` in `fields`."""
        return _column(self.fields, name)

    def add_column(self, name: str) -> int:
        """The index of the field `name`, adding it (null in every event) if the output lacks
        it."""
        return _add_column(self.fields, name)

    def values(self, name: str) -> list[Value]:
        """The value of the field `name` in each event, in order: ``None`` where it is null
        or missing."""
        column = self.column(name)
        return [_get(row.values, column) for row in self.rows]

    def push(self, event: OutputEvent) -> None:
        """Appends an event."""
        self.rows.append(event)

    def retain(self, keep: Callable[[OutputEvent], bool]) -> None:
        """Keeps only the events for which `keep` (which may change them) returns true."""
        self.rows = [row for row in self.rows if keep(row)]


@dataclass(frozen=True, slots=True)
class Window:
    """A half-open event-time window ``[start, end)``, in ms since the epoch."""

    start: int
    end: int

    def duration_ms(self) -> int:
        """The window's length in milliseconds (saturating at the bounds of 64 bits)."""
        return min(max(self.end - self.start, I64_MIN), I64_MAX)

    def contains(self, timestamp: int) -> bool:
        """Whether `timestamp` lies in the window ``[start, end)``."""
        return self.start <= timestamp < self.end


def _event(timestamp: int, values: Iterable[Any]) -> Event:
    """An `Event` with checked values, for tests."""
    if type(timestamp) is not int:
        raise TypeError(f"an event time is an int (ms since the epoch), not {timestamp!r}")
    return Event(check_int(timestamp), [check(value) for value in values])

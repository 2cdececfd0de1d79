"""Exporting operators as components: the adapters between the WIT bindings that
componentize-py generates and the SDK's native types.

``Aggregate = export_aggregate(MyOperator)`` in the component's module gives componentize-py the
class it looks for. The bindings (``wit_world``, ``componentize_py_types``) are imported only
when the component is built or runs, so operators can be unit-tested with plain CPython.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from contextlib import suppress
from types import ModuleType, TracebackType
from typing import Any, Protocol

from .events import Events, OutputEvents, Window
from .operator import Aggregate, Enrich, OperatorError
from .state import State
from .values import I64_MAX, I64_MIN, Value, check, check_int

_U32_LIMIT = 1 << 32


class _Bindings:
    """The generated WIT types, loaded once, and the value converter built on them."""

    def __init__(self, types: ModuleType, err: type[BaseException]) -> None:
        self.types = types
        self.Err = err
        # Every WIT value then has `.value`, so a batch is read with one attribute access.
        types.Value_Null.value = None
        self.lower = _lowerer(types)

    def state(self, scope: _WitScope) -> State:
        """The `State` over a scope handed over by the host."""
        return State(self.scope(scope))

    def scope(self, scope: _WitScope) -> _HostScope:
        """A scope handed over by the host, with native values in and out."""
        return _HostScope(scope, self.lower)

    def aggregate(self) -> ModuleType:
        """The types of the exported `aggregate` interface (an aggregator's bindings only)."""
        from wit_world.exports import aggregate  # type: ignore[import-not-found]

        return aggregate  # type: ignore[no-any-return]

    def windows(self) -> ModuleType:
        """The types of the exported `windows` interface (an aggregator's bindings only)."""
        from wit_world.exports import windows  # type: ignore[import-not-found]

        return windows  # type: ignore[no-any-return]


def _lowerer(types: ModuleType) -> Callable[[object], Any]:
    """The function turning a native value into its WIT value (raising for non-values)."""
    new_int, new_float, new_text = types.Value_Int, types.Value_Float, types.Value_Text
    new_bool, new_bytes, null = types.Value_Boolean, types.Value_Bytes, types.Value_Null()

    def lower(value: Any) -> Any:
        kind = type(value)
        if kind is int:
            return new_int(value if I64_MIN <= value <= I64_MAX else check_int(value))
        if kind is float:
            return new_float(value)
        if kind is str:
            return new_text(value)
        if value is None:
            return null
        if kind is bool:
            return new_bool(value)
        if kind is bytes:
            return new_bytes(value)
        return lower(check(value))

    return lower


_bindings: _Bindings | None = None


def _load() -> _Bindings:
    """The generated bindings (importing them on first use)."""
    global _bindings
    if _bindings is None:
        from componentize_py_types import Err  # type: ignore[import-not-found]
        from wit_world.imports import types  # type: ignore[import-not-found]

        _bindings = _Bindings(types, Err)
    return _bindings


def _warm_up() -> None:
    """Loads the bindings now if they exist, so that a component imports them while it is
    built rather than on its first call. Without them (plain CPython) it does nothing."""
    with suppress(ImportError):
        _load()


class _WitScope(Protocol):
    """The host's `state.scope` resource, as componentize-py binds it (WIT values)."""

    def key(self) -> str: ...
    def get(self, name: str) -> Any: ...
    def put(self, name: str, value: Any) -> None: ...
    def remove(self, name: str) -> None: ...
    def map_get(self, name: str, entry: str) -> Any: ...
    def map_put(self, name: str, entry: str, value: Any) -> None: ...
    def map_remove(self, name: str, entry: str) -> None: ...
    def map_len(self, name: str) -> int: ...
    def map_entries(self, name: str) -> list[str]: ...


class _HostScope:
    """A `StateBackend` over a scope handed over by the host: native values in and out."""

    __slots__ = ("_scope", "_lower")

    def __init__(self, scope: _WitScope, lower: Callable[[object], Any]) -> None:
        self._scope = scope
        self._lower = lower

    def key(self) -> str:
        return self._scope.key()

    def get(self, name: str, default: object = None) -> object:
        value = self._scope.get(name)
        return default if value is None else value.value

    def put(self, name: str, value: object) -> None:
        self._scope.put(name, self._lower(value))

    def remove(self, name: str) -> None:
        self._scope.remove(name)

    def map_get(self, name: str, entry: str, default: object = None) -> object:
        value = self._scope.map_get(name, entry)
        return default if value is None else value.value

    def map_put(self, name: str, entry: str, value: object) -> None:
        self._scope.map_put(name, entry, self._lower(value))

    def map_remove(self, name: str, entry: str) -> None:
        self._scope.map_remove(name, entry)

    def map_len(self, name: str) -> int:
        return self._scope.map_len(name)

    def map_entries(self, name: str) -> list[str]:
        return self._scope.map_entries(name)


class _NamedValues:
    """A `StateBackend` over the named values the host sends with a call (contract 0.2's
    `add`, 0.3's calls carrying many windows): reads and writes stay in the guest, and the
    names written go back as the call's changes. Maps and the key are the scope's; a call
    without a scope (0.3's) that asks for them is marked as needing one and answered empty,
    and the host then makes the call again with the scope."""

    __slots__ = ("values", "changed", "needs_scope", "_scope")

    def __init__(self, values: dict[str, object], scope: _HostScope | None) -> None:
        self.values = values
        self.changed: set[str] = set()
        self.needs_scope = False
        self._scope = scope

    def _host(self) -> _HostScope | None:
        if self._scope is None:
            self.needs_scope = True
        return self._scope

    def key(self) -> str:
        scope = self._host()
        return "" if scope is None else scope.key()

    def get(self, name: str, default: object = None) -> object:
        values = self.values
        return values[name] if _name(name) in values else default

    def put(self, name: str, value: object) -> None:
        self.values[_name(name)] = check(value)
        self.changed.add(name)

    def remove(self, name: str) -> None:
        self.values.pop(_name(name), None)
        self.changed.add(name)

    def map_get(self, name: str, entry: str, default: object = None) -> object:
        scope = self._host()
        return default if scope is None else scope.map_get(name, entry, default)

    def map_put(self, name: str, entry: str, value: object) -> None:
        scope = self._host()
        if scope is not None:
            scope.map_put(name, entry, value)

    def map_remove(self, name: str, entry: str) -> None:
        scope = self._host()
        if scope is not None:
            scope.map_remove(name, entry)

    def map_len(self, name: str) -> int:
        scope = self._host()
        return 0 if scope is None else scope.map_len(name)

    def map_entries(self, name: str) -> list[str]:
        scope = self._host()
        return [] if scope is None else scope.map_entries(name)

    def changes(self, lower: Callable[[object], Any]) -> list[tuple[str, Any]]:
        """The names written, in order, each with its WIT value (``None`` if removed)."""
        values = self.values
        return [
            (name, lower(values[name]) if name in values else None)
            for name in sorted(self.changed)
        ]


def _host_columns(batch: Any) -> Events:
    """A 0.2 batch (its values field after field, WIT values) as `Events` over native
    columns; values missing from a short list are ``None``."""
    events, values = len(batch.timestamps), batch.values
    columns = []
    for field in range(len(batch.fields)):
        column = [value.value for value in values[field * events : (field + 1) * events]]
        columns.append(_padded(column, events))
    return Events._from_columns(batch.fields, batch.timestamps, columns)


def _padded(column: list[Value], events: int) -> list[Value]:
    """`column` (a list of its own), with nulls added up to `events` values if it is short:
    in place, so a full column, the rule, is not copied again."""
    if len(column) < events:
        column.extend([None] * (events - len(column)))
    return column


class _Names:
    """A call's names by index, and the names its answer adds (its `new-names`)."""

    __slots__ = ("names", "new", "_index")

    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.new: list[str] = []
        self._index: dict[str, int] | None = None

    def at(self, index: int) -> str:
        names = self.names
        return names[index] if 0 <= index < len(names) else ""

    def index(self, name: str) -> int:
        """The index of `name`: in the call's names, or past them in the new ones."""
        if self._index is None:
            self._index = {name: at for at, name in enumerate(self.names)}
        at = self._index.get(name)
        if at is None:
            at = self._index[name] = len(self.names) + len(self.new)
            self.new.append(name)
        return at


class _Columns:
    """The values of a call's windows, each field's from the list its kind names."""

    __slots__ = ("_batches", "_ints", "_floats", "_at")

    def __init__(self, batches: Any, kinds: Any) -> None:
        self._batches = batches
        self._ints, self._floats = kinds.INTS, kinds.FLOATS
        self._at = [0, 0, 0, 0]  # in kinds, ints, floats, columns

    def window(self, fields: int, events: int) -> list[list[Value]]:
        """The next window's columns: `fields` of `events` values (``None`` past a list)."""
        batches, at, columns = self._batches, self._at, []
        for _ in range(fields):
            kind = batches.kinds[at[0]] if at[0] < len(batches.kinds) else None
            at[0] += 1
            if kind is None:
                column: list[Value] = []
            elif kind is self._ints:
                column = batches.ints[at[1] : at[1] + events]
                at[1] += events
            elif kind is self._floats:
                column = batches.floats[at[2] : at[2] + events]
                at[2] += events
            else:
                column = [value.value for value in batches.columns[at[3] : at[3] + events]]
                at[3] += events
            columns.append(_padded(column, events))
        return columns


def _outcome(outcomes: Any, state: _NamedValues, call: Callable[..., Any], *args: Any) -> Any:
    """Runs one window's part of a call carrying many: its outcome (``DONE``, ``FAILED`` if
    it raised, ``NEEDS_SCOPE`` if it asked for a map or the key) and what it returned."""
    try:
        result = call(*args)
    except BaseException:
        return (outcomes.NEEDS_SCOPE if state.needs_scope else outcomes.FAILED), None
    return (outcomes.NEEDS_SCOPE if state.needs_scope else outcomes.DONE), result


def _named_values(names: _Names, named: list[Any]) -> _NamedValues:
    """A window's named values, as a call carrying many windows sends them, without a scope."""
    return _NamedValues({names.at(value.name): value.value.value for value in named}, None)


def _fields(output: object, bindings: _Bindings) -> list[Any]:
    """The WIT fields of `finish`'s output: a dict of names to values."""
    if not isinstance(output, dict):
        raise TypeError(f"finish must return a dict of field names to values, not {output!r}")
    new_field, lower = bindings.types.Field, bindings.lower
    return [new_field(_name(name), lower(value)) for name, value in output.items()]


def _name(name: object) -> str:
    """A field name, which must be text."""
    if type(name) is not str:
        raise TypeError(f"a field name is a str, not {name!r}")
    return name


def _output_events(output: object, batch_len: int, bindings: _Bindings) -> Any:
    """The WIT output events of `process`'s result (`OutputEvents`, or `Events` passed on)."""
    if isinstance(output, Events):
        output = output.into_output()
    if not isinstance(output, OutputEvents):
        raise TypeError(f"process must return OutputEvents, not {output!r}")
    types, lower = bindings.types, bindings.lower
    rows = [
        types.OutputEvent(
            _origin(row.origin, batch_len),
            _timestamp(row.timestamp),
            [lower(value) for value in row.values],
        )
        for row in output.rows
    ]
    return types.OutputEvents([_name(name) for name in output.fields], rows)


def _origin(origin: object, batch_len: int) -> int:
    """An output event's origin, which must index the input batch."""
    if type(origin) is not int or not 0 <= origin < min(batch_len, _U32_LIMIT):
        raise ValueError(f"origin {origin!r} is not the index of a row of the input batch")
    return origin


def _timestamp(timestamp: object) -> int:
    """An event time, which must be an int of 64 bits."""
    if type(timestamp) is not int or not I64_MIN <= timestamp <= I64_MAX:
        raise ValueError(f"event time {timestamp!r} is not an int of 64 bits")
    return timestamp


def describe(error: BaseException) -> str:
    """The dead-letter reason for `error`: an `OperatorError`'s message as it is; otherwise
    ``"<type>: <message> (at <file>, line <n>, in <function>)"`` after the innermost frame of
    its traceback.

    Clears the traceback's frames first, so what the failed call held (after a
    ``MemoryError``, say) is freed before the message is built.
    """
    if isinstance(error, OperatorError):
        return error.message
    where = _innermost(error.__traceback__)
    _clear_frames(error.__traceback__)
    kind = type(error).__name__
    try:
        message = str(error)
    except Exception:  # a broken __str__ still leaves the type and the place
        message = ""
    text = f"{kind}: {message}" if message else kind
    return f"{text} (at {where})" if where else text


def _innermost(traceback: TracebackType | None) -> str:
    """``"<file>, line <n>, in <function>"`` for the innermost frame of `traceback`."""
    if traceback is None:
        return ""
    while traceback.tb_next is not None:
        traceback = traceback.tb_next
    code = traceback.tb_frame.f_code
    return f"{os.path.basename(code.co_filename)}, line {traceback.tb_lineno}, in {code.co_name}"


def _clear_frames(traceback: TracebackType | None) -> None:
    """Drops the local variables of the finished frames of `traceback`."""
    while traceback is not None:
        with suppress(RuntimeError):  # a frame still running (the adapter's own) stays
            traceback.tb_frame.clear()
        traceback = traceback.tb_next


def _error(bindings: _Bindings, error: BaseException) -> BaseException:
    """The WIT error ``Err(reason)`` for any exception (an ``Err`` as it is)."""
    return error if isinstance(error, bindings.Err) else bindings.Err(describe(error))


def export_aggregate(operator: type[Aggregate] | Aggregate) -> type:
    """The class componentize-py exports as the ``aggregate`` interface, calling `operator`
    (an `Aggregate` subclass, instantiated once, or an instance).

    Use it once, in the component's module: ``Aggregate = weir_sdk.export_aggregate(Mine)``.
    """
    instance: Aggregate = _instance(operator, Aggregate)
    _warm_up()

    class AggregateExport:
        """The ``aggregate`` export: WIT types in and out, exceptions as errors."""

        def add(self, state: Any, values: list[Any], batch: Any) -> list[Any]:
            b = _bindings or _load()
            try:
                named = {field.name: field.value.value for field in values}
                backend = _NamedValues(named, b.scope(state))
                instance.add(State(backend), _host_columns(batch))
                change = b.aggregate().Change
                return [change(name, value) for name, value in backend.changes(b.lower)]
            except BaseException as error:
                raise _error(b, error) from None

        def merge(self, target: Any, source: Any) -> None:
            b = _bindings or _load()
            try:
                instance.merge(b.state(target), b.state(source))
            except BaseException as error:
                raise _error(b, error) from None

        def finish(self, state: Any, window: Any) -> list[Any]:
            b = _bindings or _load()
            try:
                output = instance.finish(b.state(state), Window(window.start, window.end))
                return _fields(output, b)
            except BaseException as error:
                raise _error(b, error) from None

        def migrate(self, state: Any, from_version: str) -> None:
            b = _bindings or _load()
            try:
                instance.migrate(b.state(state), from_version)
            except BaseException as error:
                raise _error(b, error) from None

    # componentize-py looks for the `windows` export as the class `Windows` of the module that
    # exports `Aggregate`: the one calling this, as a rule (else `Windows = Aggregate.Windows`).
    windows = _export_windows(instance)
    AggregateExport.Windows = windows  # type: ignore[attr-defined]
    module = sys._getframe(1).f_globals
    mine = module.get("Windows")
    if mine is not None and not getattr(mine, "_weir_windows", False):
        raise TypeError(
            "export_aggregate defines the module's `Windows` (the `windows` export): rename "
            "the module's own `Windows`"
        )
    module["Windows"] = windows
    return AggregateExport


def _export_windows(instance: Aggregate) -> type:
    """The class componentize-py exports as the ``windows`` interface (contract 0.3: many
    windows per call, each without its scope), calling `instance`. A window whose call raises
    answers ``FAILED`` and one that asks for a map or the key ``NEEDS_SCOPE``: the host then
    calls ``aggregate`` for that window alone, which gives the error or has the scope."""

    class WindowsExport:
        """The ``windows`` export: each window's part done as its own `add` or `finish`."""

        _weir_windows = True

        def add_windows(self, batches: Any) -> Any:
            b = _bindings or _load()
            w = b.windows()
            names, columns = _Names(batches.names), _Columns(batches, w.ColumnKind)
            outcomes: list[Any] = []
            counts: list[int] = []
            changes: list[Any] = []
            at_values = at_fields = at_times = 0
            for count in batches.counts:
                named = batches.values[at_values : at_values + count.values]
                fields = batches.fields[at_fields : at_fields + count.fields]
                times = batches.timestamps[at_times : at_times + count.events]
                at_values, at_fields = at_values + count.values, at_fields + count.fields
                at_times += count.events
                state = _named_values(names, named)
                batch = Events._from_columns(
                    [names.at(field) for field in fields],
                    times,
                    columns.window(len(fields), len(times)),
                )
                outcome, changed = _outcome(w.Outcome, state, _add, instance, state, batch, b)
                before = len(changes)
                if outcome is w.Outcome.DONE:
                    for name, value in changed:
                        changes.append(w.NamedChange(names.index(name), value))
                outcomes.append(outcome)
                counts.append(len(changes) - before)
            return w.AddedWindows(outcomes, counts, changes, names.new)

        def finish_windows(self, states: Any) -> Any:
            b = _bindings or _load()
            w = b.windows()
            names = _Names(states.names)
            outcomes: list[Any] = []
            counts: list[int] = []
            fields: list[Any] = []
            at = 0
            for count, window in zip(states.value_counts, states.windows, strict=False):
                state = _named_values(names, states.values[at : at + count])
                at += count
                outcome, output = _outcome(
                    w.Outcome, state, _finish, instance, state, Window(window.start, window.end), b
                )
                before = len(fields)
                if outcome is w.Outcome.DONE:
                    for field in output:
                        fields.append(w.Named(names.index(field.name), field.value))
                outcomes.append(outcome)
                counts.append(len(fields) - before)
            return w.FinishedWindows(outcomes, counts, fields, names.new)

    return WindowsExport


def _add(
    instance: Aggregate, state: _NamedValues, batch: Events, b: _Bindings
) -> list[tuple[str, Any]]:
    """`add` of one window of a call carrying many: its changes, as WIT values."""
    instance.add(State(state), batch)
    return state.changes(b.lower)


def _finish(instance: Aggregate, state: _NamedValues, window: Window, b: _Bindings) -> list[Any]:
    """`finish` of one window of a call carrying many: its output's WIT fields."""
    return _fields(instance.finish(State(state), window), b)


def export_enrich(operator: type[Enrich] | Enrich) -> type:
    """The class componentize-py exports as the ``enrich`` interface, calling `operator` (an
    `Enrich` subclass, instantiated once, or an instance).

    Use it once, in the component's module: ``Enrich = weir_sdk.export_enrich(Mine)``.
    """
    instance: Enrich = _instance(operator, Enrich)
    _warm_up()

    class EnrichExport:
        """The ``enrich`` export: WIT types in and out, exceptions as errors."""

        def process(self, state: Any, batch: Any) -> Any:
            b = _bindings or _load()
            try:
                events = _host_columns(batch)
                output = instance.process(b.state(state), events)
                return _output_events(output, len(batch.timestamps), b)
            except BaseException as error:
                raise _error(b, error) from None

    return EnrichExport


def _instance(operator: Any, base: type) -> Any:
    """`operator` itself if an instance of `base`, an instance if it is a subclass."""
    if isinstance(operator, type) and issubclass(operator, base):
        return operator()
    if isinstance(operator, base):
        return operator
    raise TypeError(f"{operator!r} is not a weir_sdk.{base.__name__} (subclass or instance)")

"""Exporting operators as components: the adapters between the WIT bindings that
componentize-py generates and the SDK's native types.

``Aggregate = export_aggregate(MyOperator)`` in the component's module gives componentize-py the
class it looks for. The bindings (``wit_world``, ``componentize_py_types``) are imported only
when the component is built or runs, so operators can be unit-tested with plain CPython.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import suppress
from types import ModuleType, TracebackType
from typing import Any, Protocol

from .events import Events, OutputEvents, Window
from .operator import Aggregate, Enrich, OperatorError
from .state import State
from .values import I64_MAX, I64_MIN, check, check_int

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
        return State(_HostScope(scope, self.lower))


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

        def add(self, state: Any, batch: Any) -> None:
            b = _bindings or _load()
            try:
                events = Events._from_host(batch.fields, batch.rows)
                instance.add(b.state(state), events)
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

    return AggregateExport


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
                events = Events._from_host(batch.fields, batch.rows)
                output = instance.process(b.state(state), events)
                return _output_events(output, len(batch.rows), b)
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

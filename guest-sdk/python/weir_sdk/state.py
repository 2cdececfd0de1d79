"""`State`: the state of one key (and window), kept by the host."""

from __future__ import annotations

from typing import Protocol, TypeVar, overload

from .values import I64_MAX, I64_MIN, Value, check_int

D = TypeVar("D")


class StateBackend(Protocol):
    """Where a `State` reads and writes: the host's scope, or a `testing.MemoryState`.

    `get` and `map_get` return `default` only when there is no such value: a stored null is
    ``None``.
    """

    def key(self) -> str: ...
    def get(self, name: str, default: object = None) -> object: ...
    def put(self, name: str, value: object) -> None: ...
    def remove(self, name: str) -> None: ...
    def map_get(self, name: str, entry: str, default: object = None) -> object: ...
    def map_put(self, name: str, entry: str, value: object) -> None: ...
    def map_remove(self, name: str, entry: str) -> None: ...
    def map_len(self, name: str) -> int: ...
    def map_entries(self, name: str) -> list[str]: ...


class State:
    """The state of one key (and, for aggregates, one window), kept by the host.

    It holds named values (`get`, `put`) and named maps from entry names to values
    (`map_get`, `map_put`), as native Python values (see `weir_sdk.values`). In an aggregate's
    `add`, named values come with the call and stay in the guest until it returns; every other
    method is a call to the host, so read what a call needs once. Reads see earlier writes of
    the same call.

    Operators receive it from the host; tests make one with `testing.MemoryState`.
    """

    __slots__ = ("_backend",)

    def __init__(self, backend: StateBackend) -> None:
        self._backend = backend

    def key(self) -> str:
        """The key this state belongs to, as text."""
        return self._backend.key()

    def get(self, name: str, default: object = None) -> Value:
        """The value named `name`; `default` if there is none (a stored null is ``None``)."""
        return self._backend.get(name, default)  # type: ignore[return-value]

    @overload
    def get_int(self, name: str) -> int | None: ...
    @overload
    def get_int(self, name: str, default: D) -> int | D: ...

    def get_int(self, name: str, default: object = None) -> object:
        """The int named `name`; `default` if there is none or it is not an int."""
        value = self._backend.get(name)
        return value if type(value) is int else default

    @overload
    def get_float(self, name: str) -> float | None: ...
    @overload
    def get_float(self, name: str, default: D) -> float | D: ...

    def get_float(self, name: str, default: object = None) -> object:
        """The number named `name`, an int converted to a float; `default` if there is none or
        it is not a number."""
        value = self._backend.get(name)
        kind = type(value)
        if kind is float:
            return value
        return float(value) if kind is int else default  # type: ignore[arg-type]

    @overload
    def get_text(self, name: str) -> str | None: ...
    @overload
    def get_text(self, name: str, default: D) -> str | D: ...

    def get_text(self, name: str, default: object = None) -> object:
        """The text named `name`; `default` if there is none or it is not text."""
        value = self._backend.get(name)
        return value if type(value) is str else default

    def put(self, name: str, value: Value) -> None:
        """Sets the value named `name`. Raises ``OverflowError`` for an int outside 64 bits and
        ``TypeError`` for a value that is not a Weir value."""
        self._backend.put(name, value)

    def add_int(self, name: str, delta: int) -> int:
        """Adds `delta` to the int named `name` (0 if there is none, or it is not an int) and
        returns the new value. The sum saturates at the bounds of a 64-bit int."""
        if type(delta) is not int:
            raise TypeError(f"add_int adds an int, not {delta!r}")
        value = self._backend.get(name)
        total = (value if type(value) is int else 0) + delta
        if not I64_MIN <= total <= I64_MAX:  # saturate, like Rust's `saturating_add`
            check_int(delta)
            total = I64_MAX if total > 0 else I64_MIN
        self._backend.put(name, total)
        return total

    def remove(self, name: str) -> None:
        """Removes the value named `name`, if any."""
        self._backend.remove(name)

    def map_get(self, name: str, entry: str, default: object = None) -> Value:
        """The value of entry `entry` of the map `name`; `default` if there is none."""
        return self._backend.map_get(name, entry, default)  # type: ignore[return-value]

    def map_put(self, name: str, entry: str, value: Value) -> None:
        """Sets entry `entry` of the map `name`, creating the map if needed."""
        self._backend.map_put(name, entry, value)

    def map_remove(self, name: str, entry: str) -> None:
        """Removes entry `entry` of the map `name`, if any."""
        self._backend.map_remove(name, entry)

    def map_len(self, name: str) -> int:
        """How many entries the map `name` holds (0 if there is no such map)."""
        return self._backend.map_len(name)

    def map_entries(self, name: str) -> list[str]:
        """The entry names of the map `name`, in ascending order."""
        return self._backend.map_entries(name)

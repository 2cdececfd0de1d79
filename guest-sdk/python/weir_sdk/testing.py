"""Running operators with plain CPython, without a host, for unit tests.

>>> from weir_sdk.testing import MemoryState
>>> memory = MemoryState("user-1")
>>> state = memory.state()
>>> state.put("count", 2)
>>> state.map_put("seen", "apple", 1)
>>> state.get_int("count")
2
>>> memory.map_entries("seen")
['apple']
"""

from __future__ import annotations

from .state import State
from .values import Value, check


class MemoryState:
    """An in-memory stand-in for the state the host keeps for one key (and window).

    `state` hands out the `State` to pass to an operator; the other methods inspect or prepare
    the contents directly. Values are checked as the host's would be: an int beyond 64 bits
    or a value of another type raises on `put`.
    """

    def __init__(self, key: str) -> None:
        self._key = key
        self.values: dict[str, Value] = {}
        self.maps: dict[str, dict[str, Value]] = {}

    def __repr__(self) -> str:
        return f"MemoryState({self._key!r}, values={self.values!r}, maps={self.maps!r})"

    def state(self) -> State:
        """The `State` to hand to an operator."""
        return State(self)

    def key(self) -> str:
        """The key this state belongs to."""
        return self._key

    def get(self, name: str, default: object = None) -> object:
        """The value named `name`; `default` if there is none."""
        return self.values.get(name, default)

    def put(self, name: str, value: object) -> None:
        """Sets the value named `name`."""
        self.values[name] = check(value)

    def remove(self, name: str) -> None:
        """Removes the value named `name`."""
        self.values.pop(name, None)

    def map_get(self, name: str, entry: str, default: object = None) -> object:
        """The value of entry `entry` of the map `name`; `default` if there is none."""
        return self.maps.get(name, {}).get(entry, default)

    def map_put(self, name: str, entry: str, value: object) -> None:
        """Sets entry `entry` of the map `name`."""
        self.maps.setdefault(name, {})[entry] = check(value)

    def map_remove(self, name: str, entry: str) -> None:
        """Removes entry `entry` of the map `name` (and the map, once empty)."""
        entries = self.maps.get(name)
        if entries is not None:
            entries.pop(entry, None)
            if not entries:
                del self.maps[name]

    def map_len(self, name: str) -> int:
        """How many entries the map `name` holds."""
        return len(self.maps.get(name, {}))

    def map_entries(self, name: str) -> list[str]:
        """The entry names of the map `name`, in ascending order."""
        return sorted(self.maps.get(name, {}))

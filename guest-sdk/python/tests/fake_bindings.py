"""Stand-ins for the modules componentize-py generates (``wit_world.imports.types``,
``wit_world.imports.columns``, ``wit_world.exports.aggregate``, ``wit_world.exports.windows``
and ``componentize_py_types``), with the same shapes, so the adapters run under plain CPython.

`install` registers this module as all of them; `FakeScope` plays the host's `state.scope`.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from enum import Enum
from types import ModuleType
from typing import Any


@dataclass(frozen=True)
class Err(Exception):
    """The failure case of a WIT `result`, raised by an export."""

    value: Any


@dataclass
class Value_Null:
    pass


@dataclass
class Value_Boolean:
    value: bool


@dataclass
class Value_Int:
    value: int


@dataclass
class Value_Float:
    value: float


@dataclass
class Value_Text:
    value: str


@dataclass
class Value_Bytes:
    value: bytes


Value = Value_Null | Value_Boolean | Value_Int | Value_Float | Value_Text | Value_Bytes


@dataclass
class Field:
    name: str
    value: Value


@dataclass
class OutputEvent:
    origin: int
    timestamp: int
    values: list[Value]


@dataclass
class OutputEvents:
    fields: list[str]
    rows: list[OutputEvent]


@dataclass
class Window:
    start: int
    end: int


# Contract 0.2: a batch's values field after field, and an aggregate's changes.


@dataclass
class ColumnEvents:
    """``columns.Events``."""

    fields: list[str]
    timestamps: list[int]
    values: list[Value]


@dataclass
class Change:
    name: str
    value: Value | None


# Contract 0.3: calls carrying many windows.


@dataclass
class Named:
    name: int
    value: Value


@dataclass
class WindowCounts:
    values: int
    fields: int
    events: int


class ColumnKind(Enum):
    INTS = 0
    FLOATS = 1
    VALUES = 2


@dataclass
class WindowBatches:
    names: list[str]
    counts: list[WindowCounts]
    values: list[Named]
    fields: list[int]
    timestamps: list[int]
    kinds: list[ColumnKind]
    ints: list[int]
    floats: list[float]
    columns: list[Value]


class Outcome(Enum):
    DONE = 0
    FAILED = 1
    NEEDS_SCOPE = 2


@dataclass
class NamedChange:
    name: int
    value: Value | None


@dataclass
class AddedWindows:
    outcomes: list[Outcome]
    change_counts: list[int]
    changes: list[NamedChange]
    new_names: list[str]


@dataclass
class WindowStates:
    names: list[str]
    value_counts: list[int]
    values: list[Named]
    windows: list[Window]


@dataclass
class FinishedWindows:
    outcomes: list[Outcome]
    field_counts: list[int]
    fields: list[Named]
    new_names: list[str]


def install() -> None:
    """Registers this module as the generated modules the SDK imports."""
    this = sys.modules[__name__]
    sys.modules.setdefault("componentize_py_types", this)
    if "wit_world.imports.types" not in sys.modules:
        imports, exports = ModuleType("wit_world.imports"), ModuleType("wit_world.exports")
        imports.types = imports.columns = this  # type: ignore[attr-defined]
        exports.aggregate = exports.windows = this  # type: ignore[attr-defined]
        sys.modules["wit_world"] = ModuleType("wit_world")
        sys.modules["wit_world.imports"] = imports
        sys.modules["wit_world.exports"] = exports
        for name in ["imports.types", "imports.columns", "exports.aggregate", "exports.windows"]:
            sys.modules[f"wit_world.{name}"] = this


class FakeScope:
    """A host scope: WIT values in and out, every call recorded in `calls`."""

    def __init__(self, key: str) -> None:
        self._key = key
        self.values: dict[str, Value] = {}
        self.maps: dict[str, dict[str, Value]] = {}
        self.calls: list[tuple[str, str]] = []

    def key(self) -> str:
        return self._key

    def get(self, name: str) -> Value | None:
        self.calls.append(("get", name))
        return self.values.get(name)

    def put(self, name: str, value: Value) -> None:
        self.calls.append(("put", name))
        self.values[name] = value

    def remove(self, name: str) -> None:
        self.values.pop(name, None)

    def map_get(self, name: str, entry: str) -> Value | None:
        return self.maps.get(name, {}).get(entry)

    def map_put(self, name: str, entry: str, value: Value) -> None:
        self.maps.setdefault(name, {})[entry] = value

    def map_remove(self, name: str, entry: str) -> None:
        self.maps.get(name, {}).pop(entry, None)

    def map_len(self, name: str) -> int:
        return len(self.maps.get(name, {}))

    def map_entries(self, name: str) -> list[str]:
        return sorted(self.maps.get(name, {}))

"""Stand-ins for the modules componentize-py generates (``wit_world.imports.types`` and
``componentize_py_types``), with the same shapes, so the adapters run under plain CPython.

`install` registers this module as both; `FakeScope` plays the host's `state.scope`.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
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
class Event:
    timestamp: int
    values: list[Value]


@dataclass
class Events:
    fields: list[str]
    rows: list[Event]


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


def install() -> None:
    """Registers this module as ``wit_world.imports.types`` and ``componentize_py_types``."""
    this = sys.modules[__name__]
    sys.modules.setdefault("componentize_py_types", this)
    if "wit_world.imports.types" not in sys.modules:
        imports = ModuleType("wit_world.imports")
        imports.types = this  # type: ignore[attr-defined]
        sys.modules["wit_world"] = ModuleType("wit_world")
        sys.modules["wit_world.imports"] = imports
        sys.modules["wit_world.imports.types"] = this


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

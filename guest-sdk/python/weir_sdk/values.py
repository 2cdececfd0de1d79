"""Native Python values and the arithmetic of Weir values.

A Weir value (WIT `value`) is one of six kinds, each a plain Python value here:

======== ============
WIT      Python
======== ============
null     ``None``
boolean  ``bool``
int      ``int`` (signed 64-bit)
float    ``float``
text     ``str``
bytes    ``bytes``
======== ============

Reads never mix kinds: an int is never a float and a bool is never an int, although Python's
``bool`` is a subclass of ``int``. :func:`check` is the one place where a Python value is
judged; :func:`plus` and :func:`plus_all` add numbers exactly as the Rust SDK's `Value::plus`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import reduce
from itertools import islice
from operator import add
from typing import cast

#: A Weir value as a native Python value.
Value = None | bool | int | float | str | bytes
#: A number: an int or a float.
Number = int | float

#: The smallest and largest Weir int.
I64_MIN = -(1 << 63)
I64_MAX = (1 << 63) - 1

_NUMBERS = frozenset((int, float))
_INTS = frozenset((int,))
_PLAIN = frozenset((type(None), bool, float, str, bytes))


def check_int(value: int) -> int:
    """`value` if it fits in a signed 64-bit integer; raises ``OverflowError`` otherwise."""
    if I64_MIN <= value <= I64_MAX:
        return value
    raise OverflowError(f"int {value} does not fit in a Weir int (signed 64 bits)")


def check(value: object) -> Value:
    """`value` as one of the six kinds of Weir value.

    Subclasses become their base kind (an ``IntEnum`` an ``int``), ``bytearray`` and
    ``memoryview`` become ``bytes``. Raises ``OverflowError`` for an int outside 64 bits and
    ``TypeError`` for anything else.
    """
    kind = type(value)
    if kind in _PLAIN:
        return cast(Value, value)
    if isinstance(value, int):  # not a bool: `bool` is exact, and handled above
        return check_int(int(value))
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise TypeError(
        f"{kind.__name__} is not a Weir value: use None, bool, int, float, str or bytes"
    )


def is_number(value: Value) -> bool:
    """Whether `value` is an int or a float (not a bool)."""
    return type(value) in _NUMBERS


def as_int(value: Value) -> int | None:
    """The int, if `value` is an int (a bool is not)."""
    return value if type(value) is int else None


def as_float(value: Value) -> float | None:
    """The number as a float, if `value` is a float or an int (converted, so ints beyond
    ±2⁵³ may be rounded)."""
    if type(value) is float:
        return value
    return float(value) if type(value) is int else None


def as_text(value: Value) -> str | None:
    """The text, if `value` is text."""
    return value if type(value) is str else None


def to_text(value: Value) -> str | None:
    """`value` as a name (of a map entry, say) the way the host names keys: text as it is,
    ints in decimal, ``None`` for every other kind."""
    if type(value) is str:
        return value
    return str(value) if type(value) is int else None


def plus(a: Value, b: Value) -> Number | None:
    """The sum of two numbers: an int if both are ints and the sum fits in 64 bits, a float
    otherwise; ``None`` if either is not a number. Like the Rust SDK's `Value::plus`."""
    if type(a) is int and type(b) is int:
        total = a + b
        if I64_MIN <= total <= I64_MAX:
            return total
    elif type(a) not in _NUMBERS or type(b) not in _NUMBERS:
        return None
    return float(cast(Number, a)) + float(cast(Number, b))


def plus_all(start: Value, values: Iterable[Value]) -> Value | None:
    """`start` plus each of `values` in turn with :func:`plus`: what a loop of ``plus`` gives,
    ``None`` as soon as a value (or `start`) is not a number. `start` itself if `values` is
    empty.

    Fast on whole batches: a sum of ints that cannot leave 64 bits is one ``sum``, and once the
    total is a float the rest is added in order (float addition is not associative) in C.
    """
    values = values if isinstance(values, (list, tuple)) else list(values)
    if len(values) < 4:  # too few for the batch paths to pay off
        return _plus_each(start, values, False)
    kinds = set(map(type, values))
    if type(start) is int and kinds <= _INTS:
        ints = cast(Sequence[int], values)
        if abs(start) + sum(map(abs, ints)) <= I64_MAX:  # no partial sum can leave 64 bits
            return start + sum(ints)
    elif type(start) is float and kinds <= _NUMBERS:
        return reduce(add, values, start)
    return _plus_each(start, values, kinds <= _NUMBERS)


def _plus_each(total: Value, values: Sequence[Value], numeric: bool) -> Value | None:
    """:func:`plus_all` one value at a time, until the total is a float among numbers."""
    for index, value in enumerate(values):
        if numeric and type(total) is float:
            return reduce(add, islice(values, index, None), total)
        total = plus(total, value)
        if total is None:
            return None
    return total

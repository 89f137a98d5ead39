"""TypedDicts for the schema table, in a module without `from __future__ import annotations`:
there (Python 3.11) a class cannot see its keys' `Required`/`NotRequired`."""

import enum
import typing


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Shipment(typing.TypedDict):
    """Where a parcel goes."""

    city: str
    weight: typing.NotRequired[float]


class Label(typing.TypedDict, total=False):
    text: typing.Required[str]
    color: Color

"""Build kio response entities for any version from one set of keyword values.

Kafka messages grow fields version by version; handlers pass every value they
know and each version's generated dataclass keeps the fields it has.
"""
from __future__ import annotations

import datetime
import functools
import sys
from typing import Any

ZERO_THROTTLE = datetime.timedelta(0)


@functools.cache
def _field_names(cls) -> frozenset[str]:
    return frozenset(cls.__dataclass_fields__)


def build(cls, **values: Any):
    names = _field_names(cls)
    return cls(**{key: value for key, value in values.items() if key in names})


def has_field(cls, name: str) -> bool:
    return name in _field_names(cls)


@functools.cache
def nested(schema, name: str):
    """The nested entity class `name` defined next to `schema` (same version)."""
    return getattr(sys.modules[schema.__module__], name)


def response_schema_for(request) -> Any:
    from net.codec import response_schema

    return response_schema(type(request).__api_key__, type(request).__version__)


def millis_to_datetime(ms: int) -> datetime.datetime | None:
    if ms < 0:
        return None
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.timezone.utc)


def timedelta_ms(value) -> int:
    if isinstance(value, datetime.timedelta):
        return int(value / datetime.timedelta(milliseconds=1))
    return int(value)

"""What a reflected column holds, through the wrappers dialects put around its type."""

from __future__ import annotations

from sqlalchemy import Boolean, Date, DateTime, Float, Integer, Numeric, String, Uuid
from sqlalchemy.types import NullType, TypeDecorator, TypeEngine


def underlying_type(column) -> TypeEngine:
    """The type a column's values have, through the wrappers dialects put around it: a
    TypeDecorator (PyHive reflects Hive's timestamp as one over TIMESTAMP) and ClickHouse's
    Nullable(...) and LowCardinality(...) (their ``nested_type``)."""
    kind = column.type
    while True:
        if isinstance(kind, TypeDecorator):
            kind = kind.impl_instance
        elif isinstance(getattr(kind, "nested_type", None), TypeEngine):
            kind = kind.nested_type
        else:
            return kind


def is_uuid(kind: TypeEngine) -> bool:
    """SQLAlchemy's Uuid, or a dialect's UUID type of its own (clickhouse-sqlalchemy's derives
    from String, yet ClickHouse compares it with no text)."""
    return isinstance(kind, Uuid) or getattr(kind, "__visit_name__", None) == "uuid"


def is_text(column) -> bool:
    """Whether the column holds text (or a type unknown to SQLAlchemy); an Enum is text."""
    kind = underlying_type(column)
    return isinstance(kind, (String, NullType)) and not is_uuid(kind)


def kind_of(column) -> str:
    """What a column's declared type holds: text (or a type unknown to SQLAlchemy), number,
    boolean, timestamp (or date), uuid, or other."""
    kind = underlying_type(column)
    if isinstance(kind, Boolean):
        return "boolean"
    if is_text(column):
        return "text"
    if isinstance(kind, (Integer, Numeric, Float)):
        return "number"
    if isinstance(kind, (DateTime, Date)):
        return "timestamp"
    return "uuid" if is_uuid(kind) else "other"

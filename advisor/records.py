"""Records: the plain dataclasses evidence and reports are made of, validated where they come in from outside.

Inside one process a record is built by advisor's own code and read by rules and renderers; nothing
there needs checking again. What crosses a file or a process (a saved report, the evidence a child
wrote, a finding sent to the verification child) is validated by pydantic as it is read
(``model_validate``, ``model_validate_json``), through a ``TypeAdapter`` built on first use: importing
pydantic and building validators for every record costs about 110 ms and 20 MB, a quarter of
``advisor analyze``'s time on a trace of 30,000 events, which reads nothing it has to validate. The
methods keep pydantic's names, so code reads the same either way.

Written out (``model_dump``, ``model_dump_json``), a record is its fields as JSON: enums as their
values, tuples as lists, non-finite floats as null (pydantic's convention, so a report reads back).
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import functools
import json
import math
from typing import Any, Callable


class Record:
    """Base of every record: each subclass is a dataclass built by keywords only."""

    _record_fields: tuple[tuple[str, Any, Any], ...] = ()  # (name, default, default factory), per record

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # __init__, __repr__ and __eq__ are the base's: generating (compiling) them for each of ~50
        # records would cost 12 ms of every start, more than all the records' instances take to build
        dataclasses.dataclass(kw_only=True, init=False, repr=False, eq=False)(cls)
        cls._record_fields = tuple((f.name, f.default, f.default_factory) for f in dataclasses.fields(cls))

    def __init__(self, **values: Any) -> None:
        for name, default, factory in self._record_fields:
            if name in values:
                setattr(self, name, values.pop(name))
            elif default is not dataclasses.MISSING:
                setattr(self, name, default)
            elif factory is not dataclasses.MISSING:
                setattr(self, name, factory())
            else:
                raise TypeError(f"{type(self).__name__}() missing the keyword argument {name!r}")
        if values:
            raise TypeError(f"{type(self).__name__}() got unexpected keyword arguments {sorted(values)}")

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name, _, _ in self._record_fields)
        return f"{type(self).__qualname__}({fields})"

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name, _, _ in self._record_fields)

    __hash__ = None  # equal by value and mutable, as a dataclass with eq is

    def model_dump(self, *, mode: str = "json", exclude: set[str] | None = None) -> dict[str, Any]:
        """The record as JSON-ready data (``mode`` is accepted for callers written for pydantic)."""
        return {name: jsonable(getattr(self, name)) for name, _, _ in self._record_fields
                if not exclude or name not in exclude}

    def model_dump_json(self, *, indent: int | None = None, exclude: set[str] | None = None) -> str:
        separators = None if indent is not None else (",", ":")
        return json.dumps(self.model_dump(exclude=exclude), indent=indent, separators=separators, ensure_ascii=False)

    def model_copy(self, *, update: dict[str, Any] | None = None):
        """A shallow copy with ``update``'s fields replaced (not validated, like pydantic's)."""
        copied = copy.copy(self)
        for name, value in (update or {}).items():
            setattr(copied, name, value)
        return copied

    @classmethod
    def model_validate(cls, data: Any):
        return _adapter(cls).validate_python(data)

    @classmethod
    def model_validate_json(cls, text: str | bytes):
        return _adapter(cls).validate_json(text)


def Field(default: Any = dataclasses.MISSING, *, default_factory: Callable[[], Any] | Any = dataclasses.MISSING,  # noqa: N802
          description: str = "") -> Any:
    """A record field with a default and, for readers of the code, what it means."""
    return dataclasses.field(default=default, default_factory=default_factory,
                             metadata={"description": description} if description else None)


def jsonable(value: Any) -> Any:
    if value is None or value.__class__ in (str, int, bool):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, enum.Enum):
        return jsonable(value.value)
    if isinstance(value, Record):
        return value.model_dump()
    if isinstance(value, dict):
        return {_key(key): jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(item) for item in value]
    if isinstance(value, (str, int)):  # subclasses
        return value
    raise TypeError(f"a record field holds a {type(value).__name__}, which has no JSON form")


def _key(key: Any) -> str:
    if isinstance(key, enum.Enum):
        key = key.value
    return key if isinstance(key, str) else json.dumps(key)


def build_validator(cls: type) -> None:
    """Build ``cls``'s validator now (0.05-0.1 s each, on first use otherwise), where the time is free."""
    _adapter(cls)


@functools.cache
def _adapter(cls: type):
    from pydantic import TypeAdapter  # only where data comes in from outside

    return TypeAdapter(cls)

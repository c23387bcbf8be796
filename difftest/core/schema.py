"""The base of every schema users write (the config, the scenarios): no boolean read as a number.

pydantic reads `true` as 1 wherever a number is expected, and YAML gives `true` for `yes`, `on` and
`true`: `in_flight: true` would ask for one request in flight (and not be listed as a condition),
`kv_blocks: true` for one KV block. Every key whose type admits no boolean refuses one, naming the
key, in the models' own error format (`core.validation`).
"""

from __future__ import annotations

import types
import typing
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator


class StrictModel(BaseModel):
    """Extra keys forbidden, values frozen, and no `true`/`false` where a number is expected."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _no_boolean_for_a_number(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        for name, field in cls.model_fields.items():
            for key in {name, field.alias or name}:
                value = data.get(key)
                values = value if isinstance(value, list) else [value]
                if any(isinstance(v, bool) for v in values) and not _admits_bool(field.annotation):
                    raise ValueError(
                        f"{key}: {str(value).lower()} is a boolean, where a number or a name is "
                        "expected; write the number itself"
                    )
        return data


def _admits_bool(annotation: Any) -> bool:
    """Whether a field of this type may hold a boolean (bool itself, Any, or a union or container
    of them)."""
    if annotation is bool or annotation is Any or annotation is None:
        return True
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType, list, tuple, set, frozenset, dict):
        return any(_admits_bool(arg) for arg in typing.get_args(annotation))
    if origin is typing.Literal:
        return any(isinstance(arg, bool) for arg in typing.get_args(annotation))
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)

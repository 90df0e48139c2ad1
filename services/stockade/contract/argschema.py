"""A small JSON-schema validator for tool arguments (AGT-1, AGT-7 "validate and prepare").

Shared by every side that checks a call against a declared schema: the agent before a
call leaves it, a ToolProvider (the paper catalogue) before it runs one.

Tool schemas use a small subset of JSON Schema: ``type``, ``required``, ``properties``,
``enum``, ``additionalProperties``, ``items``, ``minimum``/``maximum`` and
``minLength``/``maxLength``. ``jsonschema`` is not a runtime dependency of Stockade, and
the subset is small enough that a dedicated validator with precise messages is clearer
than a general one. Unknown keywords are ignored, as JSON Schema itself does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from stockade.errors import InvalidArgument

_TYPE_CHECKS: dict[str, type | tuple[type, ...]] = {
    "object": dict,
    "array": list,
    "string": str,
    "boolean": bool,
    "number": (int, float),
    "integer": int,
    "null": type(None),
}


def _is_type(value: Any, type_name: str) -> bool:
    if type_name not in _TYPE_CHECKS:
        raise InvalidArgument(f"schema uses unknown type {type_name!r}")
    # bool is an int in Python but never a number in JSON.
    if type_name in ("number", "integer") and isinstance(value, bool):
        return False
    if type_name == "integer" and isinstance(value, float):
        return value.is_integer()
    return isinstance(value, _TYPE_CHECKS[type_name])


def validate(value: Any, schema: Mapping[str, Any], *, where: str = "arguments") -> None:
    """Raise ``InvalidArgument`` naming the first place where ``value`` breaks ``schema``."""
    expected = schema.get("type")
    if expected is not None:
        names = [expected] if isinstance(expected, str) else list(expected)
        if not any(_is_type(value, name) for name in names):
            raise InvalidArgument(
                f"{where}: expected {' or '.join(names)}, got {_json_type(value)}", field=where
            )
    if "enum" in schema and value not in schema["enum"]:
        raise InvalidArgument(f"{where}: {value!r} is not one of {schema['enum']!r}", field=where)
    if isinstance(value, dict):
        _validate_object(value, schema, where)
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for index, item in enumerate(value):
            validate(item, schema["items"], where=f"{where}[{index}]")
    elif isinstance(value, str):
        _validate_length(len(value), schema, where)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            raise InvalidArgument(f"{where}: {value} is below {schema['minimum']}", field=where)
        if "maximum" in schema and value > schema["maximum"]:
            raise InvalidArgument(f"{where}: {value} is above {schema['maximum']}", field=where)


def _validate_length(length: int, schema: Mapping[str, Any], where: str) -> None:
    if "minLength" in schema and length < schema["minLength"]:
        raise InvalidArgument(f"{where}: shorter than {schema['minLength']}", field=where)
    if "maxLength" in schema and length > schema["maxLength"]:
        raise InvalidArgument(f"{where}: longer than {schema['maxLength']}", field=where)


def _validate_object(value: dict[str, Any], schema: Mapping[str, Any], where: str) -> None:
    properties: Mapping[str, Any] = schema.get("properties", {})
    for name in schema.get("required", ()):
        if name not in value:
            raise InvalidArgument(f"{where}: missing required field {name!r}", field=name)
    extra = schema.get("additionalProperties", True)
    for name, item in value.items():
        if name in properties:
            validate(item, properties[name], where=f"{where}.{name}")
        elif extra is False:
            raise InvalidArgument(f"{where}: unexpected field {name!r}", field=name)
        elif isinstance(extra, Mapping):
            validate(item, extra, where=f"{where}.{name}")


def _json_type(value: Any) -> str:
    for name in ("null", "boolean", "integer", "number", "string", "array", "object"):
        if _is_type(value, name):
            return name
    return type(value).__name__

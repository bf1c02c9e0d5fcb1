"""What every schema model shares: strict scalar types, the ``@section`` decorator (a frozen pydantic dataclass that
refuses unknown keys), and the translation of pydantic's ``ValidationError`` into one line naming the key::

    grpo.num_generations = 1: must be >= 2 (GRPO needs a group to compare against)

Sections are pydantic dataclasses rather than ``BaseModel`` so that the rest of ddmrl keeps using them as the frozen
dataclasses they were (``dataclasses.replace``, ``dataclasses.asdict``, positional construction).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import types
import typing
from collections.abc import Callable
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    ConfigDict,
    Strict,
    StrictBool,
    StrictInt,
    StrictStr,
    TypeAdapter,
    ValidationError,
    WrapValidator,
    model_validator,
)
from pydantic import dataclasses as pdc
from pydantic.fields import FieldInfo
from pydantic_core import PydanticCustomError, PydanticUndefined

from ddmrl.errors import ConfigError

# YAML scalars are checked as they are: "10" is not an integer, true is not a number (pydantic's lax mode would
# convert both). A float field takes an integer.
Int = StrictInt
Float = Annotated[float, Strict()]
Bool = StrictBool
Str = StrictStr

REFUSED = "refused"  # the error type of the schema's own cross-field checks (see refuse)
DESCRIBED = "described"  # a sub-model's error, already described below the loc (a method section's, ddmrl.methods)


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` onto ``base``, recursively for mappings; lists and scalars are replaced."""
    out = dict(base)
    for k, v in over.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def refuse(key: str, value: Any, why: str) -> PydanticCustomError:
    """The error a model validator raises for ``key`` (a dotted path below the model) holding ``value``."""
    return PydanticCustomError(REFUSED, "{why}", {"key": key, "value": value, "why": why})


def section(cls: type) -> type:
    """Make ``cls`` a schema section: a frozen pydantic dataclass that refuses unknown keys and whose constructor
    raises :class:`ConfigError` (one line naming the key) instead of pydantic's multi-line ``ValidationError``."""
    cls = pdc.dataclass(frozen=True, config=ConfigDict(extra="forbid"))(cls)
    init = cls.__init__

    @functools.wraps(init)
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        try:
            init(self, *args, **kwargs)
        except ValidationError as e:
            raise ConfigError(describe(e, type(self), type(self).KEY)) from None

    cls.__init__ = __init__
    return cls


@section
class Section:
    """Base of every section. A sub-section given in part starts from its field's default, not from its class's
    defaults: ``grpo: {sampler: {steps: 3}}`` keeps GRPO's rollout temperature 1.0 (a greedy sampler would make
    every group's completions identical)."""

    KEY: ClassVar[str] = ""  # prefix of the keys named by errors of direct construction (e.g. "model")

    @model_validator(mode="before")
    @classmethod
    def _from_field_defaults(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        out = dict(data)
        for name, info in cls.__pydantic_fields__.items():
            if isinstance(out.get(name), dict) and info.default_factory is not None:
                default = info.default_factory()
                if dataclasses.is_dataclass(default):
                    out[name] = deep_merge(dataclasses.asdict(default), out[name])
        return out


def checked_as(schema: Any) -> WrapValidator:
    """Validate a field's value as ``schema`` but keep the value as it was written (a plain mapping): task
    parameters go to task.json exactly as given, ``image.grpo`` keys are merged into the image runs as given."""
    adapter = TypeAdapter(schema)

    def check(value: Any, handler: Callable[[Any], Any]) -> Any:
        adapter.validate_python(value)
        return handler(value)

    return WrapValidator(check, json_schema_input_type=schema)


# ------------------------------------------------------------------------------------------------ schema walking


def strip(tp: Any) -> tuple[Any, list[Any]]:
    """``tp`` without ``Annotated`` and ``| None``, and the metadata those carried."""
    meta: list[Any] = []
    while True:
        origin = typing.get_origin(tp)
        if origin is Annotated:
            tp, *extra = typing.get_args(tp)
            meta += extra
        elif origin in (typing.Union, types.UnionType) and type(None) in typing.get_args(tp):
            rest = [a for a in typing.get_args(tp) if a is not type(None)]
            if len(rest) != 1:
                return typing.Union[tuple(rest)], meta  # noqa: UP007  (a union built at run time)
            tp = rest[0]
        else:
            return tp, meta


def field_type(info: FieldInfo) -> Any:
    """The type a field's value is validated as (for :func:`checked_as` fields, the schema it is checked as)."""
    return _checked_schema(info.metadata) or (
        Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation
    )


def _checked_schema(metadata: list[Any]) -> Any:
    """The schema a :func:`checked_as` validator among ``metadata`` checks values as, else None."""
    for m in metadata:
        if isinstance(m, WrapValidator) and m.json_schema_input_type not in (Any, PydanticUndefined):
            return m.json_schema_input_type
    return None


def is_section(tp: Any) -> bool:
    return isinstance(tp, type) and hasattr(tp, "__pydantic_fields__")


def union_members(tp: Any) -> dict[str, type] | None:
    """A discriminated union of sections by ``method``: {tag: section}; None for any other type."""
    if typing.get_origin(tp) not in (typing.Union, types.UnionType):
        return None
    members = typing.get_args(tp)
    if not all(is_section(m) and "method" in m.__pydantic_fields__ for m in members):
        return None
    return {m.__pydantic_fields__["method"].default: m for m in members}


@dataclasses.dataclass
class Place:
    """Where a loc of a validation error points: its key as users write it, and the schema there."""

    key: str = ""
    tp: Any = None  # the type expected at the loc
    owner: type | None = None  # the section holding the last field on the way
    info: FieldInfo | None = None  # that field
    union: Any = None  # the union of types the loc ends in (pydantic tried each member)


def locate(root: Any, loc: tuple[Any, ...], prefix: str = "") -> Place:
    """Follow ``loc`` (pydantic's path of an error) through the schema from ``root``."""
    place, mapping_key = Place(prefix, root), None
    for part in loc:
        tp, meta = strip(place.tp)
        tp = _checked_schema(meta) or tp  # a checked_as item (e.g. of a mapping): its schema
        place.union = None
        if isinstance(part, int) and is_section(tp):  # a positional argument of a direct construction
            part = list(tp.__pydantic_fields__)[part]
        members = union_members(tp)
        if members is not None and part in members:  # the discriminator's tag: not a key users write
            place.tp = members[part]
        elif typing.get_origin(tp) in (typing.Union, types.UnionType) and isinstance(part, str):
            # pydantic names the member it tried ("tuple[str, ...]", "str"): not a key users write
            named = [m for m in typing.get_args(tp) if _name(m) == part.split("[")[0]]
            place.union, place.tp = tp, named[0] if named else None
        elif part == "[key]":  # a mapping's key is wrong, not its value: name the mapping
            place.key, place.tp, place.info = mapping_key or (place.key, None, None)
        elif isinstance(part, int) and typing.get_origin(tp) is not dict:
            place.key += f"[{part}]"
            place.tp = _item(tp)
        elif is_section(tp) and part in tp.__pydantic_fields__:
            info = tp.__pydantic_fields__[part]
            alias = _extra(info).get("key")  # an internal field errors under the key users write
            place.key = alias or (f"{place.key}.{part}" if place.key else part)
            place.owner, place.info, place.tp = tp, info, field_type(info)
        else:  # a mapping's entry, or a key the section does not have
            if typing.get_origin(tp) is dict:
                mapping_key = (place.key, typing.get_args(tp)[0], None)
            place.key = f"{place.key}.{part}" if place.key else str(part)
            place.owner = tp if is_section(tp) else place.owner
            place.info, place.tp = None, _item(tp)
    return place


def _name(tp: Any) -> str:
    tp = strip(tp)[0]
    return getattr(typing.get_origin(tp) or tp, "__name__", "")


def _item(tp: Any) -> Any:
    """The type of a container's items (a mapping's values); None for anything else."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (tuple, list) and args:
        return args[0]
    return args[1] if origin is dict and len(args) == 2 else None


def fields_of(tp: Any) -> list[str]:
    """The keys users may write in section ``tp`` (internal fields left out)."""
    tp = strip(tp)[0]
    if not is_section(tp):
        return []
    return [n for n, i in tp.__pydantic_fields__.items() if not _extra(i).get("internal")]


def _extra(info: FieldInfo | None) -> dict[str, Any]:
    return info.json_schema_extra if info is not None and isinstance(info.json_schema_extra, dict) else {}


def choices(tp: Any) -> tuple[Any, ...]:
    """The values of a ``Literal`` type (or of the ``Literal`` inside ``Annotated`` / ``| None``)."""
    tp = strip(tp)[0]
    return typing.get_args(tp) if typing.get_origin(tp) is Literal else ()


def bounds(tp: Any, info: FieldInfo | None) -> str:
    """The interval of a constrained number as users read it: ``>= 2``, ``in [0, 1)``; empty if unconstrained."""
    meta = [*(info.metadata if info is not None else ()), *strip(tp)[1]]
    # pydantic keeps Field(ge=0) as annotated_types.Ge(ge=0), and so on
    b = {k: next((v for m in meta if (v := getattr(m, k, None)) is not None), None) for k in ("ge", "gt", "le", "lt")}
    lo = ("[", b["ge"]) if b["ge"] is not None else ("(", b["gt"]) if b["gt"] is not None else None
    hi = (b["le"], "]") if b["le"] is not None else (b["lt"], ")") if b["lt"] is not None else None
    if lo and hi:
        return f"in {lo[0]}{lo[1]}, {hi[0]}{hi[1]}"
    if lo:
        return f"{'>=' if lo[0] == '[' else '>'} {lo[1]}"
    return f"{'<=' if hi[1] == ']' else '<'} {hi[0]}" if hi else ""


# ------------------------------------------------------------------------------------------------ error lines

_MESSAGES = {
    "int_type": "must be an integer",
    "int_from_float": "must be an integer",
    "int_parsing": "must be an integer",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "finite_number": "must be a finite number",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "string_type": "must be a string",
    "tuple_type": "must be a list",
    "list_type": "must be a list",
    "dict_type": "must be a mapping",
    "dataclass_type": "must be a mapping",
    "dataclass_args_type": "must be a mapping",
    "model_attributes_type": "must be a mapping",
    "union_tag_not_found": "must be a mapping",
    "string_too_short": "must not be empty",
}
_KINDS = {tuple: "a list", list: "a list", dict: "a mapping", str: "a string", int: "an integer", float: "a number"}


def describe(error: ValidationError, root: Any, prefix: str = "") -> str:
    """The first error of ``error`` (raised validating ``root``) as ``key = value: what is allowed``."""
    e = error.errors(include_url=False)[0]
    loc, kind, value, ctx = tuple(e["loc"]), e["type"], e.get("input"), e.get("ctx") or {}
    if kind == REFUSED:  # a cross-field check: the key and value come with the error
        loc, value = loc + tuple(ctx["key"].split(".")), ctx["value"]
    place = locate(root, loc, prefix)
    if kind == DESCRIBED:
        return f"{place.key}.{ctx['text']}"
    if kind in ("extra_forbidden", "unexpected_keyword_argument"):
        allowed = fields_of(place.owner)
        guess = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
        hint = f" (did you mean {guess[0]}?)" if guess else ""
        return f"{place.key}: unknown key{hint}; allowed: {', '.join(allowed)}"
    if kind in ("missing", "missing_argument"):
        return f"{place.key}: required key missing"
    if loc and loc[-1] == "[key]":
        return f"{place.key} = {value!r}: {_why(place) or 'not a valid name'}"
    return f"{place.key} = {value!r}: {_message(kind, e['msg'], ctx, place)}"


def _why(place: Place) -> str:
    """The explanation a field carries for its constraint (``json_schema_extra={"why": ...}``)."""
    infos = [place.info, *(m for m in strip(place.tp)[1] if isinstance(m, FieldInfo))]
    return next((why for info in infos if (why := _extra(info).get("why"))), "")


def _message(kind: str, msg: str, ctx: dict[str, Any], place: Place) -> str:
    why = _why(place)
    if kind == REFUSED:
        return ctx["why"]
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        return f"must be {bounds(place.tp, place.info)}" + (f" ({why})" if why else "")
    if kind == "literal_error":
        allowed = choices(place.tp)
        owner = place.owner
        if len(allowed) == 1 and owner is not None and "method" in owner.__pydantic_fields__:
            if place.info is not owner.__pydantic_fields__["method"]:  # a value the method's definition fixes
                return f"{owner.__pydantic_fields__['method'].default} requires {allowed[0]!r} by definition"
        return f"unknown value; choose one of {', '.join(map(str, allowed))}" if allowed else msg
    if place.union is not None and kind.endswith("_type"):  # no member took the value: name them all
        if why:
            return why
        members = [strip(m)[0] for m in typing.get_args(place.union)]
        kinds = dict.fromkeys(_KINDS.get(typing.get_origin(m) or m, "a mapping") for m in members)
        return f"must be {' or '.join(kinds)}"
    if kind in ("too_short", "string_pattern_mismatch") and why:
        return why
    if kind == "too_short":
        return f"must list at least {ctx.get('min_length', 1)} item(s)"
    return _MESSAGES.get(kind, msg)

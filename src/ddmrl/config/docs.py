"""The parameter reference, ``docs/params.md``, generated from the schema (each key is described once, in its
``Field(description=...)``)::

    python -m ddmrl.config.docs            # writes docs/params.md
    python -m ddmrl.config.docs --check    # fails if the committed file is stale (a test runs this)
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import types
import typing
from pathlib import Path
from typing import Any

import yaml

from ddmrl.config._base import bounds, choices, field_type, fields_of, is_section, strip, union_members
from ddmrl.config.grpo import GRPOConfig
from ddmrl.config.root import Config
from ddmrl.config.tasks import TaskParams, tasks_of
from ddmrl.methods import METHODS
from ddmrl.tasks import TASKS

OUT = Path("docs/params.md")

HEADER = """# Parameter reference

Every key of `params.yaml` (and of the `profiles/*.yaml` overlays), generated from the schema in `src/ddmrl/config/`
(a module per section) by `python -m ddmrl.config.docs`; do not edit by hand (a test fails when this file is stale).
`ddmrl.config.load` validates the file before any stage runs and refuses an unknown key or a bad value with one line
naming it. *Default* is the value a key takes when the file leaves it out; a section given in part keeps
the defaults of the keys it leaves out.

Method sections: `grpo.methods` names sections of `methods:`; a section's `method` defaults to its name (so
`rebrl_t2: {method: rebrl, rebrl_mode: t2}` adds an ablation). A section takes the keys of
[GRPOConfig](#grpoconfig), resolved in this order: the method's defaults ([Methods](#methods)), then the keys set in
`grpo:` except those the method fixes, then the section's own keys, which may not contradict what the method fixes.
Image runs add `image.grpo` after `grpo:` and `image.method_overrides.<name>` after `methods.<name>`.

Task parameters: `task_params.<task>` (text tasks) and `image.task_params.<task>` (image tasks and benchmarks) take
the keys of the task's model (`Params` in its module, `ddmrl.tasks`; a *Task* section below); a task left out
takes its defaults.
"""


def render() -> str:
    """The whole reference as markdown."""
    used: dict[type, list[str]] = {}  # each section class, with the keys where it is used, in walk order
    _collect(Config, "", used)
    tasks: dict[type, list[str]] = {}  # each task's model (its module's Params), with the tasks it is the model of
    for name in TASKS:
        tasks.setdefault(TASKS[name].params, []).append(name)
    out = [HEADER]
    for cls in _ordered(used):
        if cls is Config:
            out.append("## Top level\n")
        elif cls in tasks:
            names = ", ".join(f"`{t}`" for t in tasks[cls])
            out.append(f"## Task {names}\n\nKeys: {', '.join(f'`{p}`' for p in used[cls])}.\n")
        else:
            out.append(f"## {cls.__name__}\n\nKeys: {', '.join(f'`{p}`' for p in used[cls])}.\n")
        out.append(_doc(cls) + "\n")
        out.append(_table(cls, used))
        if cls is GRPOConfig:
            out.append(_methods())
    return "\n".join(out).rstrip() + "\n"


def _collect(cls: type, path: str, used: dict[type, list[str]]) -> None:
    used.setdefault(cls, []).append(path)
    for name in fields_of(cls):
        key = f"{path}.{name}" if path else name
        info = cls.__pydantic_fields__[name]
        for inner, suffix in _sections_in(field_type(info)):
            _collect(inner, key + suffix, used)
        for kinds in (v.func.kinds for v in info.metadata if isinstance(getattr(v, "func", None), TaskParams)):
            for task in tasks_of(*kinds):  # a task_params mapping: each task's model (ddmrl.tasks)
                _collect(TASKS[task].params, f"{key}.{task}", used)


def _sections_in(tp: Any, suffix: str = "") -> list[tuple[type, str]]:
    """The section classes a type holds (itself, its items, its values), with the key suffix that reaches them."""
    tp = strip(tp)[0]
    if is_section(tp):
        return [(tp, suffix)]
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is dict:
        return _sections_in(args[1], suffix + ".<name>")
    if origin in (tuple, list):
        return _sections_in(args[0], suffix + "[]")
    return [s for arg in args for s in _sections_in(arg, suffix)]


def _ordered(used: dict[type, list[str]]) -> list[type]:
    """Walk order, but a documented base class right after its first subclass (grpo, then the run keys)."""
    out: list[type] = []

    def place(cls: type) -> None:
        if cls not in out:
            out.append(cls)
            for base in cls.__mro__[1:]:
                if base in used:
                    place(base)

    for cls in used:
        place(cls)
    return out


def _anchor(cls: type) -> str:
    return cls.__name__.lower()


def _doc(cls: type) -> str:
    return " ".join((cls.__doc__ or "").split())


def _table(cls: type, used: dict[type, list[str]]) -> str:
    """One row per key; a subclass of a documented section lists only what it adds or changes."""
    base = next((b for b in cls.__mro__[1:] if b in used), None)
    names = fields_of(cls)
    head = ""
    if base is not None:
        theirs = base.__pydantic_fields__
        names = [n for n in names if n not in theirs or _differs(cls.__pydantic_fields__[n], theirs[n])]
        head = f"Every key of [{base.__name__}](#{_anchor(base)}), and:\n\n"
    rows = ["| key | type | default | description |", "|---|---|---|---|"]
    for name in names:
        info = cls.__pydantic_fields__[name]
        kind = _extra(info).get("type") or _type(field_type(info), info)
        rows.append(f"| `{name}` | {kind} | {_default(info)} | {info.description or ''} |")
    return head + "\n".join(rows) + "\n"


def _differs(mine: Any, theirs: Any) -> bool:
    return (mine.annotation, mine.description, mine.get_default(call_default_factory=True)) != (
        theirs.annotation,
        theirs.description,
        theirs.get_default(call_default_factory=True),
    )


def _extra(info: Any) -> dict[str, Any]:
    return info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}


def _methods() -> str:
    out = [
        "## Methods\n",
        "Each method's model differs from [`grpo`](#grposection)'s keys only in these defaults and in "
        "what its definition fixes (a section may not set those to another value), and in its own keys (a method's "
        "release switch that no other method reads).\n",
    ]
    base = GRPOConfig.__pydantic_fields__
    for method in METHODS:
        cls = METHODS[method].params
        out.append(f"### `{method}`\n\n{_doc(cls)}\n")
        fixed = METHODS[method].fixed()
        rows = ["| key | default | |", "|---|---|---|"]
        for name, info in cls.__pydantic_fields__.items():
            own = name not in base  # a key of this method's model only
            if name == "method" or (not own and info.default == base[name].default and name not in fixed):
                continue
            note = "fixed by the method" if name in fixed else f"its own key: {_description(cls, name)}" if own else ""
            rows.append(f"| `{name}` | {_value(info.default)} | {note} |")
        out.append("\n".join(rows) + "\n")
    return "\n".join(out)


def _description(cls: type, name: str) -> str:
    """Key ``name``'s description in ``cls`` or, where ``cls`` only changes its default, in the base declaring it."""
    for base in cls.__mro__:
        info = getattr(base, "__pydantic_fields__", {}).get(name)
        if info is not None and info.description:
            return info.description
    return ""


def _type(tp: Any, info: Any = None) -> str:
    """A type as users read it: ``integer (>= 1)``, ``one of `a`, `b```, ``list of string``, a link to a section."""
    named = [v.func.choices() for v in strip(tp)[1] if hasattr(getattr(v, "func", None), "choices")]
    if named:  # a registry member's name (ddmrl.config.tasks.TaskNamed, RewardName)
        optional = type(None) in typing.get_args(tp)
        return "one of " + ", ".join(_value(c) for c in named[0]) + (" or null" if optional else "")
    while typing.get_origin(tp) is typing.Annotated:
        tp = typing.get_args(tp)[0]
    optional = typing.get_origin(tp) in (typing.Union, types.UnionType) and type(None) in typing.get_args(tp)
    text = _bare_type(strip(tp)[0], info)
    return f"{text} or null" if optional else text


def _bare_type(tp: Any, info: Any) -> str:
    if union_members(tp) is not None:
        return "a [method section](#methods)"
    if is_section(tp):
        return f"[{tp.__name__}](#{_anchor(tp)})"
    if choices(tp):
        return "one of " + ", ".join(_value(c) for c in choices(tp))
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type(a) for a in args)
    if origin in (tuple, list):
        return f"list of {_type(args[0])}"
    if origin is dict:
        return "mapping" if args[1] is Any else f"mapping to {_type(args[1])}"
    names = {int: "integer", float: "number", bool: "true or false", str: "string"}
    text = names.get(tp, "any")
    constraint = bounds(tp, info) if tp in (int, float) else ""
    return f"{text} ({constraint})" if constraint else text


def _default(info: Any) -> str:
    if info.is_required():
        return "required"
    value = info.get_default(call_default_factory=True)
    if dataclasses.is_dataclass(value):
        changed = _changed(value)
        return _value(changed) if changed else ""
    return _value(value)


def _changed(value: Any) -> dict[str, Any]:
    """The keys of a section's default that differ from its class's defaults."""
    plain = type(value)()
    out = {}
    for f in dataclasses.fields(value):
        mine, theirs = getattr(value, f.name), getattr(plain, f.name)
        if mine != theirs:
            out[f.name] = _changed(mine) if dataclasses.is_dataclass(mine) else mine
    return out


def _value(value: Any) -> str:
    def plain(v: Any) -> Any:
        if isinstance(v, tuple | list):
            return [plain(x) for x in v]
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        return v

    text = yaml.safe_dump(plain(value), default_flow_style=True, width=1000).strip()
    return f"`{text.removesuffix('...').strip()}`"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the file differs from a fresh render")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if not args.out.is_file() or args.out.read_text() != text:
            print(f"error: {args.out} is out of date; regenerate it with python -m ddmrl.config.docs", file=sys.stderr)
            return 1
        return 0
    args.out.write_text(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

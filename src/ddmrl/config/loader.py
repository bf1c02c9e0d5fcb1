"""Reading params.yaml: the profile overlay, the resolution of method sections, and validation, with every problem
reported as one line naming the file and the key."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from pydantic import TypeAdapter, ValidationError

from ddmrl.config._base import deep_merge, describe, fields_of
from ddmrl.config.grpo import GRPOConfig, GRPOSection
from ddmrl.config.names import DEFAULT_PROFILE
from ddmrl.config.root import Config
from ddmrl.errors import ConfigError
from ddmrl.methods import METHODS

if TYPE_CHECKING:
    from ddmrl.methods.base import Method

_CONFIG = TypeAdapter(Config)
_RUN_LISTS = ("methods", "seeds")  # the grpo: keys that are not hyperparameters
_SECTION_NAME = re.compile(r"[A-Za-z0-9_]+")


def load(path: str | Path, profile: str | None = None) -> Config:
    """Read ``path``, overlay its profile (``profile``, if given, instead of the file's), resolve the method sections
    and validate everything.

    Raises :class:`ConfigError` with one line naming the file and the key on any problem."""
    path = Path(path)
    raw = read_params(path, profile)
    try:
        return _CONFIG.validate_python(_resolved(raw))
    except ValidationError as e:
        raise ConfigError(f"{path.name}: {describe(e, Config)}") from None
    except ConfigError as e:
        raise ConfigError(f"{path.name}: {e}") from None


def read_params(path: Path, profile: str | None = None) -> dict[str, Any]:
    """params.yaml with its profile's overlay (``profiles/<profile>.yaml`` next to it) merged in, key by key;
    ``profile``: this one instead of the file's ``profile:``."""
    raw = _read_yaml(path)
    if profile is not None:
        raw["profile"] = profile
    profile = raw.get("profile", DEFAULT_PROFILE)
    if not isinstance(profile, str):
        raise ConfigError(f"{path.name}: profile = {profile!r}: must be a profile name")
    if profile != DEFAULT_PROFILE:
        overlay_path = profile_path(path, profile)
        if not overlay_path.exists():
            raise ConfigError(f"{path.name}: profile = {profile!r}: no overlay file {str(overlay_path)!r}")
        raw = deep_merge(raw, _read_yaml(overlay_path))
    return raw


def profile_path(params_path: str | Path, profile: str) -> Path:
    return Path(params_path).parent / "profiles" / f"{profile}.yaml"


def method_config(method: str, shared: Mapping[str, Any] | None = None, /, **section: Any) -> GRPOConfig:
    """The hyperparameters of a run of ``method``, resolved as :func:`load` resolves a method section: the
    method's defaults, then the ``shared`` keys (a ``grpo:`` section; its methods and seeds are ignored) except what
    the method fixes, then ``section``'s keys. Raises :class:`ConfigError` naming the key."""
    shared = {k: v for k, v in (shared or {}).items() if k not in _RUN_LISTS}
    merged = _run_section(method, section, shared, "methods", False)
    params = METHODS[merged["method"]].params
    try:
        return TypeAdapter(params).validate_python(merged)
    except ValidationError as e:
        raise ConfigError(describe(e, params)) from None


# ------------------------------------------------------------------------------------------------ resolution


def _resolved(raw: dict[str, Any]) -> dict[str, Any]:
    """The input of :class:`Config`: ``raw`` with each method section merged with the keys it inherits, tasks named
    without parameters given empty ones (so that their generator's required parameters are checked), and ``raw``
    itself. Values of the wrong shape are left for the schema to refuse."""
    for key in ("raw", "image_sections"):
        if key in raw:
            raise ConfigError(f"{key}: unknown key; allowed: {', '.join(fields_of(Config))}")
    data = {**raw, "raw": raw, "task_params": _with_every_task(raw.get("tasks", Config.tasks), raw.get("task_params"))}
    image = raw.get("image")
    if isinstance(image, dict):
        data["image"] = {**image, "task_params": _with_every_task(image.get("tasks", ()), image.get("task_params"))}
    grpo = _mapping(raw.get("grpo"))
    shared = {k: v for k, v in grpo.items() if k not in _RUN_LISTS}
    sections = {} if raw.get("methods") is None else raw["methods"]
    if not isinstance(sections, dict):
        return data
    listed = _names(grpo.get("methods", GRPOSection.methods))
    # every section is resolved, listed or not: a typo fails even in a section that does not run
    data["methods"] = {
        name: _run_section(name, sections.get(name), shared, "methods", name in listed)
        for name in dict.fromkeys([*listed, *sections])
    }
    image = _mapping(image)
    overrides = {} if image.get("method_overrides") is None else image["method_overrides"]
    if isinstance(overrides, dict):
        image_shared = deep_merge(shared, _mapping(image.get("grpo")))
        where = "image.method_overrides"
        data["image_sections"] = {
            name: _run_section(name, _merged(sections.get(name), overrides.get(name)), image_shared, where, True)
            for name in dict.fromkeys([*_names(image.get("methods", ())), *overrides])
        }
    return data


def _run_section(name: Any, section: Any, shared: dict[str, Any], where: str, listed: bool) -> Any:
    """Section ``name`` merged over the ``shared`` keys that its method does not fix, with its ``method`` set (the
    schema validates it by the method's ``Params``)."""
    section = {} if section is None else section
    if not isinstance(name, str) or not _SECTION_NAME.fullmatch(name) or not isinstance(section, dict):
        return section  # the schema refuses it
    method = section.get("method", name)
    if "method" in section:
        key = f"{where}.{name}.method"
    else:
        key = "grpo.methods" if listed and where == "methods" else f"{where}.{name}"
    m = method_named(method, key)
    fixed = m.fixed()
    return deep_merge({k: v for k, v in shared.items() if k not in fixed}, {**section, "method": method})


def method_named(method: Any, key: str = "method") -> Method:
    """The method a section names (``ddmrl.methods.METHODS``: a built-in name, ``module:attribute`` or an entry
    point), imported; :class:`ConfigError` naming ``key`` when there is none or it cannot be imported."""
    m = METHODS.member(method, key)
    if not issubclass(m.params, GRPOConfig):
        raise ConfigError(f"{key} = {method!r}: its params must subclass ddmrl.config.GRPOConfig")
    return m


def _merged(section: Any, override: Any) -> Any:
    if isinstance(section, dict | None) and isinstance(override, dict | None):
        return deep_merge(section or {}, override or {})
    return override if section is None or isinstance(section, dict) else section


def _with_every_task(tasks: Any, task_params: Any) -> Any:
    if task_params is None:
        task_params = {}
    if not isinstance(task_params, dict) or not isinstance(tasks, list | tuple):
        return task_params
    return {**{t: {} for t in tasks if isinstance(t, str)}, **task_params}


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _names(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list | tuple) else []


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot be read as UTF-8 text ({e})") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise ConfigError(f"{path}{where}: not valid YAML ({getattr(e, 'problem', e)})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: must be a mapping of sections, got {type(data).__name__}")
    return data

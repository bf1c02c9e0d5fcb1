"""Running 4.x-era remote model code under the pinned transformers (5.23): LLaDA's ``modeling_llada.py`` and
MMaDA's ``modeling_mmada.py`` were written for transformers 4.38-4.46 and do not load unchanged.

Each bridge below is applied only when its incompatibility is detected on the class or config at hand (a class
written for 5.x is left alone), and patches that remote class or config object only, never transformers:

* **post_init.** transformers 5 builds per-model state in ``PreTrainedModel.post_init()`` (``all_tied_weights_keys``,
  read by ``from_pretrained`` and ``save_pretrained``); ``LLaDAModelLM.__init__`` never calls it. Detected when no
  ``__init__`` of the class's own hierarchy mentions ``post_init``; bridged by calling it at the end of ``__init__``
  when the instance lacks that state.
* **tie_weights.** transformers 5 calls ``tie_weights(missing_keys=..., recompute_mapping=False)``; LLaDA's
  ``tie_weights(self)`` takes no arguments. Detected from its signature; bridged by dropping the keywords (LLaDA's
  method ties by its own ``weight_tying`` flag, which is what it always did).
* **use_cache.** transformers 5 treats ``use_cache`` as a generation parameter and drops it from a config's keyword
  arguments, so ``LLaDAConfig`` has no ``use_cache`` while LLaDA's forward reads ``config.use_cache``. Detected on
  the loaded config; bridged by setting it from ``config.json`` (default ``False``, ``LLaDAConfig``'s own default).

What cannot be bridged fails with :class:`IncompatibleRemoteCode`, one line naming the file, the class and the
incompatibility (for example a ``tie_weights`` that needs positional arguments, or a load that raises).
"""

from __future__ import annotations

import functools
import inspect
import json
from pathlib import Path
from typing import Any

import transformers
from transformers import PreTrainedModel

__all__ = ["IncompatibleRemoteCode", "bridge_class", "bridge_config", "load_pretrained"]

_BRIDGED = "_ddmrl_compat"  # set on a bridged class: what was bridged (and: never bridge it twice)


class IncompatibleRemoteCode(RuntimeError):
    """Remote model code that ddmrl cannot run under the installed transformers."""


def _where(cls: type) -> str:
    try:
        return f"{Path(inspect.getsourcefile(cls) or '?').name}:{cls.__name__}"
    except TypeError:
        return cls.__name__


def _fail(cls: type, what: str) -> IncompatibleRemoteCode:
    return IncompatibleRemoteCode(
        f"{_where(cls)} is incompatible with transformers {transformers.__version__}: {what} "
        "(ddmrl.models.compat bridges post_init, tie_weights and use_cache only; see docs/real_scale.md)"
    )


def _own_classes(cls: type) -> list[type]:
    """``cls`` and its bases up to (not including) ``PreTrainedModel``: the remote code's own classes."""
    return [k for k in cls.__mro__ if issubclass(k, PreTrainedModel) and k is not PreTrainedModel]


def _calls_post_init(cls: type) -> bool:
    """Whether some ``__init__`` between ``cls`` and ``PreTrainedModel`` calls ``post_init`` (by its source)."""
    for klass in _own_classes(cls):
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        try:
            if "post_init(" in inspect.getsource(init):
                return True
        except (OSError, TypeError):
            return True  # source unavailable: assume a 5.x-style class and leave it alone
    return False


def _tie_weights_is_legacy(cls: type) -> bool:
    params = inspect.signature(cls.tie_weights).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return False
    return not {"missing_keys", "recompute_mapping"} <= set(params)


def bridge_class(cls: type) -> list[str]:
    """Patch the remote model class ``cls`` in place where it misses what transformers 5 calls; returns what was
    bridged (empty for a 5.x-ready class). Idempotent. Raises :class:`IncompatibleRemoteCode`."""
    if not (isinstance(cls, type) and issubclass(cls, PreTrainedModel)):
        raise _fail(cls, "the model class is not a transformers PreTrainedModel")
    if _BRIDGED in cls.__dict__:
        return list(cls.__dict__[_BRIDGED])
    bridged = []
    if _tie_weights_is_legacy(cls):
        legacy_tie = cls.tie_weights
        required = [n for n, p in list(inspect.signature(legacy_tie).parameters.items())[1:] if p.default is p.empty]
        if required:
            raise _fail(cls, f"tie_weights() requires arguments transformers does not pass ({', '.join(required)})")

        @functools.wraps(legacy_tie)
        def tie_weights(self, missing_keys=None, recompute_mapping=True):  # 5.x's keywords, dropped
            return legacy_tie(self)

        cls.tie_weights = tie_weights
        bridged.append("tie_weights() takes no keyword arguments")
    if not _calls_post_init(cls):
        legacy_init = cls.__init__

        @functools.wraps(legacy_init)
        def __init__(self, *args, **kwargs):
            legacy_init(self, *args, **kwargs)
            if "all_tied_weights_keys" not in vars(self):
                self.post_init()

        cls.__init__ = __init__
        bridged.append("__init__ never calls post_init()")
    setattr(cls, _BRIDGED, tuple(bridged))
    return bridged


def _reads_use_cache(cls: type) -> bool:
    for klass in _own_classes(cls):
        try:
            if "config.use_cache" in inspect.getsource(klass):
                return True
        except (OSError, TypeError):
            continue
    return False


def bridge_config(cls: type, config: Any, config_json: str | Path) -> list[str]:
    """Restore ``use_cache`` on ``config`` when transformers dropped it and the model class ``cls`` reads it (see
    the module docstring); ``config_json`` is the checkpoint's ``config.json``. Returns what was bridged."""
    if hasattr(config, "use_cache") or not _reads_use_cache(cls):
        return []
    try:
        raw = json.loads(Path(config_json).read_text())
    except (OSError, json.JSONDecodeError):
        raw = {}
    config.use_cache = bool(raw.get("use_cache", False))
    return ["config has no use_cache"]


def load_pretrained(local: Path, cls: type, config: Any, **kwargs: Any) -> Any:
    """``cls.from_pretrained(local, config=config, **kwargs)`` after :func:`bridge_class` and :func:`bridge_config`,
    refusing a load that leaves any of the model's weights missing from the checkpoint (they would be random).

    Raises :class:`IncompatibleRemoteCode` (one line) when the class cannot run here.
    """
    bridge_class(cls)
    bridge_config(cls, config, Path(local) / "config.json")
    try:
        model, info = cls.from_pretrained(local, config=config, output_loading_info=True, **kwargs)
    except (AttributeError, TypeError, NotImplementedError) as e:
        first = next((line.strip() for line in str(e).splitlines() if line.strip()), "")
        raise _fail(cls, f"loading raised {type(e).__name__}: {first}") from e
    missing = sorted(info.get("missing_keys") or ())
    if missing:
        raise IncompatibleRemoteCode(
            f"{local}: {len(missing)} weights of {_where(cls)} are not in the checkpoint (first: {missing[0]}); "
            "they would be left at random values"
        )
    return model

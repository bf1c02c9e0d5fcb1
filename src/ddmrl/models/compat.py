"""Running 4.x-era remote model code under the pinned transformers (5.23): LLaDA's ``modeling_llada.py``,
MMaDA's ``modeling_mmada.py`` and Dream's ``modeling_dream.py`` were written for transformers 4.38-4.46 and do not
load unchanged.

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
* **default rotary parameters.** transformers 5 dropped the ``"default"`` entry of
  ``modeling_rope_utils.ROPE_INIT_FUNCTIONS`` (each 5.x model computes plain RoPE itself), and a 5.x config reports
  ``rope_scaling = {"rope_type": "default", ...}`` even when ``config.json`` says ``null``; Dream's
  ``DreamRotaryEmbedding`` (Qwen2's 4.46 code) looks the type up there and fails with ``KeyError: 'default'``.
  Detected when a module of the class's own hierarchy holds a ``ROPE_INIT_FUNCTIONS`` table without ``"default"``;
  bridged by rebinding that module's name (never transformers' table) to a copy with ``"default"`` added: the 4.x
  formula, ``inv_freq = 1 / theta ** (arange(0, dim, 2) / dim)``, ``dim = head_dim * partial_rotary_factor``, no
  attention scaling.
* **GenerationConfig.validate.** transformers 5 calls ``validate(user_set_attributes=...)`` (from ``update``, so
  from ``GenerationConfig.from_pretrained`` and ``from_model_config``); Dream's ``DreamGenerationConfig.validate(self,
  is_init=False, strict=True)`` (a no-op) takes no such keyword, and its ``DreamModel.from_pretrained`` loads one.
  Detected on every ``GenerationConfig`` subclass defined in a module of the class's hierarchy (its mixins
  included) whose ``validate`` takes neither the keyword nor ``**kwargs``; bridged by passing on only the keywords
  its signature names.
* **list-form tied weights.** transformers 5 reads ``_tied_weights_keys`` as a ``{target: source}`` mapping
  (``save_pretrained`` calls ``.keys()``); LLaDA 2.x's ``LLaDA2MoeModelLM`` declares 4.x's list
  ``["lm_head.weight"]``. Detected on the classes of the hierarchy; bridged by a property mapping each listed target to
  the input embeddings' weight (what 4.x tied it to, and only when ``tie_word_embeddings``, as 5.x still checks).
* **rotary buffers after loading.** transformers 5 builds the model on the meta device and re-initialises
  non-persistent buffers through ``PreTrainedModel._init_weights``, whose rotary branch never runs for a class that
  overrides ``_init_weights`` (Dream's does): the loaded ``inv_freq`` is uninitialised memory. Detected after
  :func:`load_pretrained` on every ``*RotaryEmbedding`` module with a non-persistent ``inv_freq`` when the class's
  own hierarchy overrides ``_init_weights``; bridged by the module's own ``reset_parameters()`` (Dream's, which its
  ``reset_rope_parameters`` calls), else, for a 4.x-style module holding ``rope_init_fn`` and ``config`` (LLaDA 2.x's
  ``LLaDA2MoeRotaryEmbedding``, which has no ``reset_parameters``), by recomputing ``rope_init_fn(config)`` as its
  ``__init__`` does; a module with neither fails.

What cannot be bridged fails with :class:`IncompatibleRemoteCode`, one line naming the file, the class and the
incompatibility (for example a ``tie_weights`` that needs positional arguments, or a load that raises).
"""

from __future__ import annotations

import functools
import inspect
import json
import sys
from pathlib import Path
from typing import Any

import torch
import transformers
from transformers import GenerationConfig, PreTrainedModel

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
        "(ddmrl.models.compat bridges post_init, tie_weights, use_cache, default RoPE, GenerationConfig.validate, "
        "from_pretrained overrides, list-form tied weights and rotary buffers only; see docs/real_scale.md)"
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


def _default_rope_parameters(config: Any = None, device: Any = None, seq_len: int | None = None, **rope_kwargs):
    """transformers 4.x's ``"default"`` RoPE initialisation: ``(inv_freq [dim / 2], attention scaling 1.0)``, from
    ``rope_kwargs`` ``base`` and ``dim`` when given (4.x's legacy call), else from ``config``."""
    if rope_kwargs:
        base, dim = rope_kwargs["base"], int(rope_kwargs["dim"])
    else:
        base = getattr(config, "rope_theta", None) or (getattr(config, "rope_parameters", None) or {})["rope_theta"]
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        dim = int(head_dim * (getattr(config, "partial_rotary_factor", None) or 1.0))
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float().to(device) / dim))
    return inv_freq, 1.0


def _rope_tables_without_default(cls: type) -> list[Any]:
    """The modules of ``cls``'s own hierarchy whose ``ROPE_INIT_FUNCTIONS`` (imported from transformers) has no
    ``"default"`` entry."""
    modules = {k.__module__: sys.modules.get(k.__module__) for k in _own_classes(cls)}
    return [
        m
        for m in modules.values()
        if m is not None
        and isinstance(getattr(m, "ROPE_INIT_FUNCTIONS", None), dict)
        and "default" not in m.ROPE_INIT_FUNCTIONS
    ]


def _remote_modules(cls: type) -> list[Any]:
    """The modules defining ``cls`` and its bases (mixins included), transformers' and torch's own left out."""
    names = dict.fromkeys(k.__module__ for k in cls.__mro__)
    skip = ("transformers", "torch", "builtins")
    return [sys.modules[n] for n in names if n in sys.modules and n.split(".")[0] not in skip]


def _legacy_generation_configs(cls: type) -> list[type]:
    """``GenerationConfig`` subclasses defined in the modules of ``cls``'s hierarchy whose ``validate`` cannot take
    the keywords transformers 5 passes (``user_set_attributes``)."""
    found = []
    for module in _remote_modules(cls):
        for value in list(vars(module).values()):
            if (
                isinstance(value, type)
                and issubclass(value, GenerationConfig)
                and value is not GenerationConfig
                and _BRIDGED not in value.__dict__
            ):
                params = inspect.signature(value.validate).parameters
                if "user_set_attributes" not in params and not any(p.kind is p.VAR_KEYWORD for p in params.values()):
                    found.append(value)
    return found


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
    for module in _rope_tables_without_default(cls):
        # a copy bound to the remote module's own name: transformers' table stays as it is
        module.ROPE_INIT_FUNCTIONS = {**module.ROPE_INIT_FUNCTIONS, "default": _default_rope_parameters}
        bridged.append("ROPE_INIT_FUNCTIONS has no 'default'")
    for config_class in _legacy_generation_configs(cls):
        legacy_validate = config_class.validate
        accepted = set(list(inspect.signature(legacy_validate).parameters)[1:])

        @functools.wraps(legacy_validate)
        def validate(self, *args, _legacy=legacy_validate, _accepted=frozenset(accepted), **kwargs):
            return _legacy(self, *args, **{k: v for k, v in kwargs.items() if k in _accepted})

        config_class.validate = validate
        setattr(config_class, _BRIDGED, ("validate() takes no user_set_attributes",))
        bridged.append(f"{config_class.__name__}.validate() takes no user_set_attributes")
    bridged += _bridge_tied_weights_list(cls)
    setattr(cls, _BRIDGED, tuple(bridged))
    return bridged


def _bridge_tied_weights_list(cls: type) -> list[str]:
    """4.x's list form of ``_tied_weights_keys`` (LLaDA 2.x's ``["lm_head.weight"]``) on a class of ``cls``'s own
    hierarchy -> 5.x's ``{target: source}`` mapping, the source being the input embeddings' weight as 4.x tied it
    (resolved on the instance by a property: the class does not know its parameter names). Returns what was bridged."""
    bridged = []
    for klass in _own_classes(cls):
        legacy = klass.__dict__.get("_tied_weights_keys")
        if isinstance(legacy, (list, tuple)):
            klass._tied_weights_keys = property(functools.partial(_tied_mapping, targets=tuple(legacy)))
            bridged.append(f"{klass.__name__}._tied_weights_keys is a list")
    return bridged


def _tied_mapping(model: Any, targets: tuple[str, ...]) -> dict[str, str]:
    """``{target: name of the input embeddings' weight}`` for each of ``targets`` (see _bridge_tied_weights_list)."""
    weight = model.get_input_embeddings().weight
    names = [n for n, p in model.named_parameters(remove_duplicate=False) if p is weight and n not in targets]
    return dict.fromkeys(targets, names[0]) if names else {}


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


def _overrides_from_pretrained(cls: type) -> bool:
    """Whether the remote code's own hierarchy overrides ``from_pretrained`` (Dream's does)."""
    return any("from_pretrained" in klass.__dict__ for klass in _own_classes(cls))


def _not_in_checkpoint(model: Any, local: Path) -> list[str]:
    """The model's weights that no ``*.safetensors`` file of ``local`` holds (tied weights left out); empty when the
    checkpoint has no safetensors files (nothing to compare with)."""
    from safetensors import safe_open

    names: set[str] = set()
    for f in sorted(Path(local).glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as handle:
            names.update(handle.keys())
    tied = set(getattr(model, "all_tied_weights_keys", None) or ())
    return sorted(k for k in model.state_dict() if names and k not in names and k not in tied)


def _reset_rotary_buffers(model: Any) -> list[str]:
    """Recompute the rotary ``inv_freq`` buffers a meta-device load leaves uninitialised (see the module docstring);
    returns the modules reset."""
    if not any("_init_weights" in klass.__dict__ for klass in _own_classes(type(model))):
        return []  # transformers' own _init_weights re-initialises rotary buffers
    reset = []
    for name, module in model.named_modules():
        if "RotaryEmbedding" in type(module).__name__ and "inv_freq" in module._non_persistent_buffers_set:
            if callable(getattr(module, "reset_parameters", None)):
                module.reset_parameters()
            elif not _rebuild_hf_rotary(module):
                what = f"{name} ({type(module).__name__}) has no reset_parameters() or rope_init_fn for inv_freq"
                raise _fail(type(model), what)
            reset.append(name)
    return reset


def _rebuild_hf_rotary(module: Any) -> bool:
    """Rebuild ``inv_freq`` of a transformers-4.x-style rotary module (``rope_init_fn(config, device)``, as
    LLaDA 2.x's ``LLaDA2MoeRotaryEmbedding``), which has no ``reset_parameters``; False when it is not one. The
    module's ``original_inv_freq`` (read by dynamic RoPE) follows, as its ``__init__`` sets it."""
    init_fn, config = getattr(module, "rope_init_fn", None), getattr(module, "config", None)
    if not callable(init_fn) or config is None:
        return False
    device = module.inv_freq.device if module.inv_freq.device.type != "meta" else None
    inv_freq, module.attention_scaling = init_fn(config, device)
    module.register_buffer("inv_freq", inv_freq, persistent=False)
    module.original_inv_freq = module.inv_freq
    return True


def load_pretrained(local: Path, cls: type, config: Any, **kwargs: Any) -> Any:
    """``cls.from_pretrained(local, config=config, **kwargs)`` after :func:`bridge_class` and :func:`bridge_config`,
    refusing a load that leaves any of the model's weights missing from the checkpoint (they would be random).

    A class whose own code overrides ``from_pretrained`` is loaded without ``output_loading_info`` (Dream's override
    sets ``generation_config`` on whatever the base method returns, a tuple when loading info is asked for, in any
    transformers version); its missing weights are then found from the checkpoint's safetensors names.

    Raises :class:`IncompatibleRemoteCode` (one line) when the class cannot run here.
    """
    bridge_class(cls)
    bridge_config(cls, config, Path(local) / "config.json")
    try:
        if _overrides_from_pretrained(cls):
            model = cls.from_pretrained(local, config=config, **kwargs)
            missing = _not_in_checkpoint(model, Path(local))
        else:
            model, info = cls.from_pretrained(local, config=config, output_loading_info=True, **kwargs)
            missing = sorted(info.get("missing_keys") or ())
    except (AttributeError, TypeError, NotImplementedError) as e:
        first = next((line.strip() for line in str(e).splitlines() if line.strip()), "")
        raise _fail(cls, f"loading raised {type(e).__name__}: {first}") from e
    _reset_rotary_buffers(model)
    if missing:
        raise IncompatibleRemoteCode(
            f"{local}: {len(missing)} weights of {_where(cls)} are not in the checkpoint (first: {missing[0]}); "
            "they would be left at random values"
        )
    return model

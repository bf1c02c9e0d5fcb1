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
* **rotary buffers after loading.** transformers 5 builds the model on the meta device and re-initialises
  non-persistent buffers through ``PreTrainedModel._init_weights``, whose rotary branch never runs for a class that
  overrides ``_init_weights`` (Dream's does): the loaded ``inv_freq`` is uninitialised memory. Detected after
  :func:`load_pretrained` on every ``*RotaryEmbedding`` module with a non-persistent ``inv_freq`` when the class's
  own hierarchy overrides ``_init_weights``; bridged by the module's own ``reset_parameters()`` (Dream's, which its
  ``reset_rope_parameters`` calls), else its own ``rope_init_fn(config, device)`` as its ``__init__`` computes it
  (SDAR's); a module with neither fails.

* **_tied_weights_keys.** 4.x classes list the weights tied to the input embeddings (``["lm_head.weight"]``,
  Dream's and SDAR's); transformers 5 reads a ``{target: source}`` dict (``.keys()``), so ``save_pretrained`` fails
  (and loading too when ``tie_word_embeddings`` is true). Detected on the classes of the hierarchy that declare a
  list; bridged by a property giving each listed name the input embeddings' weight as its source (4.x's meaning:
  ``tie_weights`` ties the output embeddings to the input ones), read only where the config ties them.
* **names gone from transformers.utils** (import time). SDAR's ``modeling_sdar.py`` imports ``LossKwargs`` from
  ``transformers.utils`` (removed in 5.x, where ``TransformersKwargs`` took its place); it only serves as a base of
  the ``KwargsForCausalLM`` typing class. Detected from the module file's top-level imports (outside ``try``) when
  ``transformers.utils`` lacks the name; bridged by :func:`import_bridges`, which lends 4.5x's definition (a
  ``TypedDict`` with ``num_items_in_batch``) to ``transformers.utils`` only while the remote module is imported
  and takes it back afterwards. Another missing name fails in one line.
* **flash_attn's fused RMSNorm** (import time). ``modeling_sdar.py`` imports
  ``flash_attn.ops.triton.layer_norm.rms_norm_fn`` at module level (a Triton kernel; every ``SDARRMSNorm`` calls
  it), so the file cannot even be imported without flash_attn. Detected when that import is at the top level and
  ``flash_attn`` is not installed; bridged, for that import only, by :func:`rms_norm_fn`, a pure-PyTorch stand-in
  (y = x / sqrt(mean(x^2) + eps) * w in float32, cast back to x's dtype: what the kernel computes with no bias, no
  residual, no dropout), lent to ``sys.modules`` while the module is imported. With flash_attn installed the real
  kernel is imported, unchanged. SDAR's other flash_attn imports sit in a ``try`` and stay absent: its single-token
  decoding branch (a query of length 1 with a cache) calls ``flash_attn_func``, which ``ddmrl.models.sdar`` never
  reaches without flash_attn (it evaluates such a position as the first of two).
* **indexing a cache by layer.** SDAR's attention reads a layer's cached keys and values as
  ``past_key_value[layer_idx]`` (4.x's ``Cache.__getitem__``, gone from 5.x's ``DynamicCache``). A caller passes
  :func:`layer_indexable_cache`: a 5.x ``DynamicCache`` that also answers ``cache[i] = (keys_i, values_i)``;
  transformers' class is left as it is.

What cannot be bridged fails with :class:`IncompatibleRemoteCode`, one line naming the file, the class and the
incompatibility (for example a ``tie_weights`` that needs positional arguments, or a load that raises).
"""

from __future__ import annotations

import ast
import contextlib
import functools
import importlib.machinery
import importlib.util
import inspect
import json
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypedDict

import torch
import transformers
from transformers import DynamicCache, GenerationConfig, PreTrainedModel

__all__ = [
    "IncompatibleRemoteCode",
    "bridge_class",
    "bridge_config",
    "import_bridges",
    "layer_indexable_cache",
    "load_pretrained",
    "rms_norm_fn",
]

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
        "from_pretrained overrides, rotary buffers, _tied_weights_keys, LossKwargs, flash_attn's rms_norm_fn and "
        "cache indexing only; see docs/real_scale.md and docs/families.md)"
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


def _legacy_tied_weights_keys(cls: type) -> list[type]:
    """The classes of ``cls``'s own hierarchy that declare ``_tied_weights_keys`` in 4.x's form (a list of names)."""
    return [k for k in _own_classes(cls) if isinstance(k.__dict__.get("_tied_weights_keys"), (list, tuple))]


def _tied_to_input_embeddings(model: Any, keys: tuple[str, ...]) -> dict[str, str]:
    """5.x's ``{target: source}`` form of 4.x's list ``keys``: each tied to the input embeddings' weight."""
    weight = model.get_input_embeddings().weight
    source = next((name for name, p in model.named_parameters() if p is weight), None)
    return {k: source for k in keys} if source else {}


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
    for klass in _legacy_tied_weights_keys(cls):
        listed = tuple(klass.__dict__["_tied_weights_keys"])
        klass._tied_weights_keys = property(functools.partial(_tied_to_input_embeddings, keys=listed))
        bridged.append(f"{klass.__name__}._tied_weights_keys is a list")
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
            elif callable(getattr(module, "rope_init_fn", None)) and hasattr(module, "config"):
                # SDAR's (Qwen3's 4.5x code) has no reset_parameters: its own __init__ computation, repeated
                inv_freq, _ = module.rope_init_fn(module.config, module.inv_freq.device)
                module.register_buffer("inv_freq", inv_freq, persistent=False)
                module.original_inv_freq = module.inv_freq
            else:
                what = f"{name} ({type(module).__name__}) has no reset_parameters() or rope_init_fn for inv_freq"
                raise _fail(type(model), what)
            reset.append(name)
    return reset


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


# ------------------------------------------------------------------------------------------------ import time


class LossKwargs(TypedDict, total=False):
    """transformers 4.5x's ``transformers.utils.LossKwargs`` (removed in 5.x): keyword arguments of the loss."""

    num_items_in_batch: int | None


def rms_norm_fn(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    residual: torch.Tensor | None = None,
    eps: float = 1e-6,
    dropout_p: float = 0.0,
    prenorm: bool = False,
    **unsupported: Any,
) -> torch.Tensor:
    """Pure-PyTorch stand-in for ``flash_attn.ops.triton.layer_norm.rms_norm_fn`` as SDAR calls it
    (``rms_norm_fn(x, weight=w, bias=None, eps=eps)``): RMSNorm y = x / sqrt(mean(x^2) + eps) * w [..., D], computed
    in float32 like the kernel and returned in ``x``'s dtype. The kernel's fused residual, dropout, pre-norm and
    second-weight paths are refused (SDAR never uses them)."""
    used = [k for k, v in unsupported.items() if v not in (None, False, 0.0)]
    if bias is not None or residual is not None or dropout_p or prenorm or used:
        what = ", ".join(used or ["bias/residual/dropout/prenorm"])
        raise NotImplementedError(f"ddmrl's rms_norm_fn stand-in computes plain RMSNorm only (got {what})")
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return (h * weight.float()).to(x.dtype)


#: names a remote module may import from ``transformers.utils`` that 5.x removed, and what ddmrl lends for them
_GONE_FROM_TRANSFORMERS_UTILS = {"LossKwargs": LossKwargs}
#: (module, name) of a flash_attn kernel imported at module level -> ddmrl's pure-PyTorch stand-in
_FLASH_ATTN_STAND_INS = {("flash_attn.ops.triton.layer_norm", "rms_norm_fn"): rms_norm_fn}


def _top_level_imports(module_file: Path) -> list[tuple[str, str]]:
    """``(module, name)`` of every ``from module import name`` at the top level of ``module_file`` (those inside
    ``try`` are optional and left out, as transformers' ``check_imports`` leaves them)."""
    tree = ast.parse(Path(module_file).read_text(encoding="utf-8"))
    return [
        (node.module, alias.name)
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.module and not node.level
        for alias in node.names
    ]


def _stand_in_module(name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
    module.__path__ = []
    return module


@contextlib.contextmanager
def import_bridges(module_file: str | Path) -> Iterator[list[str]]:
    """Within this context the remote module ``module_file`` can be imported (and transformers' ``check_imports``
    passes) where it imports, at its top level, a name 5.x removed from ``transformers.utils`` or a flash_attn
    kernel that is not installed (see the module docstring); yields what was bridged (empty: nothing is touched).
    Everything lent is taken back on exit: the imported module keeps its own references. Raises
    :class:`IncompatibleRemoteCode` (one line) for a missing name or kernel ddmrl has no stand-in for."""
    hf_utils = transformers.utils
    where = Path(module_file).name
    lent_names, lent_modules, bridged = [], [], []
    flash_missing = importlib.util.find_spec("flash_attn") is None
    try:
        for module, name in _top_level_imports(Path(module_file)):
            if module == "transformers.utils" and not hasattr(hf_utils, name):
                if name not in _GONE_FROM_TRANSFORMERS_UTILS:
                    raise IncompatibleRemoteCode(
                        f"{where} imports transformers.utils.{name}, which transformers {transformers.__version__} "
                        "no longer has and ddmrl.models.compat has no stand-in for"
                    )
                setattr(hf_utils, name, _GONE_FROM_TRANSFORMERS_UTILS[name])
                lent_names.append(name)
                bridged.append(f"transformers.utils.{name} is gone")
            elif module.split(".")[0] == "flash_attn" and flash_missing:
                stand_in = _FLASH_ATTN_STAND_INS.get((module, name))
                if stand_in is None:
                    raise IncompatibleRemoteCode(
                        f"{where} imports {module}.{name} at module level; flash_attn is not installed and "
                        "ddmrl.models.compat has no pure-PyTorch stand-in for it (install flash_attn on a GPU machine)"
                    )
                parts = module.split(".")
                for i in range(1, len(parts) + 1):
                    prefix = ".".join(parts[:i])
                    if prefix not in sys.modules:
                        sys.modules[prefix] = _stand_in_module(prefix)
                        lent_modules.append(prefix)
                setattr(sys.modules[module], name, stand_in)
                bridged.append(f"{module}.{name} (flash_attn) is not installed")
        yield bridged
    finally:
        for name in lent_names:
            delattr(hf_utils, name)
        for prefix in reversed(lent_modules):
            sys.modules.pop(prefix, None)


class _LayerIndexableCache(DynamicCache):
    """A transformers 5 ``DynamicCache`` that also answers 4.x's ``cache[layer_idx] -> (keys, values)``."""

    def __getitem__(self, layer_idx: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not 0 <= layer_idx < len(self.layers):
            raise IndexError(f"the cache holds {len(self.layers)} layers; layer {layer_idx} was asked for")
        layer = self.layers[layer_idx]
        return layer.keys, layer.values


def layer_indexable_cache() -> DynamicCache:
    """An empty KV cache that remote code written for transformers 4.x can index by layer (see the module
    docstring); ``DynamicCache`` itself when it still supports indexing."""
    return DynamicCache() if hasattr(DynamicCache, "__getitem__") else _LayerIndexableCache()

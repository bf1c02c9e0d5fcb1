"""Model families behind one interface: what the rest of ddmrl needs from a masked diffusion model.

The samplers, likelihoods and trainers only use ``model(input_ids).logits`` [B, L, V] and a mask token id. An
adapter adds, per family, the mask id, how a prompt is built and tokenised, and (MMaDA) the text-to-image
layout and image decoding:

* ``tiny``: the embedded TinyDDM (``ddmrl.models.tiny``), prompts used as they are.
* ``llada``: LLaDA-8B-Instruct (Nie et al. 2025; ``GSAI-ML/LLaDA-8B-Instruct``), model class ``LLaDAModelLM``
  from the checkpoint's own ``modeling_llada.py`` (remote code, run under transformers 5 through
  ``ddmrl.models.compat``), mask id 126336. Padding never reaches it as an ``attention_mask`` (which would make it
  causal, see :meth:`LLaDAAdapter.logits`). Prompts are built as d1 does
  (Zhao et al. 2025, ``eval/*.py``): one user turn ``system_prompt + "\\n\\n" + question`` through the chat
  template with ``add_generation_prompt=True``, then the literal ``<reasoning>`` appended (assistant prefill);
  tokenised with the tokenizer's defaults, left-padded (pad = EOS, never the mask id).
* ``mmada``: MMaDA-8B-Base (Yang et al. 2025), text as LLaDA, plus the T2I layout of ``ddmrl.models.mmada``;
  ``MMadaModelLM`` and MAGVIT-v2 come from the user's checkout of Gen-Verse/MMaDA (``mmada_code``; its imports:
  ``pip install -e ".[mmada]"``).
* ``hf_masked_lm``: any ``AutoModelForMaskedLM`` checkpoint and its tokenizer's ``mask_token_id``.
* ``dream`` and further families: each in its own module (``ddmrl.models.dream``), registered in
  ``ddmrl.models.FAMILIES`` with its loader; an adapter's :meth:`ModelAdapter.view` makes a family whose logits mean
  something else (Dream's shift) read like the others.

:func:`load_model` never downloads: ``path_or_id`` is a local directory (the download stage's output, see
``ddmrl.hub``) or a hub id already in the Hugging Face cache; anything else fails at once with the command that
downloads it. Remote code runs only with ``trust_remote_code: true``, and for a hub id only at a pinned commit.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import torch
from transformers import AutoConfig, AutoModelForMaskedLM, AutoTokenizer, BatchEncoding
from transformers.dynamic_module_utils import get_class_from_dynamic_module

from ddmrl import config
from ddmrl.config import ConfigError
from ddmrl.hub import PINNED_REVISIONS, check_revision, is_local, resolve_local
from ddmrl.models import (
    FAMILIES,
    compat,
    tiny_block,  # noqa: F401  registers TinyBlockDDM with the Auto classes
)
from ddmrl.models import mmada as mm
from ddmrl.models.tiny import load_saved

__all__ = [
    "LLADA_MASK_ID",
    "LORA_TARGETS",
    "LLaDAAdapter",
    "MMaDAAdapter",
    "MaskedLMAdapter",
    "ModelAdapter",
    "ModelSpec",
    "TinyAdapter",
    "load_model",
]

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "auto": "auto"}
LLADA_MASK_ID = 126336  # <|mdm_mask|> of LLaDA and MMaDA (LLaDA's ``generate.py``)
#: LoRA targets of LLaDA and MMaDA (peft's regular-expression form, by LLaDA's names, which MMaDA keeps): every
#: block's attention (q_proj, k_proj, v_proj, attn_out) and SwiGLU MLP (ff_proj, up_proj, ff_out) projections; never
#: the output head ``model.transformer.ff_out``, which a bare ``ff_out`` also selects (``ddmrl.models.lora``)
LORA_TARGETS = r".*\.blocks\.\d+\.(q_proj|k_proj|v_proj|attn_out|ff_proj|up_proj|ff_out)"
REASONING_PREFILL = "<reasoning>"  # d1's assistant prefill (add_reasoning=True)


class ModelSpec(config.ModelSpec):
    """Which model to load (the ``model:`` keys of a real-scale profile), validated by ``ddmrl.config.ModelSpec``."""

    @property
    def torch_dtype(self) -> torch.dtype | str:
        return DTYPES[self.dtype]


# ------------------------------------------------------------------------------------------------ adapters


class ModelAdapter:
    """Per-family glue: mask id, prompt text, tokenisation, and the forward call that returns logits."""

    kind = "base"

    def __init__(self, tokenizer: Any, mask_token_id: int) -> None:
        self.tokenizer = tokenizer
        self.mask_token_id = int(mask_token_id)
        if tokenizer.pad_token_id is not None and tokenizer.pad_token_id == self.mask_token_id:
            raise ValueError(
                f"the tokenizer's pad id equals the mask id {self.mask_token_id}: padded prompts would read as masks"
            )

    @property
    def pad_token_id(self) -> int | None:
        return self.tokenizer.pad_token_id

    @property
    def eos_token_id(self) -> int | None:
        return self.tokenizer.eos_token_id

    def build_prompt(self, question: str, system_prompt: str | None = None) -> str:
        """The model input text: ``system_prompt + "\\n\\n" + question`` (or the question alone)."""
        return question if system_prompt is None else system_prompt + "\n\n" + question

    def encode_prompts(self, prompts: Sequence[str]) -> BatchEncoding:
        """``input_ids`` and ``attention_mask`` [B, Lp], left-padded to the longest, tokenizer's default special
        tokens (as d1's ``tokenizer(prompts, padding_side="left", padding="longest")``)."""
        return self.tokenizer(list(prompts), padding="longest", padding_side="left", return_tensors="pt")

    def view(self, model: Any) -> Any:
        """``model`` as every ddmrl consumer reads it (``model(ids).logits[:, i]`` predicting the token at i);
        itself unless the family says otherwise (Dream's shift: ``ddmrl.models.dream.Aligned``)."""
        return model

    def logits(self, model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """[B, L] -> [B, L, V]; ``attention_mask`` is passed on only when given."""
        if attention_mask is None:
            return model(input_ids).logits
        return model(input_ids, attention_mask=attention_mask).logits


class TinyAdapter(ModelAdapter):
    """The embedded TinyDDM: the task's prompt strings are already the model input."""

    kind = "tiny"

    def logits(self, model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        return model(input_ids).logits  # TinyDDM attends everywhere; prompts of a task have one length


class MaskedLMAdapter(ModelAdapter):
    """Any ``AutoModelForMaskedLM``: mask id = the tokenizer's ``mask_token_id``."""

    kind = "hf_masked_lm"


class LLaDAAdapter(ModelAdapter):
    """LLaDA-8B-Instruct with d1's prompt format (chat template + ``<reasoning>`` prefill)."""

    kind = "llada"

    def build_prompt(self, question: str, system_prompt: str | None = None, add_reasoning: bool = True) -> str:
        """d1: ``apply_chat_template([{"role": "user", "content": system_prompt + "\\n\\n" + question}],
        add_generation_prompt=True, tokenize=False)`` + ``"<reasoning>"`` when ``add_reasoning``."""
        content = super().build_prompt(question, system_prompt)
        text = self.tokenizer.apply_chat_template(
            [{"role": "user", "content": content}], add_generation_prompt=True, tokenize=False
        )
        return text + REASONING_PREFILL if add_reasoning else text

    def logits(self, model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """[B, L] -> [B, L, V], attention bidirectional whatever the padding.

        LLaDA's forward turns an ``attention_mask`` holding any 0 into *causal* attention for the whole batch
        (``LLaDAModel.forward`` adds its mask to the causal bias), so a padding mask is never passed as one:

        * no mask (d1's handling, as in d1's and LLaDA's ``generate`` and every ddmrl sampler and trainer): left
          pads (EOS) are attended like any token;
        * a mask with 0s goes in as MMaDA's ``attention_bias`` (``ddmrl.models.mmada.attention_bias``): pads neither
          attend nor are attended, so with LLaDA's rotary positions a padded row's logits are the unpadded row's.
        """
        if attention_mask is None or bool(attention_mask.all()):
            return model(input_ids).logits
        return model(input_ids, attention_bias=mm.attention_bias(attention_mask)).logits


class MMaDAAdapter(LLaDAAdapter):
    """MMaDA-8B-Base: LLaDA's text interface plus text-to-image (``ddmrl.models.mmada``)."""

    kind = "mmada"

    def __init__(
        self,
        tokenizer: Any,
        mask_token_id: int,
        mmada_code: str | None = None,
        vq_path_or_id: str | None = None,
        vq_revision: str | None = None,
    ) -> None:
        super().__init__(tokenizer, mask_token_id)
        self.mmada_code = mmada_code
        self.vq_path_or_id = vq_path_or_id
        self.vq_revision = vq_revision
        self._vq: Any = None

    def t2i_layout(self, max_seq_length: int = 512, num_image_tokens: int = 1024, **ids: int) -> mm.T2ILayout:
        """The T2I layout for this tokenizer: BOS/EOS from it, code 0 at ``len(tokenizer)`` (as MMaDA), mask id
        of the model; ``<|t2i|>``/``<|soi|>``/``<|eoi|>``/``[iPAD]`` at MMaDA's reserved ids unless given."""
        fields = dict(
            max_seq_length=max_seq_length,
            num_image_tokens=num_image_tokens,
            image_offset=len(self.tokenizer),
            mask_token_id=self.mask_token_id,
            bos_id=self.tokenizer.bos_token_id,
            eos_id=self.tokenizer.eos_token_id,
        )
        fields.update(ids)
        return mm.T2ILayout(**fields)

    def encode_captions(self, captions: Sequence[str]) -> list[list[int]]:
        """Caption token ids as MMaDA's ``UniversalPrompting`` takes them (tokenizer defaults, no padding)."""
        return [self.tokenizer(c)["input_ids"] for c in captions]

    def t2i_logits(
        self, model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, layout: mm.T2ILayout
    ) -> torch.Tensor:
        """Code logits [B, N, codebook] of a T2I batch; pads masked out through MMaDA's ``attention_bias``."""
        out = model(input_ids, attention_bias=mm.attention_bias(attention_mask)).logits  # [B, L, V]
        return layout.code_logits(out)

    def vq(self) -> Any:
        """MAGVIT-v2, loaded on first use from ``vq_path_or_id`` with the class from ``mmada_code``."""
        if self._vq is None:
            if self.vq_path_or_id is None:
                raise RuntimeError(
                    "model.vq_path_or_id is not set: MMaDA decodes images with MAGVIT-v2; download it with "
                    f"`hf download showlab/magvitv2 --revision {PINNED_REVISIONS['showlab/magvitv2']} --local-dir "
                    "<dir>/magvitv2` and set model.vq_path_or_id to that directory"
                )
            path = resolve_local(self.vq_path_or_id, self.vq_revision, key="model.vq_path_or_id")
            self._vq = mm.load_magvit(path, self.mmada_code)
        return self._vq

    def decode_images(self, codes: torch.Tensor, layout: mm.T2ILayout) -> torch.Tensor:
        """Codes [B, N] -> uint8 images [B, H, W, 3] with MAGVIT-v2."""
        return mm.decode_images(self.vq(), codes, layout.codebook_size)


# ------------------------------------------------------------------------------------------------ loading


def _config_json(local: Path) -> dict[str, Any]:
    try:
        return json.loads((local / "config.json").read_text())
    except FileNotFoundError:
        raise RuntimeError(f"{local}: no config.json (not a Hugging Face model directory)") from None
    except (OSError, json.JSONDecodeError) as e:
        raise RuntimeError(f"{local}/config.json: cannot be read ({e})") from None


def _auto_map(local: Path) -> dict[str, Any] | None:
    return _config_json(local).get("auto_map")


def _llada_mask_id(local: Path, model: Any) -> int:
    """``mask_token_id`` as config.json states it, else LLaDA's 126336. Not the loaded config's: ``LLaDAConfig``
    fills a missing one with its ``ModelConfig`` default 50256, an ordinary token of LLaDA's vocabulary."""
    return _checked_mask_id(_config_json(local).get("mask_token_id", LLADA_MASK_ID), model, str(local))


def _local_dir(spec: ModelSpec) -> Path:
    """The checkpoint directory, after the remote-code policy: a hub id with remote code needs a pinned commit."""
    if not is_local(spec.path_or_id) and spec.trust_remote_code:
        try:
            check_revision(spec.revision, "model.revision", require_commit=True)
        except ValueError as e:
            raise ConfigError(str(e)) from None
    local = resolve_local(spec.path_or_id, spec.revision, key="model.path_or_id")
    if not local.is_dir():
        raise RuntimeError(f"model.path_or_id = {spec.path_or_id!r}: not a directory")
    return local


def _refuse_remote_code(spec: ModelSpec, local: Path, why: str) -> None:
    auto_map = _auto_map(local)
    if not spec.trust_remote_code and (auto_map or why):
        shown = f" (config.json auto_map: {', '.join(sorted(set(map(str, auto_map.values()))))})" if auto_map else ""
        raise ConfigError(
            f"model.trust_remote_code = false: {local} runs its own model code{shown}{why}; set "
            "model.trust_remote_code: true to run it (a hub id also needs model.revision pinned to a commit)"
        )


def _checked_mask_id(mask_id: int | None, model: Any, what: str) -> int:
    if mask_id is None:
        raise RuntimeError(f"{what}: no mask token id (a masked diffusion model needs one)")
    vocab = model.get_input_embeddings().num_embeddings
    if not 0 <= int(mask_id) < vocab:
        raise RuntimeError(f"{what}: mask token id {mask_id} is outside the model's vocabulary of {vocab}")
    return int(mask_id)


def _load(what: str, local: Path, fn, *args, **kwargs) -> Any:
    """``fn(local, ...)``; transformers' errors (often several lines) become one line naming the directory."""
    try:
        return fn(local, *args, **kwargs)
    except (OSError, ValueError, KeyError, ImportError) as e:
        first = next((line.strip() for line in str(e).splitlines() if line.strip()), type(e).__name__)
        raise RuntimeError(f"{local}: cannot load the {what} ({type(e).__name__}: {first})") from e


def load_model(spec: ModelSpec) -> tuple[Any, Any, ModelAdapter]:
    """``(model, tokenizer, adapter)`` for ``spec``, by its family's loader (``ddmrl.models.FAMILIES[spec.kind]``);
    the model is in eval mode on the CPU (move it yourself).

    Raises ``ConfigError`` for a policy violation (remote code not opted in, unpinned hub revision) and
    ``RuntimeError`` (one line, saying what to download or install and where) for missing weights or code.
    """
    return FAMILIES[spec.kind](spec)


def load_tiny(spec: ModelSpec) -> tuple[Any, Any, ModelAdapter]:
    """The embedded TinyDDM, as the download stage saved it."""
    if not is_local(spec.path_or_id):
        raise RuntimeError(
            f"model.path_or_id = {spec.path_or_id!r}: the tiny model is built by the download stage; no such directory"
        )
    model, tok = load_saved(spec.path_or_id)
    return model.to("cpu").eval(), tok, TinyAdapter(tok, tok.mask_token_id)


def load_masked_lm(spec: ModelSpec) -> tuple[Any, Any, ModelAdapter]:
    """Any ``AutoModelForMaskedLM`` checkpoint; mask id = its tokenizer's ``mask_token_id``."""
    local = _local_dir(spec)
    remote, dtype = spec.trust_remote_code, spec.torch_dtype
    _refuse_remote_code(spec, local, "")
    if remote and "AutoModelForMaskedLM" in (_auto_map(local) or {}):
        model = _remote_model(local, ("AutoModelForMaskedLM",), dtype)
    else:
        model = _load("model", local, AutoModelForMaskedLM.from_pretrained, trust_remote_code=remote, dtype=dtype)
    tok = _load("tokenizer", local, AutoTokenizer.from_pretrained, trust_remote_code=remote)
    mask_id = _checked_mask_id(tok.mask_token_id, model, f"{local} (tokenizer)")
    return model.eval(), tok, MaskedLMAdapter(tok, mask_id)


def load_llada(spec: ModelSpec) -> tuple[Any, Any, ModelAdapter]:
    """LLaDA-8B(-Instruct): ``LLaDAModelLM`` from the checkpoint's own code, EOS padding on the left."""
    local = _local_dir(spec)
    _refuse_remote_code(spec, local, " (LLaDAModelLM lives in the checkpoint's modeling_llada.py)")
    model = _remote_model(local, ("AutoModel", "AutoModelForCausalLM"), spec.torch_dtype)
    tok = _with_eos_padding(
        _load("tokenizer", local, AutoTokenizer.from_pretrained, trust_remote_code=True, padding_side="left")
    )
    return model.eval(), tok, LLaDAAdapter(tok, _llada_mask_id(local, model))


def load_mmada(spec: ModelSpec) -> tuple[Any, Any, ModelAdapter]:
    """MMaDA-8B: the model class from the user's MMaDA checkout (explicitly configured), not from the hub."""
    local = _local_dir(spec)
    cls = mm.import_mmada(spec.mmada_code).MMadaModelLM
    config = _load("config", local, cls.config_class.from_pretrained)
    model = _load("model", local, compat.load_pretrained, cls, config, dtype=spec.torch_dtype)
    # a save carries the checkout's modeling_mmada.py (and what it imports) and an auto_map, as LLaDA's does
    cls.register_for_auto_class("AutoModel")
    cls.config_class.register_for_auto_class()
    tok = _with_eos_padding(_load("tokenizer", local, AutoTokenizer.from_pretrained, padding_side="left"))
    adapter = MMaDAAdapter(tok, _llada_mask_id(local, model), spec.mmada_code, spec.vq_path_or_id, spec.vq_revision)
    return model.eval(), tok, adapter


class _Where(NamedTuple):  # what the remote-code policy reads of a model spec
    path_or_id: str
    revision: str | None
    trust_remote_code: bool


def remote_checkpoint(
    path_or_id: str, revision: str | None, trust_remote_code: bool, dtype: str, auto_classes: Sequence[str], why: str
) -> tuple[Any, Any, Path]:
    """``(model, tokenizer, local dir)`` of a checkpoint whose model class is its own code (Dream, SDAR, LLaDA 2.x),
    under ddmrl's remote-code policy: run only with ``trust_remote_code`` (``why`` names the class and file in the
    refusal; a hub id also needs a pinned commit), bridged by ``ddmrl.models.compat``; the tokenizer left-padding,
    with EOS as its pad token when it has none. The model is not yet in eval mode."""
    where = _Where(path_or_id, revision, trust_remote_code)
    local = _local_dir(where)
    _refuse_remote_code(where, local, why)
    model = _remote_model(local, auto_classes, DTYPES[dtype])
    tok = _load("tokenizer", local, AutoTokenizer.from_pretrained, trust_remote_code=True, padding_side="left")
    return model, _with_eos_padding(tok), local


def _with_eos_padding(tok: Any) -> Any:
    """``tok`` with a pad token: EOS when it has none (d1 pads LLaDA's prompts with EOS)."""
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def _remote_model(local: Path, auto_classes: Sequence[str], dtype: torch.dtype | str) -> Any:
    """The checkpoint's own model class (the first of ``auto_classes`` in config.json's ``auto_map``), loaded under
    the pinned transformers through ``ddmrl.models.compat`` and registered for that auto class, so that a saved
    model carries its modeling files and ``auto_map`` (as ``AutoModel.from_pretrained`` would do)."""
    cls, config, auto = remote_class(local, auto_classes)
    model = _load("model", local, compat.load_pretrained, cls, config, dtype=dtype)
    cls.register_for_auto_class(auto)
    return model


def _import_remote_class(local: Path, reference: str) -> type:
    """The class ``reference`` (``"modeling_x.Class"``) of the checkpoint's own code, imported through
    ``compat.import_bridges`` (names transformers 5 removed, flash_attn kernels not installed)."""
    module_file = local / f"{reference.rsplit('.', 1)[0]}.py"
    if "--" in reference or not module_file.is_file():
        return get_class_from_dynamic_module(reference, local)
    with compat.import_bridges(module_file):
        return get_class_from_dynamic_module(reference, local)


def remote_class(local: Path, auto_classes: Sequence[str]) -> tuple[type, Any, str]:
    """``(class, config, auto class)``: the checkpoint's own model class (the first of ``auto_classes`` in
    config.json's ``auto_map``) and its config, bridged to the pinned transformers (``ddmrl.models.compat``); no
    weights are read (``ddmrl.plan`` instantiates it from the config alone)."""
    config = _load("config", local, AutoConfig.from_pretrained, trust_remote_code=True)
    auto_map = getattr(config, "auto_map", None) or {}
    auto = next((name for name in auto_classes if name in auto_map), None)
    if auto is None:
        raise RuntimeError(
            f"{local}/config.json: auto_map has no {' or '.join(auto_classes)} entry (the model class of its remote "
            "code)"
        )
    cls = _load("model code", local, _import_remote_class, auto_map[auto])
    compat.bridge_class(cls)
    compat.bridge_config(cls, config, local / "config.json")
    return cls, config, auto

"""The model sections: a checkpoint's spec, the hub downloads, the embedded model's architecture."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, model_validator

from ddmrl.config._base import (
    Bool,
    Float,
    Int,
    Section,
    Str,
    refuse,
    section,
)
from ddmrl.config.names import ModelKind, Revision, is_commit
from ddmrl.models import DEFAULT_FAMILY, family

# ------------------------------------------------------------------------------------------------ model, hub


@section
class ModelSpec(Section):
    """Which checkpoint to load (the ``model:`` keys of a real-scale profile; ``ddmrl.models.adapters``).

    Code from the hub (a checkpoint's own ``modeling_*.py``) runs only with ``trust_remote_code: true`` and, for a
    hub id, only at a pinned 40-hex commit."""

    KEY: ClassVar[str] = "model"

    kind: ModelKind = Field(
        DEFAULT_FAMILY,
        description="Model family (ddmrl.models.FAMILIES): TinyDDM (embedded), TinyBlockDDM (tiny_block: embedded "
        "block diffusion), LLaDA, MMaDA, Dream, SDAR / TraDo, LLaDA 2.x or an AutoModelForMaskedLM "
        "(docs/real_scale.md, docs/families.md).",
        json_schema_extra={
            "type": "a model family: tiny, tiny_block, llada, mmada, hf_masked_lm, dream or an import path"
        },
    )
    path_or_id: Str = Field(
        "", description="Checkpoint directory (normally under download.hub_dir) or a hub id already in the HF cache."
    )
    revision: Revision | None = Field(None, description="Hub revision; with trust_remote_code, a 40-hex commit.")
    trust_remote_code: Bool = Field(False, description="Run the checkpoint's own modeling_*.py (LLaDA needs it).")
    dtype: Literal["float32", "bfloat16", "float16", "auto"] = Field(
        "float32", description="Weights' dtype (LLaDA and MMaDA are meant for bfloat16)."
    )
    mmada_code: Str | None = Field(
        None, description="mmada: a checkout of github.com/Gen-Verse/MMaDA (the directory holding models/)."
    )
    vq_path_or_id: Str | None = Field(
        None, description="mmada: MAGVIT-v2 weights (showlab/magvitv2), to decode images."
    )
    vq_revision: Revision | None = Field(None, description="mmada: hub revision of the MAGVIT-v2 weights.")

    @model_validator(mode="after")
    def _check(self) -> ModelSpec:
        _check_spec(self)
        return self


def _check_spec(spec: ModelSpec) -> None:
    if not spec.path_or_id.strip():
        raise refuse("path_or_id", spec.path_or_id, "must name a local directory or a hub id")
    if spec.trust_remote_code and spec.revision is not None and not is_commit(spec.revision):
        # a branch or tag with remote code is refused whatever the path: its code can change under the name
        raise refuse(
            "revision",
            spec.revision,
            "remote code from the hub runs only at a pinned commit; set it to the 40-hex commit id to trust "
            "(a branch such as 'main' can change under the same name)",
        )
    for key in ("mmada_code", "vq_path_or_id"):
        if getattr(spec, key) is not None and not family(spec.kind).image:
            raise refuse(key, getattr(spec, key), "only used with model.kind: mmada")
    if family(spec.kind).embedded and spec.trust_remote_code:
        raise refuse("trust_remote_code", True, "the tiny model has no remote code; set it to false")


@section
class HubItem(Section):
    """One thing the download stage fetches (``ddmrl.hub.fetch_all``): ``repo_id`` at ``revision`` into
    ``<download.hub_dir>/<name>``; a checksum manifest per item is the stage's DVC-tracked output."""

    name: Str = Field(
        pattern=r"^[\w.-]+$",
        description="Directory name under download.hub_dir.",
        json_schema_extra={"why": "must be a plain directory name"},
    )
    repo_id: Str = Field(min_length=1, description="Hub id (org/name), or a local file or directory used as it is.")
    revision: Revision | None = Field(None, description="Branch, tag or (better) 40-hex commit to fetch.")
    repo_type: Literal["model", "dataset"] = Field("model", description="Hub repository type.")
    allow_patterns: tuple[Str, ...] | None = Field(None, description="Only files matching these globs are fetched.")

    @model_validator(mode="after")
    def _check(self) -> HubItem:
        if self.name in (".", ".."):
            raise refuse("name", self.name, "must be a plain directory name")
        return self


# ------------------------------------------------------------------------------------------------ sections


@section
class ModelConfig(ModelSpec):
    """The model: TinyDDM's architecture (``kind: tiny``, embedded profiles: the download stage builds and
    pre-trains it), or a checkpoint the download stage fetches (paper profiles; the architecture keys are then
    unused)."""

    hidden_size: Int = Field(128, ge=1, description="TinyDDM: width of the residual stream.")
    num_layers: Int = Field(4, ge=1, description="TinyDDM: transformer blocks.")
    num_heads: Int = Field(4, ge=1, description="TinyDDM: attention heads (hidden_size must be divisible by it).")
    intermediate_size: Int = Field(512, ge=1, description="TinyDDM: width of the feed-forward layer.")
    dropout: Float = Field(
        0.0,
        ge=0,
        lt=1,
        description="TinyDDM: dropout in attention and feed-forward (0 keeps log-probs deterministic).",
    )
    position_embedding: Literal["learned", "rope"] = Field(
        "learned", description="TinyDDM: learned absolute positions, or rotary (rope, LLaDA's and MMaDA's choice)."
    )
    block_size: Int = Field(
        4,
        ge=1,
        description="tiny_block: the block length of its block-diffusion pre-training and SFT (the samplers' "
        "block_length must equal it).",
    )

    @property
    def pretrained(self) -> bool:
        """True for a downloaded checkpoint (``kind`` other than tiny and tiny_block): nothing is pre-trained here."""
        return not family(self.kind).embedded

    def spec(self) -> ModelSpec:
        """The checkpoint's :class:`ModelSpec` (``ddmrl.models.adapters.load_model``)."""
        return ModelSpec(**{k: getattr(self, k) for k in ModelSpec.__pydantic_fields__})

    @model_validator(mode="after")
    def _check(self) -> ModelConfig:  # replaces ModelSpec's check: a tiny model names no checkpoint
        if self.pretrained:
            _check_spec(self)
        if self.hidden_size % self.num_heads:
            raise refuse("hidden_size", self.hidden_size, f"must be divisible by num_heads = {self.num_heads}")
        return self

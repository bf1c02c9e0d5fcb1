"""Models: the embedded TinyDDM (``ddmrl.models.tiny``) and the real model families behind one interface.
``FAMILIES`` maps ``model.kind`` to its loader, ``load(spec) -> (model, tokenizer, adapter)``
(``ddmrl.models.adapters``), imported when first looked up: a stage runs, and depends on, only its family's module.
This package imports nothing else, so that the config schema can name the families without torch.
"""

from typing import NamedTuple

from ddmrl.registry import Registry


class Family(NamedTuple):
    """A model family's entry in ``FAMILIES``: where its loader is, and what the schema reads of it by name without
    importing it. A family outside the package has the defaults (a downloaded checkpoint of full-sequence
    diffusion)."""

    spec: str
    embedded: bool = False  # built and pre-trained here (nothing downloaded, no remote code)
    sampler: str = ""  # the sampler (``ddmrl.samplers.SAMPLERS``) every stage must sample it with ("": any)
    own_blocks: bool = False  # its blocks are ``model.block_size``: the samplers' block_length must equal it
    block: bool = False  # block diffusion (no image branch on it)
    image: bool = False  # reads images as VQ tokens (``mmada_code``, ``vq_path_or_id``; image benchmarks)


_BLOCK = {"sampler": "block", "block": True}  # block diffusion: sampled with the block sampler
FAMILIES = Registry(
    {
        "tiny": Family("ddmrl.models.adapters:load_tiny", embedded=True),
        # TinyBlockDDM: the same saved-directory loader
        "tiny_block": Family("ddmrl.models.adapters:load_tiny", embedded=True, own_blocks=True, **_BLOCK),
        "llada": "ddmrl.models.adapters:load_llada",
        "mmada": Family("ddmrl.models.adapters:load_mmada", image=True),
        "hf_masked_lm": "ddmrl.models.adapters:load_masked_lm",
        "dream": "ddmrl.models.dream:load",
        "sdar": Family("ddmrl.models.sdar:load", **_BLOCK),  # SDAR / TraDo (block diffusion)
        "llada2": Family("ddmrl.models.llada2:load", **_BLOCK),  # LLaDA 2.x (MoE block diffusion)
    },
    group="ddmrl.models",
)
#: the family of ``model.kind`` unless a config says otherwise: the embedded TinyDDM
DEFAULT_FAMILY = "tiny"


def family(name: str) -> Family:
    """The record of model family ``name`` (``FAMILIES``)."""
    return FAMILIES.record(name, Family)


__all__ = ["DEFAULT_FAMILY", "FAMILIES", "Family", "family"]

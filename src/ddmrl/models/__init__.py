"""Models: the embedded TinyDDM (``ddmrl.models.tiny``) and the real model families behind one interface.

``FAMILIES`` maps ``model.kind`` to its loader, ``load(spec) -> (model, tokenizer, adapter)``
(``ddmrl.models.adapters``), imported when first looked up: a stage runs, and depends on, only its family's module.
This package imports nothing else, so that the config schema can name the families without torch.
"""

from ddmrl.registry import Registry

FAMILIES = Registry(
    {
        "tiny": "ddmrl.models.adapters:load_tiny",
        "tiny_block": "ddmrl.models.adapters:load_tiny",  # TinyBlockDDM: the same saved-directory loader
        "llada": "ddmrl.models.adapters:load_llada",
        "mmada": "ddmrl.models.adapters:load_mmada",
        "hf_masked_lm": "ddmrl.models.adapters:load_masked_lm",
        "dream": "ddmrl.models.dream:load",
        "sdar": "ddmrl.models.sdar:load",  # SDAR / TraDo (block diffusion)
        "llada2": "ddmrl.models.llada2:load",  # LLaDA 2.x (MoE block diffusion)
    },
    group="ddmrl.models",
)

__all__ = ["FAMILIES"]

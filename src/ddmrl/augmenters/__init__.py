"""Rollout augmenters: edit a scored rollout batch between the rewards and the group advantages (IGPO's inpainting
of all-wrong groups). ``AUGMENTERS`` maps a method's ``augmenter`` (``ddmrl.methods``) to its
:class:`~ddmrl.augmenters.base.Augmenter`, imported when first looked up (a run depends on its own augmenter's
module only); every other name here is imported from its module on first use."""

from ddmrl.registry import Registry, lazy_exports

AUGMENTERS = Registry({"igpo": "ddmrl.augmenters.igpo:IGPO"})

_LAZY = {
    "AugmentInputs": "ddmrl.augmenters.base",
    "Augmented": "ddmrl.augmenters.base",
    "Augmenter": "ddmrl.augmenters.base",
}
__getattr__ = lazy_exports(__name__, _LAZY)

__all__ = ["AUGMENTERS", *_LAZY]

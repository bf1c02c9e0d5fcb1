"""Rollout augmenters: edit a scored rollout batch between the rewards and the group advantages (IGPO's inpainting
of all-wrong groups). ``AUGMENTERS`` maps a method's ``augmenter`` (``ddmrl.methods``) to its
:class:`~ddmrl.augmenters.base.Augmenter`, imported when first looked up (a run depends on its own augmenter's
module only); its contract is :mod:`ddmrl.augmenters.base`. A method may also name an augmenter outside the package,
as ``module:attribute`` or as an entry point of the ``ddmrl.augmenters`` group (docs/extending.md)."""

from ddmrl.registry import Registry

AUGMENTERS = Registry({"igpo": "ddmrl.augmenters.igpo:IGPO"}, group="ddmrl.augmenters")


__all__ = ["AUGMENTERS"]

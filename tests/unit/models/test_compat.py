"""ddmrl.models.compat on classes written here (on the real LLaDA and MMaDA classes: test_real_classes.py)."""

from __future__ import annotations

import pytest
import torch
from transformers import PreTrainedModel

from ddmrl.models import compat
from ddmrl.models.tiny import TinyDDMConfig, TinyDDMForMaskedLM


def test_compat_leaves_a_transformers_5_class_alone():
    init, tie = TinyDDMForMaskedLM.__init__, TinyDDMForMaskedLM.tie_weights
    assert compat.bridge_class(TinyDDMForMaskedLM) == []
    assert (TinyDDMForMaskedLM.__init__, TinyDDMForMaskedLM.tie_weights) == (init, tie)
    cfg = TinyDDMConfig(vocab_size=8)
    assert compat.bridge_config(TinyDDMForMaskedLM, cfg, "/nonexistent/config.json") == []
    assert not hasattr(cfg, "use_cache"), "TinyDDM never reads use_cache: nothing to restore"


def test_what_compat_cannot_bridge_is_one_line():
    class NeedsArgs(PreTrainedModel):
        config_class = TinyDDMConfig

        def tie_weights(self, mapping):
            pass

    with pytest.raises(compat.IncompatibleRemoteCode, match=r"NeedsArgs is incompatible with transformers 5\.") as e:
        compat.bridge_class(NeedsArgs)
    assert "tie_weights() requires arguments transformers does not pass (mapping)" in str(e.value)
    assert "\n" not in str(e.value)
    with pytest.raises(compat.IncompatibleRemoteCode, match="not a transformers PreTrainedModel"):
        compat.bridge_class(torch.nn.Linear)


def test_a_4x_style_class_is_bridged_once():
    class Legacy(PreTrainedModel):
        config_class = TinyDDMConfig

        def __init__(self, config):
            super().__init__(config)
            self.head = torch.nn.Linear(2, 2)

        def tie_weights(self):
            self.tied = True

    bridged = ["tie_weights() takes no keyword arguments", "__init__ never calls post_init()"]
    assert compat.bridge_class(Legacy) == bridged
    model = Legacy(TinyDDMConfig(vocab_size=8))
    assert model.all_tied_weights_keys == {} and model.tied, "post_init ran and called the legacy tie_weights"
    model.tie_weights(missing_keys=set(), recompute_mapping=False)
    assert compat.bridge_class(Legacy) == bridged, "idempotent"

"""diffu-GRPO as one module: its ``methods:`` section's model (``Params``: the defaults it changes, what its
definition fixes, its checks) and its training components (``METHOD``), registered in ``ddmrl.methods.METHODS``."""

from __future__ import annotations

from ddmrl.config._base import Str, section
from ddmrl.config.grpo import GRPOConfig
from ddmrl.config.names import ViewSampler
from ddmrl.methods.base import Method


@section
class Params(GRPOConfig):
    """diffu-GRPO (d1; Zhao et al. 2025, arXiv 2504.12216): the whole completion masked, the prompt masked with
    p_mask_prompt, one-step token log-probs. Paper runs: epsilon 0.5, beta 0.04, mu 12."""

    method: Str = "diffu_grpo"
    remasking: ViewSampler = "full_completion"


# d1: prompt masked with p = 0.15, whole completion masked (paper runs: eps 0.5, beta 0.04, mu 12)
METHOD = Method(
    name="diffu_grpo",
    params=Params,
    display="diffu-GRPO",
    weighting="completion_mean",
    paper="Zhao et al. 2025, d1: Scaling Reasoning in Diffusion LLMs via RL (arXiv 2504.12216)",
)

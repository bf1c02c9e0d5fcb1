"""IGPO as one module: its ``methods:`` section's model (``Params``: the defaults it changes, what its
definition fixes, its checks) and its training components (``METHOD``), registered in ``ddmrl.methods.METHODS``."""

from __future__ import annotations

from pydantic import Field

from ddmrl.config._base import Float, Int, Str, refuse, section
from ddmrl.config.names import ViewSampler
from ddmrl.methods.base import Method
from ddmrl.methods.mixins import LossAfterEos


@section
class Params(LossAfterEos):
    """IGPO (Zhao et al. 2026, ICLR, arXiv 2509.10396; facebookresearch/igpo): d1's objective and views, plus a
    rollout augmenter: in a group whose samples are all wrong, G more samples are drawn with chunks of the
    ground-truth reasoning clamped as hints (eta ~ U[inpaint_ratio_low, inpaint_ratio_high] of the chunks), and up
    to max_replacements wrong samples are replaced by verified-correct inpainted ones; only the hint_entropy_top
    highest-entropy hint positions get gradient; clip-higher (epsilon 0.2, epsilon_high 0.28). Needs a task with
    reasoning traces and the llada sampler (the inpainted samples are drawn without its KV cache or parallel
    decoding). Paper (LLaDA-8B-Instruct): eta U[0.2, 0.6], chunks U[4, 8], tau 0.2, clip-higher 0.28, temperature
    1.2. Released run script: lr 5e-7, mu 4, G 8, beta 0.01, chunks U[5, 10], max_replacement 4, epsilon_high 0.2
    and GSPO's sequence ratio with d1_masking views (whole completion masked, prompt never: p_mask_prompt 0), the loss
    over every completion position (loss_after_eos: true); released config defaults: eta U[0.1, 0.5],
    max_replacements 1."""

    method: Str = "igpo"
    remasking: ViewSampler = "full_completion"
    epsilon_high: Float = Field(0.28, ge=0, lt=1)
    inpaint_ratio_low: Float = Field(
        0.2,
        ge=0,
        le=1,
        description="Each inpainted sample's injection ratio eta ~ U[low, high]: its share of the trace's chunks "
        "clamped as hints.",
    )
    inpaint_ratio_high: Float = Field(0.6, ge=0, le=1, description="The upper end of eta's range.")
    min_chunk_size: Int = Field(4, ge=1, description="The trace is cut into chunks of U[min, max] tokens.")
    max_chunk_size: Int = Field(8, ge=1, description="The largest chunk.")
    max_replacements: Int = Field(
        1, ge=1, description="At most this many wrong samples of an all-wrong group replaced (floor(lambda G))."
    )
    hint_entropy_top: Float = Field(
        0.2, gt=0, le=1, description="tau, the share of hint positions (highest entropy) that get gradient."
    )

    def _check_method(self) -> None:
        if self.inpaint_ratio_low > self.inpaint_ratio_high:
            high = self.inpaint_ratio_high
            raise refuse("inpaint_ratio_low", self.inpaint_ratio_low, f"exceeds inpaint_ratio_high = {high}")
        if self.min_chunk_size > self.max_chunk_size:
            raise refuse("min_chunk_size", self.min_chunk_size, f"exceeds max_chunk_size = {self.max_chunk_size}")
        if self.max_replacements > self.num_generations:
            g = self.num_generations
            raise refuse("max_replacements", self.max_replacements, f"exceeds num_generations = {g}")
        if self.sampler.name != "llada":
            raise refuse("sampler.name", self.sampler.name, "IGPO's inpainting clamps positions in the llada sampler")
        if self.sampler.remasking == "rcr":
            raise refuse("sampler.remasking", "rcr", "would re-mask IGPO's clamped hints: low_confidence or random")
        if self.aux_policy.kind != "none":
            raise refuse("aux_policy.kind", self.aux_policy.kind, "IGPO's inpainting runs without an auxiliary policy")


# d1's views and objective with clip-higher; all-wrong groups get inpainted samples; top-tau hint entropy
METHOD = Method(
    name="igpo",
    params=Params,
    display="IGPO",
    weighting="hint_entropy",
    augmenter="igpo",
    paper="Zhao et al. 2026, Inpainting-Guided Policy Optimization for Diffusion Large Language Models (IGPO; "
    "ICLR 2026, arXiv 2509.10396)",
    switches=("loss_after_eos",),
)

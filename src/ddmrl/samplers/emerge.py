"""MaskGRPO's "emerge" sampler (Ma et al. 2026, ``grpo/mask_grpo_trainer.py`` ``t2i_generate_emerge``): MDLM-style
ancestral sampling of the reverse process.

The completion starts fully masked; the prompt is never changed. With the mask fraction k(tau) = cos(pi tau / 2)
(``cosine``; ``linear``: 1 - tau) at tau = s / T, step s < T - 1 runs one forward pass (two with CFG) and, at each
still-masked position independently, stays masked with probability k_{s+1} / k_s and is otherwise revealed with a
token drawn from softmax(logits / temperature) over the allowed tokens. That is the joint categorical
[p_v (k_s - k_{s+1}) / k_s for each token v; k_{s+1} / k_s for "stay masked"], the paper's
q_s = ((alpha_s - alpha_t) / (1 - alpha_t)) pi + ((1 - alpha_s) / (1 - alpha_t)) delta_mask with alpha = 1 - k.
The last step reveals every remaining masked position. Revealed tokens are frozen.

There is no confidence ranking: each position is revealed by its own coin, so the number revealed per step is
Binomial(#masked, (k_s - k_{s+1}) / k_s), not fixed. MaskGRPO has no sampling temperature (``temperature=1.0``).

Classifier-free guidance uses the Muse convention of MMaDA, g = (1 + w) c - w u, where the unconditional branch has
every prompt position replaced by the mask token (and the current completion canvas).

``nfe`` counts the forward passes actually run: sampling stops early when every position of every row is revealed
before the last step (the remaining steps could change nothing).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ddmrl.samplers.base import SampleOutput, guided_logits, init_canvas
from ddmrl.samplers.maskgit import allowed_vocab, mask_schedule, sample_tokens, uniform

if TYPE_CHECKING:
    from ddmrl.config.sampler import SamplerConfig


def reveal_probability(schedule: str, step: int, steps: int) -> float:
    """Probability that a still-masked position is revealed at ``step``: (k_s - k_{s+1}) / k_s, 1 at the last step.

    >>> [round(reveal_probability("linear", s, 4), 4) for s in range(4)]
    [0.25, 0.3333, 0.5, 1.0]
    """
    if step == steps - 1:
        return 1.0
    k_s, k_next = mask_schedule(schedule, step / steps), mask_schedule(schedule, (step + 1) / steps)
    return (k_s - k_next) / k_s


def keywords(sampler: SamplerConfig, steps: int, completion_length: int) -> dict:
    """The keys of the shared ``sampler:`` section this sampler's ``generate`` takes (``ddmrl.rollout.sampler_kwargs``
    adds ``steps`` and ``temperature``)."""
    return {"cfg_scale": sampler.cfg_scale}


@torch.no_grad()
def generate(
    model,
    prompt_ids: torch.Tensor,
    completion_length: int,
    *,
    mask_id: int,
    steps: int,
    temperature: float = 1.0,
    cfg_scale: float = 0.0,
    schedule: str = "cosine",
    allowed_tokens: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
) -> SampleOutput:
    """Sample completions of ``completion_length`` tokens for ``prompt_ids`` [N, P] by ancestral sampling.

    ``allowed_tokens``: bool [V], the tokens that may be drawn (None: all but ``mask_id``; ``mask_id`` is never
    drawn). ``reveal_step[i, k]`` is the step at which completion position k was revealed; ``nfe`` counts forward
    passes (2 per step with CFG).
    """
    if steps < 1:
        raise ValueError("steps must be >= 1")
    mask_schedule(schedule, 0.0)  # validate the name before any forward pass
    n, p = prompt_ids.shape
    length, device = completion_length, prompt_ids.device
    x, reveal = init_canvas(prompt_ids, length, mask_id)
    allowed, nfe = None, 0
    for s in range(steps):
        masked = x[:, p:] == mask_id
        if not bool(masked.any()):
            break
        # LLaDA's u + (w + 1)(c - u) in guided_logits is algebraically MMaDA's (1 + w) c - w u.
        logits = guided_logits(model, x, p, mask_id, cfg_scale)[:, p:].double()  # [N, L, V]
        nfe += 2 if cfg_scale else 1
        if allowed is None:
            allowed = allowed_vocab(allowed_tokens, logits.shape[-1], mask_id, logits.device)
        proposal = sample_tokens(logits.masked_fill(~allowed, -torch.inf), temperature, generator)  # [N, L]
        if s == steps - 1:
            now = masked
        else:
            now = masked & (uniform(masked.shape, device, generator) < reveal_probability(schedule, s, steps))
        reveal[now] = s
        x[:, p:] = torch.where(now, proposal.to(x.dtype), x[:, p:])
    return SampleOutput(x[:, p:], reveal, nfe)

"""LLaDA's semi-autoregressive sampler with a learned unmasking policy choosing the positions each step reveals
(Jazbec, Olausson et al. 2025; ``ddmrl.aux_policies.unmasking``).

Blocks are filled left to right. At each step one forward pass gives, at every completion position, the proposed
token (Gumbel-max at ``temperature``; the paper's model samples greedily, temperature 0) and the confidence, the
model's top-1 probability; the policy sees the whole completion (confidence, mask indicator, t = steps taken by the
row / L: the released code's full context) and reveals each still-masked position of the current block with its
Bernoulli probability; with the fallback, a row that draws nothing reveals its highest-scoring position. A block
takes at most block_length steps; a row whose block is complete waits (its steps are not active and cost it no
model evaluation: ``AuxTrace.nfe`` counts each row's own passes, ``SampleOutput.nfe`` the batch's).
"""

from __future__ import annotations

import torch

from ddmrl.aux_policies.base import AuxTrace, stack_steps
from ddmrl.aux_policies.unmasking import UnmaskingPolicy, bernoulli_logp, draw_unmask
from ddmrl.samplers.base import SampleOutput, guided_logits, gumbel_argmax, init_canvas, uniform


@torch.no_grad()
def generate(
    model,
    prompt_ids: torch.Tensor,
    completion_length: int,
    *,
    mask_id: int,
    block_length: int,
    temperature: float = 0.0,
    cfg_scale: float = 0.0,
    policy: UnmaskingPolicy,
    generator: torch.Generator | None = None,
) -> SampleOutput:
    """Sample completions of ``completion_length`` tokens for ``prompt_ids`` [N, P]; the returned ``aux`` trace
    holds, per row and step, the policy's inputs, the revealed positions and their log-probability."""
    if not isinstance(policy, UnmaskingPolicy):
        raise ValueError(f"the llada sampler takes an unmasking policy, not a {getattr(policy, 'kind', policy)!r} one")
    n, p = prompt_ids.shape
    length = completion_length
    x, reveal = init_canvas(prompt_ids, length, mask_id)
    pos = torch.arange(length, device=x.device)
    steps_taken = torch.zeros(n, dtype=torch.long, device=x.device)
    fallback, policy_temp = policy.uses_fallback(), policy.temperature()
    steps, step = [], 0
    for lo in range(0, length, block_length):
        in_block = (pos >= lo) & (pos < lo + block_length)  # [L]
        for _ in range(min(block_length, length - lo)):
            masked = x[:, p:] == mask_id  # [N, L]
            select = masked & in_block
            active = select.any(1)  # [N]
            if not bool(active.any()):
                break
            logits = guided_logits(model, x, p, mask_id, cfg_scale)[:, p:].float()  # [N, L, V]
            logits[..., mask_id] = -torch.inf  # never propose the mask token itself
            proposal = gumbel_argmax(logits, temperature, generator)  # [N, L]
            confidence = torch.softmax(logits, -1).amax(-1)  # [N, L] top-1 probability
            t = steps_taken.float() / length  # [N]
            b = policy.logits(masked, confidence, t).float() / policy_temp  # [N, L]
            unmask = draw_unmask(b, select, fallback, uniform(b.shape, b.device, generator))
            logp = bernoulli_logp(b, unmask, select, fallback)  # [N]
            x[:, p:] = torch.where(unmask, proposal, x[:, p:])
            reveal[unmask] = step
            temp = torch.full((n,), policy_temp, device=x.device)
            steps.append((masked, confidence, t, select, temp, unmask, logp, active))
            steps_taken += active.long()
            step += 1
    branches = 2 if cfg_scale else 1
    masked, confidence, t, select, temp, unmask, logp, active = stack_steps(steps)
    trace = AuxTrace((masked, confidence, t, select, temp), unmask, logp, active, steps_taken * branches)
    return SampleOutput(x[:, p:], reveal, step * branches, aux=trace)

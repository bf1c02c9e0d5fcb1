"""The block sampler's token-editing option (LLaDA 2.1's ``editing_threshold`` / ``max_post_steps``) on a scripted
model: edits rewrite committed completion tokens, never the prompt's; a block ends after a pass with no mask and
no edit or after ``max_post_steps`` mask-free passes; rows finish independently; off by default."""

from __future__ import annotations

import math

import torch

from ddmrl.samplers.block import edits, generate

MASK, V = 5, 6


class Scripted:
    """While a row's canvas holds a mask: token 1 everywhere with probability 0.6. Once it holds none: token 2
    everywhere, with probability 0.99 (0.5 for a row whose first prompt token is 4). The cache keeps the stored
    tokens (the protocol's recompute fallback)."""

    def block_forward(self, input_ids, position_ids, attention, cache=None, store=False):
        seen = input_ids if cache is None else torch.cat([cache, input_ids], 1)
        has_mask = (seen == MASK).any(1)  # [N]
        sure = torch.where(seen[:, 0] == 4, 0.5, 0.99)  # [N]
        n, k = input_ids.shape
        probs = torch.full((n, k, V), 0.0)
        probs[..., 1] = torch.where(has_mask, 0.6, (1 - sure) / 4)[:, None]
        probs[..., 2] = torch.where(has_mask, 0.1, sure)[:, None]
        for tok in (0, 3, 4):
            probs[..., tok] = torch.where(has_mask, 0.1, (1 - sure) / 4)[:, None]
        probs[..., MASK] = 1e-9
        return probs.log(), (seen if store else cache)


def run(prompt, **kwargs):
    options = dict(mask_id=MASK, block_length=4, steps=4, parallel="threshold", threshold=0.5, align="sequence")
    return generate(Scripted(), prompt, 6, **{**options, **kwargs})


def test_edits_rewrite_committed_completion_tokens_not_the_prompt():
    prompt = torch.tensor([[3, 3], [4, 3]])  # row 1: its edits are not confident enough
    out = run(prompt, editing_threshold=0.9, kv_cache=False)
    # blocks (align sequence, 4): [p p c c] [c c c c]; row 0: filled with 1, then every completion token edited to 2
    assert out.completion_ids.tolist() == [[2] * 6, [1] * 6]
    # row 0: per block a filling pass, an editing pass, a pass with nothing to edit; row 1 stops after its first
    # mask-free pass, the batch goes on for row 0
    assert out.nfe == 6
    assert out.reveal_step.tolist() == [[0, 0, 3, 3, 3, 3], [0, 0, 3, 3, 3, 3]], "an edit is no reveal"
    cached = run(prompt, editing_threshold=0.9, kv_cache=True)
    assert torch.equal(cached.completion_ids, out.completion_ids)


def test_max_post_steps_and_the_default_off():
    prompt = torch.tensor([[3, 3]])
    assert run(prompt, editing_threshold=0.9, max_post_steps=0).completion_ids.tolist() == [[1] * 6]
    assert run(prompt).completion_ids.tolist() == [[1] * 6], "no editing by default"
    assert run(prompt).nfe == 3, "a filling pass per block and the first block's append to the cache"
    assert run(prompt, editing_threshold=0.995).completion_ids.tolist() == [[1] * 6]


def test_edits_rule():
    proposal, current = torch.tensor([[2, 2, 1, 2]]), torch.tensor([[1, 2, 1, MASK]])
    conf = torch.tensor([[0.95, 0.99, 0.99, 0.99]])
    masked = current == MASK
    assert edits(proposal, conf, current, masked, 0.9).tolist() == [[True, False, False, False]]
    assert not edits(proposal, conf, current, masked, 0.95).any(), "strictly above the threshold"
    assert math.isclose(float(conf[0, 0]), 0.95, rel_tol=1e-6)

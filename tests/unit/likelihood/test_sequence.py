"""Sequence log-likelihoods of a masked diffusion model (ddmrl.likelihood.sequence) against brute-force enumeration on
a vocabulary of 10 tokens and continuations of 3 or 4: the ELBO over every mask written out with explicit loops, the
left-to-right chain rule, and the distribution it defines summed over every continuation."""

from __future__ import annotations

import itertools
import math

import torch

from ddmrl.likelihood.sequence import exact_elbo, left_to_right, mc_elbo, stratified_masks

PROMPT = torch.tensor([2, 6, 7])  # [BOS] '0' '1'
CONT = torch.tensor([8, 9, 6, 7])  # '2' '3' '0' '1'


def brute_elbo(model, prompt, cont, mask_id) -> float:
    """E_{l ~ U{1..L}} E_{m: |m| = l} (L / l) sum_{k in m} log p(o_k | o with m masked): every mask, one by one."""
    length, total = len(cont), 0.0
    for l in range(1, length + 1):  # noqa: E741
        subsets = list(itertools.combinations(range(length), l))
        for m in subsets:
            view = cont.clone()
            view[list(m)] = mask_id
            logp = torch.log_softmax(model(torch.cat([prompt, view])[None]).logits[0, len(prompt) :].double(), -1)
            term = sum(float(logp[k, cont[k]]) for k in m) * length / l
            total += term / len(subsets) / length
    return total


def brute_left_to_right(model, prompt, cont, mask_id) -> float:
    """sum_k log p(o_k | o_<k, masks after), one forward pass per position."""
    total = 0.0
    for k in range(len(cont)):
        view = torch.cat([cont[:k], torch.full((len(cont) - k,), mask_id)])
        logp = torch.log_softmax(model(torch.cat([prompt, view])[None]).logits[0, len(prompt) + k].double(), -1)
        total += float(logp[cont[k]])
    return total


def test_exact_elbo_is_the_brute_force_elbo(sharp_model, tok):
    with torch.no_grad():
        want = brute_elbo(sharp_model, PROMPT, CONT, tok.mask_token_id)
        assert math.isclose(exact_elbo(sharp_model, PROMPT, CONT, tok.mask_token_id, batch_size=4), want, rel_tol=1e-5)
        one = CONT[:1]  # one token: the ELBO is its exact log-probability given the prompt
        lp = torch.log_softmax(sharp_model(torch.cat([PROMPT, torch.tensor([0])])[None]).logits[0, -1], -1)
        assert math.isclose(exact_elbo(sharp_model, PROMPT, one, tok.mask_token_id), float(lp[one[0]]), rel_tol=1e-5)


def test_llada_monte_carlo_estimate_agrees_with_brute_force(sharp_model, tok):
    """Unbiased: 2048 views (seed fixed) land within 4 standard errors of the enumerated ELBO, and the estimate
    moves towards it as views are added."""
    with torch.no_grad():
        want = brute_elbo(sharp_model, PROMPT, CONT, tok.mask_token_id)
        est, se = mc_elbo(sharp_model, PROMPT, CONT, tok.mask_token_id, samples=2048, batch_size=256,
                          gen=torch.Generator().manual_seed(0))  # fmt: skip
    assert se > 0 and abs(est - want) < 4 * se, (est, want, se)


def test_stratified_masks_cover_every_size_evenly():
    """LLaDA's forward process: within a batch the mask sizes are stratified over 1..S (S views: each size once),
    never 0, the positions drawn inside the span only."""
    gen = torch.Generator().manual_seed(1)
    masks = stratified_masks(4, (2, 6), 7, gen)  # a span of 4 of 7 positions
    assert sorted(masks.sum(1).tolist()) == [1, 2, 3, 4]
    assert not masks[:, :2].any() and not masks[:, 6:].any()
    assert set(stratified_masks(16, (2, 6), 7, gen).sum(1).tolist()) == {1, 2, 3, 4}


def test_left_to_right_is_the_chain_rule_and_a_distribution(sharp_model, tok):
    """Exact: it equals the chain rule written out, and exp of it sums to 1 over all 10^3 continuations of length 3."""
    with torch.no_grad():
        ll, greedy = left_to_right(sharp_model, PROMPT, CONT, tok.mask_token_id, batch_size=3)
        assert math.isclose(ll, brute_left_to_right(sharp_model, PROMPT, CONT, tok.mask_token_id), rel_tol=1e-5)
        vocab = len(tok)
        total = sum(
            math.exp(left_to_right(sharp_model, PROMPT, torch.tensor(c), tok.mask_token_id)[0])
            for c in itertools.product(range(vocab), repeat=3)
        )
    assert math.isclose(total, 1.0, rel_tol=1e-4)
    # the argmax continuation is greedy, a continuation with a less likely first token is not
    x = []
    with torch.no_grad():
        for k in range(3):
            view = torch.tensor(x + [tok.mask_token_id] * (3 - k))
            x.append(int(sharp_model(torch.cat([PROMPT, view])[None]).logits[0, len(PROMPT) + k].argmax()))
        assert left_to_right(sharp_model, PROMPT, torch.tensor(x), tok.mask_token_id)[1] is True
        worse = torch.tensor([(x[0] + 1) % vocab, *x[1:]])
        assert left_to_right(sharp_model, PROMPT, worse, tok.mask_token_id)[1] is False


def test_block_diffusion_with_blocks_of_one_token_is_exact_autoregressive(tok):
    """A TinyBlockDDM read in blocks of 1 is an autoregressive model: its ELBO (enumerated or Monte Carlo, every view
    the same) is its exact likelihood, the left-to-right chain rule. Blocks of 2: each block's ELBO summed, the
    enumeration equal to the Monte Carlo mean within 4 standard errors."""
    from ddmrl.models.tiny_block import TinyBlockDDMConfig, TinyBlockDDMForMaskedLM

    torch.manual_seed(0)
    cfg = TinyBlockDDMConfig(vocab_size=len(tok), hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32,
                             max_position_embeddings=16, mask_token_id=tok.mask_token_id)  # fmt: skip
    model = TinyBlockDDMForMaskedLM(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0, 0.5, generator=torch.Generator().manual_seed(p.numel()))
        mask, gen = tok.mask_token_id, torch.Generator().manual_seed(0)
        ar = left_to_right(model, PROMPT, CONT, mask, block_length=1)[0]
        assert math.isclose(exact_elbo(model, PROMPT, CONT, mask, block_length=1), ar, rel_tol=1e-5)
        est, se = mc_elbo(model, PROMPT, CONT, mask, samples=4, batch_size=4, gen=gen, block_length=1)
        assert math.isclose(est, ar, rel_tol=1e-5) and se < 1e-5
        want = exact_elbo(model, PROMPT, CONT, mask, block_length=2)
        est, se = mc_elbo(model, PROMPT, CONT, mask, samples=1024, batch_size=256, gen=gen, block_length=2)
        assert abs(est - want) < 4 * se, (est, want, se)


class Guided(torch.nn.Module):
    """``model`` with LLaDA's guidance applied to its logits (u + (w + 1)(c - u), the prompt masked in u): what the
    estimators with ``cfg_scale`` must read."""

    def __init__(self, model, prompt_length: int, mask_id: int, cfg_scale: float) -> None:
        super().__init__()
        self.model, self.p, self.mask_id, self.w = model, prompt_length, mask_id, cfg_scale

    def forward(self, x):
        from types import SimpleNamespace

        uncond = x.clone()
        uncond[:, : self.p] = self.mask_id
        c, u = self.model(x).logits, self.model(uncond).logits
        return SimpleNamespace(logits=u + (self.w + 1) * (c - u))


def test_guidance_reads_the_guided_model(sharp_model, tok):
    """cfg_scale > 0: every estimator reads LLaDA's guided logits (the brute force run on the guided model)."""
    mask, guided = tok.mask_token_id, Guided(sharp_model, len(PROMPT), tok.mask_token_id, 0.5)
    with torch.no_grad():
        want = brute_elbo(guided, PROMPT, CONT, mask)
        assert math.isclose(exact_elbo(sharp_model, PROMPT, CONT, mask, cfg_scale=0.5), want, rel_tol=1e-5)
        assert not math.isclose(exact_elbo(sharp_model, PROMPT, CONT, mask), want, rel_tol=1e-3)
        l2r = left_to_right(sharp_model, PROMPT, CONT, mask, cfg_scale=0.5)[0]
        assert math.isclose(l2r, brute_left_to_right(guided, PROMPT, CONT, mask), rel_tol=1e-5)

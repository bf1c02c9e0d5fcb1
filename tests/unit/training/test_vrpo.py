"""VRPO (LLaDA 1.5; Zhu et al. 2025, arXiv 2505.19223): its stratified timesteps, the shared (antithetic) noise of
the policy's and the reference's ELBOs, the preference pairs of a group, and its DPO loss and gradient against a
transcription of DARE's implementation (the paper released no training code).

The transcription below restates, in our words, what yjyddq/DARE (commit 83ae8a305a53a914cce563aedceeac88566891cb)
computes for ``algorithm.name == "vrpo"``:

* ``_forward_process_vrpo`` (``verl/trainer/ppo/dllm_core_algos.py``), called once per sequence by
  ``forward_process`` (``verl/workers/dllm_fsdp_workers.py``) on the sequence repeated n_l = mc_num times: over the
  response positions where the attention mask is 1 (l of them), k = ``torch.randint(1, l + 1)``, counts
  x = round(linspace(k, k + (n - 1) l / n, n)) wrapped into [1, l], row i masks x_i positions of a
  ``torch.randperm(l)``; p_mask = x / l.
* ``_forward_micro_batch`` (``verl/workers/actor/llada_dp_actor_vrpo.py``): per timestep i, the sum over masked
  positions of cross_entropy / p_mask; the log-likelihood is minus its mean over the mc_num timesteps, divided by the
  response length; the reference's (``compute_ref_log_prob``) is computed on the same ``perturbed_seq``.
* ``_compute_loss`` and ``compute_dpo_loss``: rows interleaved (chosen, rejected), -logsigmoid(beta ((pi_w - pi_l) -
  (ref_w - ref_l))), mean over pairs.

DARE's packing of each sequence without its padding (``get_packed_logits``) is the identity on sequences without
padding, which the comparison uses; its log-likelihood divided by the (fixed) response length L makes its beta ddmrl's
beta times L (docs/reproduction.md).
"""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import NamedTuple

import float_error
import pytest
import torch
import torch.nn.functional as F
from fake_rewards import varied_reward
from float_error import Computed, Condition, agree, computed, condition, in_float64, loss_and_gradient_agree

import ddmrl.objectives.vrpo as vrpo_module
from ddmrl.config import SamplerConfig, load, method_config
from ddmrl.likelihood import token_logps
from ddmrl.masking.views import Views, apply_view, build_views, stratified_counts
from ddmrl.methods import METHODS
from ddmrl.models.tokenizer import build_tokenizer
from ddmrl.objectives import OBJECTIVES
from ddmrl.objectives.base import ObjectiveInputs
from ddmrl.objectives.vrpo import preference_pairs
from ddmrl.objectives.weights import token_weights
from ddmrl.pipeline import dag
from ddmrl.tasks import make_task
from ddmrl.training.grpo import train_grpo

REPO = Path(__file__).resolve().parents[3]

# ------------------------------------------------------------------------------------------ the transcription


def released_forward_process(batch, attention_mask, prompt_len, mask_id):
    """``_forward_process_vrpo``: [b, P + L] copies of one sequence -> (noisy, mask_indices, p_mask), global RNG."""
    b, seq_len = batch.shape
    response_mask = attention_mask.bool().clone()
    response_mask[:prompt_len] = False
    response_indices = torch.where(response_mask)[0]
    target_len = response_mask.sum().item()
    k = torch.randint(1, target_len + 1, ())
    x = torch.round(torch.linspace(float(k), k + (b - 1) * (target_len / b), steps=b)).long()
    x = ((x - 1) % target_len) + 1
    mask_indices = torch.zeros((b, seq_len), dtype=torch.bool)
    for i in range(b):
        perm = torch.randperm(target_len)
        mask_indices[i, response_indices[perm[: x[i]]]] = True
    noisy = torch.where(mask_indices, mask_id, batch)
    p_mask = (x / target_len).unsqueeze(1).repeat(1, seq_len)
    return noisy, mask_indices, p_mask


def released_perturb(input_ids, attention_mask, prompt_len, mask_id, mc_num, seed):
    """``forward_process`` for vrpo (n_l = mc_num, one call per sequence): [bs, mc_num, P + L] each."""
    torch.manual_seed(seed)
    out = [released_forward_process(input_ids[i : i + 1].repeat(mc_num, 1), attention_mask[i], prompt_len, mask_id)
           for i in range(input_ids.shape[0])]  # fmt: skip
    return tuple(torch.stack(parts) for parts in zip(*out, strict=True))


def released_log_probs(model, input_ids, perturbed_seq, mask_indices, p_mask, response_length):
    """``_forward_micro_batch``' log_probs [bs, response_length] (the per-sequence log-likelihood / L, repeated)."""
    bs, mc_num = perturbed_seq.shape[:2]
    loss_per_sample = torch.zeros(bs, mc_num, dtype=p_mask.dtype)
    for i in range(mc_num):
        logits = model(perturbed_seq[:, i]).logits.float()  # a LLaDA-like model: no shift; no padding to pack
        loss = torch.zeros(bs, dtype=p_mask.dtype)
        for b in range(bs):
            m = mask_indices[b, i]
            loss[b] = (F.cross_entropy(logits[b][m], input_ids[b][m], reduction="none") / p_mask[b, i][m]).sum()
        loss_per_sample[:, i] = -loss
    log_likelihood = loss_per_sample.sum(dim=1) / mc_num
    return (log_likelihood / response_length).view(-1, 1).repeat(1, response_length)


def released_dpo_loss(log_prob, ref_log_prob, beta):
    """``_compute_loss`` + ``compute_dpo_loss`` on interleaved (chosen, rejected) rows."""
    length = log_prob.shape[1]
    log_prob, ref_log_prob = log_prob.reshape(-1, 2, length), ref_log_prob.reshape(-1, 2, length)
    pi_logratios = log_prob[:, 0] - log_prob[:, 1]
    ref_logratios = ref_log_prob[:, 0] - ref_log_prob[:, 1]
    return (-F.logsigmoid(beta * (pi_logratios - ref_logratios))).mean()


# ------------------------------------------------------------------------------------------ helpers


def perturbed(model, seed: int, scale: float):
    other = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g))
    return other


def views_from_release(mask_indices, p_mask, prompt_length) -> Views:
    """ddmrl's views of one optimiser step from DARE's masks [bs, mc_num, P + L] and ratios."""
    masks = mask_indices[:, :, prompt_length:].transpose(0, 1)  # [V, N, L]
    v, n, _ = masks.shape
    t = p_mask[:, :, 0].T.float()  # [V, N]
    return Views(masks, torch.zeros(v, n, prompt_length, dtype=torch.bool), t, 0, schedule=(tuple(range(v)),))


# ------------------------------------------------------------------------------------------ the timesteps


@pytest.mark.parametrize("length", [1, 5, 7, 20])
@pytest.mark.parametrize("n", [1, 3, 4, 8])
def test_the_stratified_counts_are_the_release_counts_for_every_start(length, n):
    """``stratified_counts`` is the release's x for every first count k, and the counts are spread over [1, l]."""
    for k in range(1, length + 1):
        x = torch.round(torch.linspace(float(k), k + (n - 1) * (length / n), steps=n)).long()
        want = ((x - 1) % length) + 1
        got = stratified_counts(length, n, k)
        assert torch.equal(got, want)
        assert int(got.min()) >= 1 and int(got.max()) <= length


def test_vrpo_views_mask_their_counts_of_valid_tokens_one_mask_per_timestep(tok):
    """Each step has views_per_step views; each masks exactly its count of valid completion tokens (none of the
    prompt, none after the first EOS), its ratio t = count / l, and a step's counts are stratified from one start."""
    n, length, prompt_length, mu, n_t = 5, 12, 3, 2, 4
    g = torch.Generator().manual_seed(0)
    valid = torch.ones(n, length, dtype=torch.bool)
    valid[1, 7:] = False  # EOS at 6
    valid[3, 2:] = False
    views = build_views("stratified", mu=mu, seed=11, completion_mask=valid, views_per_step=n_t,
                        pad_id=tok.pad_token_id,
                        prompt_ids=torch.randint(5, 10, (n, prompt_length), generator=g))  # fmt: skip
    assert views.steps == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert not views.prompt_masks.any() and not (views.masks & ~valid[None]).any()
    counts = views.masks.sum(-1)  # [V, N]
    lengths = valid.sum(1)
    assert torch.allclose(views.t, counts / lengths)
    for step in views.steps:
        for i in range(n):
            c = counts[list(step), i]
            assert torch.equal(c, stratified_counts(int(lengths[i]), n_t, int(c[0])))
    again = build_views("stratified", mu=mu, seed=11, completion_mask=valid, views_per_step=n_t,
                        pad_id=tok.pad_token_id,
                        prompt_ids=torch.zeros(n, prompt_length, dtype=torch.long))  # fmt: skip
    assert torch.equal(again.masks, views.masks)  # regenerated from the seed


def test_the_elbo_weights_are_one_over_n_t_times_the_ratio():
    """omega_v(k) = delta_v(k) / (n_t t_v): summed over a step's views, the discrete ELBO (1/n_t) sum_j (l/c_j) sum."""
    valid = torch.ones(2, 6, dtype=torch.bool)
    valid[1, 4:] = False
    views = build_views("stratified", mu=1, seed=3, completion_mask=valid, views_per_step=3, pad_id=1,
                        prompt_ids=torch.zeros(2, 2, dtype=torch.long))  # fmt: skip
    w, _ = token_weights("vrpo_elbo", views, valid)
    counts = views.masks.sum(-1).float()  # [3, 2]
    want = views.masks.float() * (valid.sum(1) / counts / 3)[..., None]
    assert torch.allclose(w, want)


# ------------------------------------------------------------------------------------------ the pairs


def test_a_group_pairs_its_best_and_worst_rollout_and_equal_groups_give_none():
    scores = torch.tensor([0.2, 1.0, -0.5, 1.0, 0.0, 0.0, 0.0, 0.0, 3.0, -1.0, -1.0, 2.0])
    chosen, rejected, valid = preference_pairs(scores, 4)
    assert chosen.tolist() == [1, 4, 8]  # ties: the first best
    assert rejected.tolist() == [2, 4, 9]  # ties: the first worst
    assert valid.tolist() == [True, False, True]


def test_no_pair_gives_a_zero_loss_with_a_zero_gradient():
    logps = torch.full((1, 4, 3), -1.0, requires_grad=True)
    x = ObjectiveInputs(logps, logps.detach(), logps.detach() - 0.1, torch.zeros(4), torch.ones(1, 4, 3), None,
                        torch.ones(1, 4), torch.ones(1, 4, 3, dtype=torch.bool), torch.ones(4, 3, dtype=torch.bool),
                        2)  # fmt: skip
    out = OBJECTIVES["vrpo"](x, method_config("vrpo", dict(beta=0.1)))
    assert out.loss.item() == 0.0
    (grad,) = torch.autograd.grad(out.loss, logps)
    assert torch.equal(grad, torch.zeros_like(grad))


# ------------------------------------------------------------------------------------------ against the release


class Sides(NamedTuple):
    """ddmrl's loss and gradient and DARE's on the same masks in one dtype, the ELBOs / L [N] of both,
    and the condition measures of the sums (from float64 values only)."""

    ours: Computed
    dare: Computed
    elbos: torch.Tensor
    elbos_dare: torch.Tensor
    elbo_scale: float  # S of the ELBOs / L (float_error.weighted_scale)
    cond: Condition | None


def both_sides(models, prompt, completion, advantages, noisy, mask_indices, p_mask, mask_id, beta_dare) -> Sides:
    """DARE (``_forward_micro_batch``, ``compute_dpo_loss`` on each group's best and worst, interleaved) and ddmrl
    (``vrpo_elbo`` weights, ``token_logps``, the vrpo objective on the whole batch with its pairs) on DARE's masks;
    ``models``: the reference and the policy. ddmrl's weights are computed in the default dtype: ``advantages``'."""
    ref_model, policy = models
    (n, length), prompt_length, mc_num = completion.shape, prompt.shape[1], noisy.shape[1]
    input_ids = torch.cat([prompt, completion], 1)
    params = list(policy.parameters())
    order = torch.tensor([2, 1, 4, 5])  # DARE's interleaved (chosen, rejected) rows
    with torch.no_grad():
        ref_rel = released_log_probs(ref_model, input_ids, noisy, mask_indices, p_mask, length)
    pol_rel = released_log_probs(policy, input_ids, noisy, mask_indices, p_mask, length)
    loss_rel = released_dpo_loss(pol_rel[order], ref_rel[order], beta_dare)
    dare = Computed(loss_rel.detach(), torch.autograd.grad(loss_rel, params))

    views = views_from_release(mask_indices, p_mask, prompt_length)
    valid = torch.ones(n, length, dtype=torch.bool)
    default = torch.get_default_dtype()
    torch.set_default_dtype(advantages.dtype)  # the ratios c / l of the weights, exact in float64 as DARE's p_mask
    try:
        weights, _ = token_weights("vrpo_elbo", views, valid)
    finally:
        torch.set_default_dtype(default)
    inputs = [apply_view(prompt, completion, views, v, mask_id) for v in range(mc_num)]
    for v in range(mc_num):
        assert torch.equal(inputs[v], noisy[:, v])  # the same model inputs
    with torch.no_grad():
        ref = torch.stack([token_logps(ref_model, x, completion) for x in inputs])
    logps = torch.stack([token_logps(policy, x, completion) for x in inputs])
    x = ObjectiveInputs(logps, ref, ref, advantages, weights, None, views.t, views.masks, valid, 3)  # groups of 3
    cfg = method_config("vrpo", dict(beta=beta_dare / length))
    out = OBJECTIVES[METHODS["vrpo"].objective](x, cfg)
    ours = computed(out.loss, params)
    assert abs(out.loss.item() - math.log(2)) > 1e-3  # away from the policy = reference point
    cond = condition(out.loss, logps, params, prompt_length + length) if logps.dtype == torch.float64 else None
    elbos, elbo_scale = (
        (weights * logps).sum((0, 2)).detach() / length,
        float_error.weighted_scale(weights, logps, (0, 2)) / length,
    )
    return Sides(ours, dare, elbos, pol_rel[:, 0].detach(), elbo_scale, cond)


@pytest.mark.parametrize("seed", [0, 5])
def test_elbos_dpo_loss_and_gradient_equal_the_release_on_the_same_masks(make_model, tok, seed):
    """Two groups of 3 rollouts; DARE on each group's best and worst (interleaved, its layout), ddmrl on the whole
    batch with its pairs; policy, reference differ. Same masks (DARE's draws): the ELBOs are DARE's log-likelihood
    times L, and the loss and gradient equal DARE's with beta_DARE = beta L.

    Tolerances of the loss and gradient from float32's error (tests/float_error.py): both sides also run in float64
    (the models, the ratios and the advantages) and agree there to 1e-10 of the condition measure S, the check of
    the formulas; in float32 each is within n eps32 S of its float64 value and the two within 2 n eps32 S (n = T for
    the loss, T (P + L) for a gradient). The policy's ELBOs (forward passes, weighted sums of their log-probs) the
    same way, S the largest sum_t |w_t| times the largest |log-prob| and n the pass's longest chain of sums
    (float_error.forward_terms) plus the views' tokens."""
    prompt_length, length, n, mc_num = 3, 6, 6, 4
    gen = torch.Generator().manual_seed(seed)
    prompt = torch.randint(5, 10, (n, prompt_length), generator=gen)
    completion = torch.randint(5, 10, (n, length), generator=gen)
    input_ids = torch.cat([prompt, completion], 1)
    ref_model = make_model(max_positions=prompt_length + length, seed=1)
    models = (ref_model, perturbed(ref_model, 12, scale=0.3))
    advantages = torch.tensor([0.3, -1.0, 0.7, -0.2, 1.5, -1.3])  # pairs: (2, 1) and (4, 5)
    beta_dare, mask_id = 0.5, tok.mask_token_id
    noisy, mask_indices, p_mask = released_perturb(input_ids, torch.ones_like(input_ids), prompt_length, mask_id,
                                                   mc_num, seed)  # fmt: skip
    exact = (mask_indices.sum(-1, keepdim=True).double() / length).expand(p_mask.shape)  # x / l in float64
    assert torch.equal(exact.float(), p_mask)
    f32 = both_sides(models, prompt, completion, advantages, noisy, mask_indices, p_mask, mask_id, beta_dare)
    f64 = both_sides(in_float64(*models), prompt, completion, advantages.double(), noisy, mask_indices, exact,
                     mask_id, beta_dare)  # fmt: skip

    terms = float_error.forward_terms(ref_model, prompt_length + length) + mc_num * length
    agree("the ELBOs", (f32.elbos, f64.elbos), (f32.elbos_dare, f64.elbos_dare), f64.elbo_scale, terms)
    loss_and_gradient_agree(f32.ours, f32.dare, f64.ours, f64.dare, f64.cond)


def test_shared_noise_cancels_in_the_log_ratio_and_cuts_its_variance(make_model, tok):
    """Antithetic sampling: on the same masks the reference's ELBO equals the policy's when they are one model
    (the DPO logit is exactly 0, the loss log 2), and for a nearby policy the estimate of B_theta - B_ref varies far
    less over mask draws than with independent masks for the two."""
    prompt_length, length, n = 2, 8, 2
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(5, 10, (n, prompt_length), generator=gen)
    completion = torch.randint(5, 10, (n, length), generator=gen)
    valid = torch.ones(n, length, dtype=torch.bool)
    ref_model = make_model(max_positions=prompt_length + length, seed=3)
    policy = perturbed(ref_model, 4, scale=0.002)

    def elbo(model, seed):
        views = build_views("stratified", mu=1, seed=seed, completion_mask=valid, views_per_step=2, pad_id=1,
                            prompt_ids=prompt)  # fmt: skip
        w, _ = token_weights("vrpo_elbo", views, valid)
        inputs = [apply_view(prompt, completion, views, v, tok.mask_token_id) for v in range(2)]
        with torch.no_grad():
            return (w * torch.stack([token_logps(model, x, completion) for x in inputs])).sum((0, 2))  # [N]

    same = elbo(ref_model, 7) - elbo(copy.deepcopy(ref_model), 7)
    assert torch.equal(same, torch.zeros_like(same))
    shared = torch.stack([elbo(policy, s) - elbo(ref_model, s) for s in range(24)])  # [S, N]
    independent = torch.stack([elbo(policy, s) - elbo(ref_model, 1000 + s) for s in range(24)])
    assert bool((shared.var(0) * 10 < independent.var(0)).all()), (shared.var(0), independent.var(0))


# ------------------------------------------------------------------------------------------ in the loop


def test_one_rollout_batch_starts_at_log_2_and_trains_the_pairs(make_model, monkeypatch):
    """Through train_grpo: the reference is the policy's copy, so the first optimiser step's DPO logits are exactly
    0 (shared masks) and every pair's loss is log 2; the policy moves, the reference does not."""
    task = make_task("sudoku4")
    monkeypatch.setattr(task, "reward", varied_reward)
    tok = build_tokenizer(task.alphabet, task.special_tokens)
    policy = make_model(max_positions=task.prompt_length + 1 + task.completion_length, tokenizer=tok)
    ref = copy.deepcopy(policy)
    ref_before = {k: p.detach().clone() for k, p in ref.named_parameters()}
    seen = []
    real = vrpo_module.dpo_loss

    def spy(*args):
        out = real(*args)
        seen.append(out.detach().clone())
        return out

    monkeypatch.setattr(vrpo_module, "dpo_loss", spy)
    cfg = method_config("vrpo", dict(max_steps=2, num_prompts=2, num_generations=4, num_iterations=2, beta=0.1,
                                     learning_rate=1e-2, views_per_step=2,
                                     sampler=SamplerConfig(block_length=4, steps=4, temperature=1.0)))  # fmt: skip
    curve, _ = train_grpo(policy, ref, tok, task, lambda it: task.generate(2, seed=100 + it), cfg, 0)
    assert len(curve) == 1 and curve[0]["step"] == 2 and math.isfinite(curve[0]["loss"])
    assert len(seen) == 2 and seen[0].numel() > 0
    # -log sigmoid(0) = log(1 + e^0) = log 2 of the exact 0: e^0 and 1 + 1 exact, the log rounded once (faithful:
    # within an ulp, eps32 log 2), as math.log(2) cast to float32 (half an ulp); then the policy moves past that
    tol = 2 * float_error.EPS32 * math.log(2)
    assert float_error.gap(seen[0], torch.full_like(seen[0], math.log(2))) <= tol
    assert float_error.gap(seen[1], torch.full_like(seen[1], math.log(2))) > tol
    assert all(torch.equal(p, ref_before[k]) for k, p in ref.named_parameters())


# ------------------------------------------------------------------------------------------ in the pipeline


def test_the_extended_profile_runs_vrpo_on_equal_terms():
    """A dry run of the extended profile's DAG (the stages themselves: ``tests/stages``' pattern, too slow to add
    here): VRPO's GRPO runs, evaluations and credit stages, with the shared budget and beta, n_t = 4."""
    cfg = load(REPO / "params.yaml", "extended")
    names = {s.name for s in dag.build(cfg)}
    for task in cfg.tasks:
        assert f"credit_vrpo_{task}" in names
        for seed in cfg.grpo.seeds:
            assert {f"grpo_vrpo_{task}_s{seed}", f"evaluate_vrpo_{task}_s{seed}"} <= names
    run, unigrpo = cfg.methods["vrpo"], cfg.methods["unigrpo"]
    assert run.views_per_step == 4 and run.remasking == "stratified" and run.kl_target == "ref"
    for key in ("max_steps", "num_prompts", "num_generations", "num_iterations", "learning_rate", "beta", "sampler"):
        assert getattr(run, key) == getattr(unigrpo, key), key

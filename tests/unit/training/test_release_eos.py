"""``loss_after_eos`` and ``mdpo_tempered_confidence``: MDPO's, CJ-GRPO's and IGPO's losses through the GRPO loop's own
functions (``loss_positions``, ``make_views``, ``objective_inputs``, the methods' objectives) on rollouts with EOS
padding, against transcriptions of their released loss code on identical inputs; losses and their gradients with
respect to the current log-probabilities (everything a model's gradient is the chain rule of).

Released code transcribed:
  MDPO     autonomousvision/mdpo, ``src/open_r1/mdpo/mdpo_trainer.py``: ``compute_loss`` (one rollout and one selected
           step per micro-batch; its mask is ``input_ids == mask_token_id`` over every completion position) and
           ``src/mdlm_generation_utils.py``: ``diffusion_generate`` (confidence ``p = softmax(logits / temperature)``
           of the sampled token; the step commits the top-k of it).
  CJ-GRPO  yjyddq/EOSER-ASS-RL, ``cj-grpo/cj_grpo_trainer_eoser_ass.py``: ``compute_loss`` (per step, the token mean
           over ``reversed_traj_unmask_positions``, every completion position the step unmasked, over the steps).
  IGPO     facebookresearch/igpo, ``trainer_igpo.py``: ``grpo_forward_process`` with ``d1_masking`` (every
           completion position masked, the prompt never), the entropy filter of ``_generate_and_score_completions``
           and ``compute_loss`` (``sum(loss * token_mask) / token_mask.sum()``).
"""

from __future__ import annotations

import pytest
import torch

from ddmrl.config import GRPOSection, method_config
from ddmrl.errors import ConfigError
from ddmrl.methods import METHODS
from ddmrl.objectives import OBJECTIVES
from ddmrl.objectives.advantages import mdpo_step_advantages
from ddmrl.objectives.weights import hint_entropy_filter
from ddmrl.rollout import Rollouts
from ddmrl.samplers.llada import generate
from ddmrl.samplers.trajectory import Trajectory, states_from_reveal
from ddmrl.tasks.encoding import completion_mask
from ddmrl.training.grpo import Batch, loss_positions, make_views, objective_inputs, view_advantages, view_targets

MASK, PAD, EOS = 0, 1, 3
P, L, N, S = 3, 12, 4, 6
FIRST_EOS = (3, 6, 10, L)  # each row's first EOS (L: none), EOS padding after it


def padded_rollouts() -> Rollouts:
    """N rollouts (2 prompts x G 2) answered then padded with EOS, revealed 2 tokens per step in a random order over
    S steps; a stored trajectory whose predictions fill every masked position (EOS among them) with confidences."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 10, (N, L), generator=g)
    for i, e in enumerate(FIRST_EOS):
        ids[i, e:] = EOS
    reveal = torch.stack([torch.randperm(L, generator=g) // 2 for _ in range(N)])  # [N, L] steps 0..S-1
    states = states_from_reveal(ids, reveal, MASK)  # [S, N, L]
    guess = torch.where(torch.rand(S, N, L, generator=g) < 0.3, EOS, torch.randint(5, 10, (S, N, L), generator=g))
    predictions = torch.where(states == MASK, guess, states)
    confidence = torch.where(states == MASK, torch.rand(S, N, L, generator=g), 1.0)
    prompts = torch.randint(5, 10, (N // 2, P), generator=g).repeat_interleave(2, 0)
    mask = completion_mask(ids, EOS)
    assert not bool(mask.all()) and bool((~mask).sum(1).tolist() == [8, 5, 1, 0])
    return Rollouts(prompts, ids, mask, reveal, [""] * N, S, Trajectory(states, predictions, confidence))


def log_probs(v: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Current (a leaf with gradient), old and reference log-probs [V, N, L], float64, ratios spread around 1."""
    g = torch.Generator().manual_seed(seed)
    cur = -torch.rand(v, N, L, generator=g, dtype=torch.float64) * 3
    old = cur + (torch.rand(v, N, L, generator=g, dtype=torch.float64) - 0.5) * 0.8
    ref = cur + (torch.rand(v, N, L, generator=g, dtype=torch.float64) - 0.5) * 0.8
    return cur.requires_grad_(True), old, ref


BASE = {"num_prompts": 2, "num_generations": 2, "num_iterations": 1, "beta": 0.04, "epsilon": 0.2}


def ddmrl_loss(cfg, batch: Rollouts, step_adv=None, adv=None, cur=None, old=None, ref=None, hints_entropy=None):
    """The loop's loss of its first optimiser step, all rows in one micro-batch (``train_grpo``'s steps 3 to 5)."""
    scored = loss_positions(cfg, batch)
    views, weights, z, inputs = make_views(cfg, scored, 0, PAD, MASK, step_adv)
    per_view = view_advantages(views, step_adv)  # [V, N] | None
    extras = {} if per_view is None else {"view_advantages": per_view}
    b = Batch(scored, torch.zeros(N), adv, torch.zeros(2), views, weights, z, inputs,
              view_targets(views, batch.completion_ids), extras)  # fmt: skip
    if hints_entropy is not None:  # the loop's old pass with IGPO's entropy filter
        hints, entropy = hints_entropy
        valid = b.views.target_masks & b.rollouts.completion_mask[None]
        b = b._replace(weights=hint_entropy_filter(b.weights, valid, entropy, hints, cfg.hint_entropy_top))
    ids = views.steps[0]
    x = objective_inputs(b, old, ref, cur[list(ids)], ids, slice(0, N), 2)
    return OBJECTIVES[METHODS[cfg.method].objective](x, cfg).loss, b


def loss_and_grad(loss: torch.Tensor, cur: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    (grad,) = torch.autograd.grad(loss, cur)
    return loss.detach(), grad


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max())


# --------------------------------------------------------------------------- CJ-GRPO


def released_cj_loss(cur, old, ref, reversed_traj, advantages, epsilon, beta):
    """``compute_loss`` (num_iterations > 1: old log-probs from the rollout pass), transcribed; ``cur`` etc. [S, B, L]
    are ``_get_per_token_logps``' per-step lists (logits of state i, targets state i + 1)."""
    steps = len(reversed_traj) - 1
    loss = torch.tensor(0.0, dtype=torch.float64)
    for i in range(steps):
        per_token_logps = cur[i]
        ref_per_token_logps = ref[i]
        per_token_kl = torch.exp(ref_per_token_logps - per_token_logps) - (ref_per_token_logps - per_token_logps) - 1
        coef_1 = torch.exp(per_token_logps - old[i])
        coef_2 = torch.clamp(coef_1, 1 - epsilon, 1 + epsilon)
        per_token_loss1 = coef_1 * advantages.unsqueeze(1)
        per_token_loss2 = coef_2 * advantages.unsqueeze(1)
        per_token_loss = -torch.min(per_token_loss1, per_token_loss2)
        unmask_positions = (reversed_traj[i] == MASK) & (reversed_traj[i + 1] != MASK)  # every completion position
        per_token_loss = per_token_loss + beta * per_token_kl
        loss += (per_token_loss * unmask_positions).sum() / unmask_positions.sum() / steps
    return loss


def test_cj_grpo_with_eos_padding_is_the_released_loss_and_gradient():
    batch = padded_rollouts()
    cfg = method_config("cj_grpo", BASE)
    assert cfg.loss_after_eos, "CJ-GRPO's default trains every transition of the trajectory"
    adv = torch.tensor([0.7, -0.7, 1.2, -1.2], dtype=torch.float64)
    cur, old, ref = log_probs(S, 1)
    got, _ = ddmrl_loss(cfg, batch, adv=adv, cur=cur, old=old, ref=ref)
    traj = [*batch.trajectory.states, batch.completion_ids]
    want = released_cj_loss(cur, old, ref, traj, adv, 0.2, 0.04)
    (got_l, got_g), (want_l, want_g) = loss_and_grad(got, cur), loss_and_grad(want, cur)
    assert torch.allclose(got_l, want_l, rtol=1e-12, atol=0) and torch.allclose(got_g, want_g, rtol=1e-10, atol=1e-15)
    # d1's completion mask (loss_after_eos: false) drops the EOS padding's transitions
    cut_cfg = method_config("cj_grpo", BASE, loss_after_eos=False)
    cut, _ = ddmrl_loss(cut_cfg, batch, adv=adv, cur=cur, old=old, ref=ref)
    cut_l, cut_g = loss_and_grad(cut, cur)
    assert relative(cut_l, want_l) > 0.05 and relative(cut_g, want_g) > 0.05


# --------------------------------------------------------------------------- MDPO


def released_mdpo_loss(per_token_logps, old, ref, advantages, conf, input_answer_ids, epsilon, beta, eps=1e-4):
    """``compute_loss`` for one micro-batch (one rollout, one selected step), transcribed (``eps``: its 1e-4)."""
    logr = ref - per_token_logps
    per_token_kl = logr**2 / 2
    completion_mask = input_answer_ids == MASK
    lambda_t = L / (completion_mask.sum(dim=-1, keepdim=True) + eps)
    coef_1 = torch.exp(per_token_logps - old)
    coef_2 = torch.clamp(coef_1, 1 - epsilon, 1 + epsilon)
    per_token_loss = -torch.min(coef_1 * advantages, coef_2 * advantages) * lambda_t
    if beta != 0.0:
        per_token_loss = per_token_loss + beta * per_token_kl
    return (per_token_loss * completion_mask * conf).sum() / (completion_mask.sum() + eps)


@pytest.mark.parametrize("beta", [0.0, 0.02])
def test_mdpo_with_eos_padding_is_the_released_loss_and_gradient(beta):
    """The loop's step averages the released micro-batch losses of its views and rows (the release sums them, each
    divided by gradient_accumulation_steps: a constant scale). The released 1e-4 in L / (|M| + 1e-4) and
    |M| + 1e-4 is the only difference (relative 1e-4 / |M| per factor, 1e-4 here): without it, equal up to
    ddmrl's float32 masked fraction (3e-8)."""
    batch = padded_rollouts()
    cfg = method_config("mdpo", {**BASE, "beta": beta}, sample_train_steps=3)
    assert cfg.loss_after_eos and cfg.mdpo_tempered_confidence
    step_r = torch.rand(N, S, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    step_adv = mdpo_step_advantages(step_r, 2)
    cur, old, ref = log_probs(3, 2)
    got, b = ddmrl_loss(cfg, batch, step_adv=step_adv, adv=torch.zeros(N), cur=cur, old=old, ref=ref)
    st = b.views.states

    def released(eps):
        per = [
            released_mdpo_loss(
                cur[v, i],
                old[v, i],
                ref[v, i],
                b.extras["view_advantages"][v, i],
                st.confidence[v, i].double(),
                st.inputs[v, i],
                0.2,
                beta,
                eps,
            )  # fmt: skip
            for v in range(3)
            for i in range(N)
        ]
        return loss_and_grad(torch.stack(per).mean(), cur)

    got_l, got_g = loss_and_grad(got, cur)
    want_l, want_g = released(1e-4)
    assert relative(got_l, want_l) < 3e-4 and relative(got_g, want_g) < 3e-4
    exact_l, exact_g = released(0.0)
    assert relative(got_l, exact_l) < 1e-6 and relative(got_g, exact_g) < 1e-6  # ddmrl's t = |M| / L is float32
    cut, _ = ddmrl_loss(method_config("mdpo", {**BASE, "beta": beta}, sample_train_steps=3, loss_after_eos=False),
                        batch, step_adv=step_adv, adv=torch.zeros(N), cur=cur, old=old, ref=ref)  # fmt: skip
    cut_l, cut_g = loss_and_grad(cut, cur)
    assert relative(cut_l, want_l) > 0.05 and relative(cut_g, want_g) > 0.05


def test_mdpo_tempered_confidence_is_the_released_samplers(sharp_model):
    """At temperature 0.4, every recorded confidence is softmax(logits / 0.4) of the proposal at the state the step
    started from (``diffusion_generate``'s ``torch.gather(p, -1, x0)``), and each step commits the top-k masked
    positions of its block by it (its ``torch.topk(confidence[j], k=num_tokens)``); off, LLaDA's untempered one."""
    prompts = torch.randint(5, 10, (2, 4), generator=torch.Generator().manual_seed(0))
    kw = {"mask_id": MASK, "block_length": 6, "steps": 6, "temperature": 0.4, "record_trajectory": True}
    for tempered in (True, False):
        out = generate(sharp_model, prompts, 12, generator=torch.Generator().manual_seed(3),
                       tempered_confidence=tempered, **kw)  # fmt: skip
        traj, scale = out.trajectory, 0.4 if tempered else 1.0
        for s in range(traj.states.shape[0]):
            x = torch.cat([prompts, traj.states[s]], 1)
            with torch.no_grad():
                logits = sharp_model(x).logits[:, 4:].float()
            logits[..., MASK] = -torch.inf  # ddmrl's samplers never propose the mask token
            p = torch.softmax(logits / scale, -1)
            confidence = torch.gather(p, -1, traj.predictions[s][..., None]).squeeze(-1)
            masked = traj.states[s] == MASK
            assert torch.allclose(traj.confidence[s][masked], confidence[masked], rtol=1e-5, atol=1e-7)
            after = traj.states[s + 1] if s + 1 < traj.states.shape[0] else out.completion_ids
            block = slice(0, 6) if s < 3 else slice(6, 12)
            for j in range(2):
                committed = (masked[j] & (after[j] != MASK)).nonzero().flatten()
                candidates = torch.full((12,), -torch.inf)
                candidates[block] = torch.where(masked[j, block], confidence[j, block], -torch.inf)
                top = torch.topk(candidates, k=len(committed)).indices
                assert sorted(top.tolist()) == committed.tolist()


def test_mdpo_tempered_confidence_changes_the_weights(sharp_model):
    prompts = torch.randint(5, 10, (2, 4), generator=torch.Generator().manual_seed(0))
    kw = {"mask_id": MASK, "block_length": 12, "steps": 6, "temperature": 0.4, "record_trajectory": True}
    runs = [generate(sharp_model, prompts, 12, generator=torch.Generator().manual_seed(3), tempered_confidence=t, **kw)
            for t in (True, False)]  # fmt: skip
    assert not torch.equal(runs[0].trajectory.confidence[0], runs[1].trajectory.confidence[0])


# --------------------------------------------------------------------------- IGPO


def released_d1_masking_view(input_ids: torch.Tensor, prompt_length: int) -> torch.Tensor:
    """``grpo_forward_process`` at timestep = diffusion_steps (``d1_masking``: mask ratio 1): every position that is
    not the prompt is masked; ``random_matrix < 1`` always holds."""
    b, length = input_ids.shape
    prompt_index = torch.zeros(length, dtype=torch.bool)
    prompt_index[:prompt_length] = True
    can_be_masked = ~prompt_index.unsqueeze(0).expand(b, -1)
    should_mask = can_be_masked & (torch.rand((b, length)) < 1.0)
    return torch.where(should_mask, MASK, input_ids)


def released_igpo_token_mask(masked_token_mask, entropy, completion_inpaint_mask, keep_ratio):
    """The entropy filter of ``_generate_and_score_completions``, transcribed."""
    filtered = masked_token_mask.clone()
    for iter_idx in range(masked_token_mask.shape[0]):
        for batch_idx in range(completion_inpaint_mask.shape[0]):
            masked_and_inpainted = masked_token_mask[iter_idx, batch_idx].bool() & completion_inpaint_mask[batch_idx]
            if masked_and_inpainted.any():
                candidate_entropy = entropy[iter_idx, batch_idx][masked_and_inpainted]
                top_k = max(1, int(masked_and_inpainted.sum().item() * keep_ratio))
                _, top_rel = torch.topk(candidate_entropy, top_k, largest=True)
                top_abs = masked_and_inpainted.nonzero(as_tuple=True)[0][top_rel]
                keep = torch.zeros_like(completion_inpaint_mask[batch_idx], dtype=torch.bool)
                keep[top_abs] = True
                is_inpainted = completion_inpaint_mask[batch_idx]
                filtered[iter_idx, batch_idx] = (
                    masked_token_mask[iter_idx, batch_idx].bool() & (~is_inpainted | keep)
                ).to(torch.uint8)
    return filtered


def released_igpo_loss(per_token_logps, old, ref, advantages, token_mask, epsilon_low, epsilon_high, beta):
    """``compute_loss`` with the token ratio (``use_gspo`` false), transcribed."""
    per_token_kl = torch.exp(ref - per_token_logps) - (ref - per_token_logps) - 1
    coef_1 = torch.exp(per_token_logps - old)
    coef_2 = torch.clamp(coef_1, 1 - epsilon_low, 1 + epsilon_high)
    per_token_loss = -torch.min(coef_1 * advantages.unsqueeze(1), coef_2 * advantages.unsqueeze(1))
    per_token_loss = per_token_loss + beta * per_token_kl
    return (per_token_loss * token_mask).sum() / token_mask.sum()


def test_igpo_with_eos_padding_is_the_released_loss_and_gradient():
    """With loss_after_eos and p_mask_prompt 0 (the release's ``d1_masking``), views, the hint filter, the loss and
    its gradient are the release's, view by view."""
    batch = padded_rollouts()
    hints = torch.zeros(N, L, dtype=torch.bool)
    hints[0, 1:9], hints[2, 0:6] = True, True  # row 0's hints run into its EOS padding
    batch = batch._replace(hints=hints)
    cfg = method_config("igpo", {**BASE, "num_iterations": 2}, loss_after_eos=True, p_mask_prompt=0.0)
    adv = torch.tensor([0.7, -0.7, 1.2, -1.2], dtype=torch.float64)
    entropy = torch.rand(2, N, L, generator=torch.Generator().manual_seed(5))
    for v in range(2):
        cur, old, ref = log_probs(2, 3 + v)
        scored = loss_positions(cfg, batch)
        views, weights, z, inputs = make_views(cfg, scored, 0, PAD, MASK)
        want_inputs = released_d1_masking_view(torch.cat([batch.prompt_ids, batch.completion_ids], 1), P)
        assert torch.equal(inputs[v], want_inputs)
        b = Batch(scored, torch.zeros(N), adv, torch.zeros(2), views, weights, z, inputs,
                  view_targets(views, batch.completion_ids))  # fmt: skip
        valid = b.views.target_masks & b.rollouts.completion_mask[None]
        b = b._replace(weights=hint_entropy_filter(b.weights, valid, entropy, hints, cfg.hint_entropy_top))
        x = objective_inputs(b, old, ref, cur[v : v + 1], (v,), slice(0, N), 2)
        got = OBJECTIVES["token_clip"](x, cfg).loss
        masked = (inputs[:, :, P:] == MASK).to(torch.uint8)  # the release's masked_pos
        token_mask = released_igpo_token_mask(masked, entropy, hints, 0.2)[v]
        want = released_igpo_loss(cur[v], old[v], ref[v], adv, token_mask, 0.2, 0.28, 0.04)
        (got_l, got_g), (want_l, want_g) = loss_and_grad(got, cur), loss_and_grad(want, cur)
        assert torch.allclose(got_l, want_l, rtol=1e-12, atol=0)
        assert torch.allclose(got_g, want_g, rtol=1e-10, atol=1e-15)


def test_igpo_default_is_d1s_completion_mask():
    """IGPO's paper states d1's objective: by default the loss stops at the first EOS, as d1's."""
    cfg = method_config("igpo", BASE)
    assert not cfg.loss_after_eos and cfg.p_mask_prompt == 0.15
    batch = padded_rollouts()
    assert torch.equal(loss_positions(cfg, batch).completion_mask, batch.completion_mask)


@pytest.mark.parametrize(
    ("method", "key"),
    [("diffu_grpo", "loss_after_eos"), ("maskgrpo", "loss_after_eos"), ("cj_grpo", "mdpo_tempered_confidence")],
)
def test_the_switches_refuse_other_methods_in_one_line(method, key):
    with pytest.raises(ConfigError, match=key) as e:
        method_config(method, {}, **{key: True})
    assert "\n" not in str(e.value)


def test_the_switches_are_set_per_section_not_under_grpo():
    for key in ("loss_after_eos", "mdpo_tempered_confidence"):
        with pytest.raises((ConfigError, ValueError), match=key):
            GRPOSection(**{key: True})

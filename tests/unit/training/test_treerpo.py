"""d-TreeRPO (Pan et al. 2025, arXiv 2512.09675): its tree rollouts, tree advantages, and loss and gradient against a
transcription of its released trainer.

The transcription below restates, in our words, what THU-BPM/d-TreeRPO ``dtreerpo/dtreerpo_trainer.py`` (commit
3eb6f21b at the time of writing; DARE, yjyddq/DARE at 83ae8a30, ports the same to verl in
``verl/trainer/ppo/dtreerpo_algos.py`` and ``verl/workers/actor/llada_dp_actor_dtreerpo.py``) computes:

* ``_generate_partial``: continue a partial state from remaining-step ``current_step`` for ``steps_to_run`` steps of
  LLaDA's semi-AR schedule: a block entered mid-way splits its remaining masks over its remaining steps
  (``get_num_transfer_tokens``), each step commits the top-k confident proposals of the block;
* ``_perform_tree_search_and_compute_advantages``: branch points N, N - N/s, ..., 0; the root (fully masked) gets
  ``num_tree_samples`` children, every later node ``tree_branch_factor``, level by level; leaf values are the
  rewards, a node's value the nanmean of its children's; each non-root node's local advantage is its value minus
  the nanmean of its siblings' (0 without siblings); one segment per non-root node (parent generation, child
  generation, advantage per prompt, group id per (parent node, prompt)), old (and reference) log-probs from
  ``_get_local_transition_logps``;
* ``_get_local_transition_logps``: one forward pass of the parent state, the child's token log-prob at the
  positions the parent masked and the child revealed, up to the child's first EOS (``_build_completion_mask``);
* ``compute_loss``: per-token ratio, min(rho A, clip(rho) A) token-mean per row over that mask (|M| clamped to 1),
  mean over rows; + beta k3 KL the same way; + lambda(t) times the self-distillation loss, the mean over (group,
  position) of KL(q || p_parent) with q the softmax(A / tau(t))-weighted distribution of the tokens the group's
  positive-advantage children revealed there.

Here every parent's segments are concatenated into one step (the release's ``_concat_segments``, as with
``parents_per_step`` = all parents); the test models have no EOS in the loss (``eos_id=None``, our completion mask
all ones) since the release cuts at the child state's first EOS and ddmrl at the completion's (docs/reproduction.md).
"""

from __future__ import annotations

import copy
import math
import types
from collections import defaultdict

import pytest
import torch
import torch.nn.functional as F
from float_error import Computed, computed, condition, in_float64, loss_and_gradient_agree

from ddmrl.config import ConfigError, SamplerConfig, method_config
from ddmrl.diagnostics import credit_by_reveal_step, token_credit
from ddmrl.likelihood import token_logps
from ddmrl.methods import METHODS
from ddmrl.objectives import OBJECTIVES, VIEW_ADVANTAGES
from ddmrl.objectives.advantages import tree_advantages
from ddmrl.rollout import Rollouts, sampler_kwargs, tree_rollout, tree_steps
from ddmrl.samplers import SAMPLERS
from ddmrl.training.grpo import Batch, make_views, objective_inputs, view_logps, view_targets

METHOD = METHODS["treerpo"]

# ------------------------------------------------------------------------------------------ the transcription


def released_num_transfer_tokens(mask_index: torch.Tensor, steps: int) -> torch.Tensor:
    """``get_num_transfer_tokens`` of DTreeRPOTrainer."""
    mask_num = mask_index.sum(dim=1, keepdim=True)
    base, remainder = mask_num // steps, mask_num % steps
    out = base.expand(-1, steps).clone()
    out[torch.arange(steps).unsqueeze(0) < remainder] += 1
    return out.long()


@torch.no_grad()
def released_generate_partial(model, start, current_step, steps_to_run, prompt_length, total_steps, block_length,
                              mask_id):  # fmt: skip
    """``_generate_partial`` at temperature 0 (argmax; low_confidence remasking, cfg 0)."""
    x = start.clone()
    total_blocks = (x.shape[1] - prompt_length) // block_length
    steps_per_block = total_steps // total_blocks
    target_step = max(0, current_step - steps_to_run)
    current_block_idx = (total_steps - current_step) // steps_per_block
    target_block_idx = (total_steps - target_step) // steps_per_block
    remaining_steps = steps_to_run
    for block_idx in range(current_block_idx, min(target_block_idx + 1, total_blocks)):
        if remaining_steps <= 0:
            break
        start_idx = prompt_length + block_idx * block_length
        end_idx = prompt_length + (block_idx + 1) * block_length
        block_step_start = total_steps - block_idx * steps_per_block
        block_step_end = total_steps - (block_idx + 1) * steps_per_block
        steps_needed = max(0, min(current_step, block_step_start) - max(target_step, block_step_end))
        if steps_needed <= 0:
            continue
        done_in_block = max(0, min(block_step_start - current_step, steps_per_block))
        remain_in_block = steps_per_block - done_in_block
        if remain_in_block <= 0:
            continue
        steps_in_this_block = min(steps_needed, remaining_steps, remain_in_block)
        schedule = released_num_transfer_tokens(x[:, start_idx:end_idx] == mask_id, remain_in_block)
        for step_i in range(steps_in_this_block):
            block_mask = x[:, start_idx:end_idx] == mask_id
            budget = schedule[:, step_i]
            mask_full = x == mask_id
            logits = model(x).logits
            x0 = torch.argmax(logits, dim=-1)
            x0_p = torch.gather(F.softmax(logits, dim=-1), -1, x0.unsqueeze(-1)).squeeze(-1)
            x0_p[:, :start_idx] = -float("inf")
            x0_p[:, end_idx:] = -float("inf")
            x0 = torch.where(mask_full, x0, x)
            confidence = torch.where(mask_full, x0_p, -torch.inf)
            transfer = torch.zeros_like(x0, dtype=torch.bool)
            for j in range(x.shape[0]):
                k = min(int(budget[j]), int(block_mask[j].sum()))
                if k > 0:
                    transfer[j, torch.topk(confidence[j], k=k).indices] = True
            transfer[:, :prompt_length] = False
            x[transfer] = x0[transfer]
        remaining_steps -= steps_in_this_block
    return x


def released_completion_mask(completion_ids, mask_id, eos_id=None):
    """``_build_completion_mask``: unmasked positions up to the first EOS (all unmasked ones without an EOS id)."""
    is_unmasked = (completion_ids != mask_id).float()
    if eos_id is None:
        return is_unmasked
    is_eos = completion_ids == eos_id
    b, length = is_eos.shape
    eos_idx = torch.full((b,), length, dtype=torch.long)
    has = is_eos.any(1)
    eos_idx[has] = is_eos[has].int().argmax(1)
    return is_unmasked * (torch.arange(length).expand(b, length) <= eos_idx[:, None]).float()


def released_local_logps(model, parent_ids, child_ids, prompt_length, mask_id):
    """``_get_local_transition_logps``."""
    logits = model(parent_ids).logits[:, prompt_length:]
    child, parent = child_ids[:, prompt_length:], parent_ids[:, prompt_length:]
    changed = (parent == mask_id) & (child != mask_id)
    active = (changed & (released_completion_mask(child, mask_id) > 0)).to(logits.dtype)
    logps = -F.cross_entropy(logits.reshape(-1, logits.shape[-1]), child.reshape(-1), reduction="none")
    return torch.nan_to_num(logps.view(child.shape) * active, nan=0.0, posinf=0.0, neginf=0.0)


def released_tree(node_generations, branching, rewards, batch_size):
    """The tree of ``_perform_tree_search_and_compute_advantages`` (node dicts, level by level), its values and
    local advantages. ``node_generations[(depth, j)]``: [B, P + L] the generation of node j of that depth."""
    root = {"id": "root", "parent_id": None, "depth": 0, "children": [], "value_vec": torch.zeros(batch_size)}
    nodes, level = {"root": root}, [root]
    for d, width in enumerate(branching):
        nxt = []
        for node in level:
            for _ in range(width):
                j = len(nxt)
                child = {"id": f"{d + 1}:{j}", "parent_id": node["id"], "depth": d + 1, "children": [],
                         "value_vec": None, "is_leaf": d + 1 == len(branching)}  # fmt: skip
                child["generation"] = node_generations[(d + 1, j)]
                nodes[child["id"]] = child
                node["children"].append(child["id"])
                nxt.append(child)
        level = nxt
    root["generation"] = node_generations[(0, 0)]
    leaves = [n for n in nodes.values() if n.get("is_leaf")]
    for j, leaf in enumerate(leaves):  # rewards of leaf j of prompt b at b * G + j
        leaf["value_vec"] = rewards.view(batch_size, -1)[:, j].clone()
    for depth in reversed(range(len(branching))):  # bottom-up, the root last
        for node in nodes.values():
            if node["depth"] == depth and node["children"]:
                stack = torch.stack([nodes[c]["value_vec"] for c in node["children"]])
                node["value_vec"] = torch.nan_to_num(torch.nanmean(stack, dim=0), nan=0.0)
    for node_id, node in nodes.items():
        if node_id == "root":
            continue
        siblings = [c for c in nodes[node["parent_id"]]["children"] if c != node_id]
        if siblings:
            mean = torch.nanmean(torch.stack([nodes[c]["value_vec"] for c in siblings]), dim=0)
            node["adv"] = node["value_vec"] - torch.nan_to_num(mean, nan=0.0)
        else:
            node["adv"] = node["value_vec"].clone()
    return nodes


def released_segments(nodes, old_model, ref_model, prompt_length, mask_id):
    """Every non-root node's segment, concatenated (``_concat_segments`` of every parent's)."""
    keys, next_gid = {}, 0
    seg = defaultdict(list)
    for node_id, node in nodes.items():
        if node_id == "root":
            continue
        parent = nodes[node["parent_id"]]
        b = node["generation"].shape[0]
        gids = []
        for i in range(b):
            if (node["parent_id"], i) not in keys:
                keys[(node["parent_id"], i)] = next_gid
                next_gid += 1
            gids.append(keys[(node["parent_id"], i)])
        seg["parent_ids"].append(parent["generation"])
        seg["child_ids"].append(node["generation"])
        seg["local_advantages"].append(node["adv"])
        seg["group_ids"].append(torch.tensor(gids))
        with torch.no_grad():
            seg["old"].append(released_local_logps(old_model, parent["generation"], node["generation"],
                                                   prompt_length, mask_id))  # fmt: skip
            seg["ref"].append(released_local_logps(ref_model, parent["generation"], node["generation"],
                                                   prompt_length, mask_id))  # fmt: skip
    return {k: torch.cat(v) for k, v in seg.items()}


def released_loss(model, seg, prompt_length, mask_id, t, big_t, epsilon, beta, lambda_max, gamma, tau_max, beta_tau):
    """``compute_loss`` with self-distillation on and global step ``t`` of ``big_t`` (max_steps)."""
    parent_ids, child_ids = seg["parent_ids"], seg["child_ids"]
    new = released_local_logps(model, parent_ids, child_ids, prompt_length, mask_id)
    child = child_ids[:, prompt_length:]
    active = released_completion_mask(child, mask_id) * (new != 0).float()
    l_eff = active.sum(1).clamp_min(1)
    ratio = torch.exp(new - seg["old"])
    a = seg["local_advantages"].unsqueeze(1)
    obj = torch.min(ratio * a, torch.clamp(ratio, 1 - epsilon, 1 + epsilon) * a)
    total = (-((obj * active).sum(1) / l_eff)).mean()
    delta = seg["ref"] - new
    total = total + beta * (((torch.exp(delta) - delta - 1) * active).sum(1) / l_eff).mean()
    progress = min(1.0, max(0.0, t / big_t))
    lam = lambda_max * (math.exp(gamma * progress) - 1.0) / (math.exp(gamma) - 1.0)
    tau = max(tau_max * max(0.0, 1.0 - progress) ** beta_tau, 1e-6)
    group_ids = seg["group_ids"]
    uniq = torch.unique(group_ids)
    refs = torch.stack([(group_ids == g).nonzero().squeeze(-1)[0] for g in uniq.tolist()])
    logp_parent = F.log_softmax(model(parent_ids[refs]).logits[:, prompt_length:], dim=-1)  # [G, Lc, V]
    s, count = torch.zeros(()), 0
    for pos, g in enumerate(uniq.tolist()):
        idxs = (group_ids == g).nonzero().squeeze(-1)
        if idxs.numel() <= 1:
            continue
        adv = seg["local_advantages"][idxs]
        keep = adv > 0
        if keep.sum() == 0:
            continue
        w = F.softmax(adv[keep] / tau, dim=0)
        grp_active, toks = active[idxs[keep]] > 0, child[idxs[keep]]
        for j in range(child.shape[1]):
            on = grp_active[:, j]
            if not on.any():
                continue
            u, inv = torch.unique(toks[on, j], return_inverse=True)
            q = torch.zeros_like(u, dtype=torch.float32).index_add_(0, inv, w[on])
            if q.sum() <= 0:
                continue
            q = q / (q.sum() + 1e-8)
            s = s + torch.sum(q * (torch.log(q + 1e-8) - logp_parent[pos, j].gather(0, u)))
            count += 1
    return total + lam * (s / count if count else 0.0)


# ------------------------------------------------------------------------------------------ helpers


class NoMask(torch.nn.Module):
    """The tiny model with the mask token never the argmax (ddmrl's sampler never proposes it; the release's may)."""

    def __init__(self, model, mask_id: int) -> None:
        super().__init__()
        self.model, self.mask_id = model, mask_id

    def forward(self, x):
        out = self.model(x)
        out.logits[..., self.mask_id] = -1e4
        return out


def sampler(**kw) -> SamplerConfig:
    return SamplerConfig(**{"block_length": 4, "steps": 8, "temperature": 1.0, **kw})


def tree(tok, model, prompts, branching, length, seed=0, **kw):
    """Our tree rollout of ``prompts`` [B, P]."""
    task = types.SimpleNamespace(completion_length=length, decode=lambda _tok, ids: [""] * ids.shape[0])
    s = sampler(**kw)
    kwargs = sampler_kwargs(s, length)
    return tree_rollout(model, tok, task, prompts, branching, s, torch.Generator().manual_seed(seed), kwargs)


def config(**kw):
    base = dict(num_prompts=2, num_generations=4, num_iterations=1, epsilon=0.4, beta=0.01, max_steps=10)
    return method_config("treerpo", base, **{"num_tree_samples": 2, "tree_branch_factor": 2, **kw})


def state_at(batch: Rollouts, step: int, mask_id: int) -> torch.Tensor:
    """[N, L] every row's state before sampler step ``step`` (its tokens revealed at a step >= it masked)."""
    return batch.completion_ids.masked_fill(batch.reveal_step >= step, mask_id)


# ------------------------------------------------------------------------------------------ the method


def test_what_treerpo_fixes_and_its_release_defaults():
    p = METHOD.params()
    assert METHOD.fixed() == {"remasking": "tree"}
    assert (p.num_tree_samples, p.tree_branch_factor, p.tree_contraction_factor, p.num_generations) == (0, 4, 2, 8)
    assert (p.sd_lambda_max, p.sd_gamma, p.sd_tau_max, p.sd_beta) == (3e-3, 2.0, 2.0, 0.7)
    assert METHOD.objective == "tree_clip" and METHOD.view_advantage == "tree"
    assert METHOD.rollout_options(p) == {"branching": (2, 4)}  # G 8: 2 trees of 4 leaves
    release = config(num_generations=16, tree_branch_factor=4, num_tree_samples=0)
    assert METHOD.rollout_options(release) == {"branching": (4, 4)}  # the release's 4 trees of 4 x 4
    assert METHOD.rollout_options(config(tree_contraction_factor=3, num_generations=8)) == {"branching": (2, 2, 2)}


@pytest.mark.parametrize(
    ("keys", "key"),
    [
        ({"num_generations": 8}, "num_generations"),
        ({"num_generations": 5, "num_tree_samples": 0}, "num_generations"),
        ({"num_generations": 2, "num_tree_samples": 0}, "num_generations"),  # a lone root child
        ({"tree_branch_factor": 1, "num_tree_samples": 0}, "tree_branch_factor"),  # lone children below
        ({"sampler": {"kv_cache": "prefix"}}, "sampler.kv_cache"),
        ({"sampler": {"schedule": "ass"}}, "sampler.schedule"),
        ({"sampler": {"remasking": "rcr"}}, "sampler.remasking"),
    ],
)
def test_a_tree_the_sampler_cannot_grow_is_refused_in_one_line(keys, key):
    with pytest.raises(ConfigError) as info:
        config(**keys)
    msg = str(info.value)
    assert msg.startswith(key) and "\n" not in msg, msg


# ------------------------------------------------------------------------------------------ (a) the tree rollout


def test_consecutive_step_windows_reproduce_the_whole_run(tok, make_model):
    """The sampler hook: resuming a partial state for steps [a, b) (windows cutting blocks mid-way) from the same
    generator gives the uninterrupted run's tokens and reveal steps, at temperature 1."""
    length, p = 8, 3
    model = make_model(max_positions=p + length, seed=2)
    prompts = torch.randint(5, 10, (3, p), generator=torch.Generator().manual_seed(0))
    kw = {**sampler_kwargs(sampler(), length), "mask_id": tok.mask_token_id}
    full = SAMPLERS["llada"](model, prompts, length, generator=torch.Generator().manual_seed(7), **kw)
    gen, state = torch.Generator().manual_seed(7), torch.full((3, length), tok.mask_token_id)
    reveal, nfe = torch.full((3, length), -1), 0
    for window in [(0, 3), (3, 5), (5, 8)]:
        out = SAMPLERS["llada"](model, prompts, length, generator=gen, clamp=state, step_window=window, **kw)
        state, reveal = out.completion_ids, torch.where(out.reveal_step >= 0, out.reveal_step, reveal)
        nfe += out.nfe
    assert torch.equal(state, full.completion_ids) and torch.equal(reveal, full.reveal_step) and nfe == full.nfe


def test_the_tree_rows_share_their_states_up_to_each_branch_point(tok, make_model):
    length, p, branching = 8, 3, (2, 3)
    model = make_model(max_positions=p + length, seed=2)
    prompts = torch.randint(5, 10, (2, p), generator=torch.Generator().manual_seed(0))
    batch = tree(tok, model, prompts, branching, length)
    assert batch.tree.steps == tree_steps(8, 2) == (4, 8) and batch.completion_ids.shape == (12, length)
    assert torch.equal(batch.prompt_ids, prompts.repeat_interleave(6, 0)) and batch.nfe == 8
    first = state_at(batch, 4, tok.mask_token_id).view(4, 3, length)  # [prompt x root child, T, L]
    assert bool((first == first[:, :1]).all())  # siblings share their parent's state
    leaves = batch.completion_ids.view(4, 3, length)
    assert not torch.equal(leaves[:, 0], leaves[:, 1])  # and continue with their own draws
    assert bool((batch.reveal_step >= 0).all()) and int(batch.reveal_step.max()) == 7


def test_the_branches_are_the_release_partial_generations_at_temperature_0(tok, make_model):
    """Each node's state is the release's ``_generate_partial`` from its parent's (greedy: the branches agree)."""
    length, p, mask_id = 8, 3, tok.mask_token_id
    model = NoMask(make_model(max_positions=p + length, seed=4), mask_id)
    prompts = torch.randint(5, 10, (2, p), generator=torch.Generator().manual_seed(1))
    for steps, depth in [(8, 2), (8, 3), (4, 2)]:
        batch = tree(tok, model, prompts, (1,) * depth, length, temperature=0.0, steps=steps)
        x = torch.cat([prompts, torch.full((2, length), mask_id)], 1)
        remaining = [steps - int(k * steps / depth) for k in range(depth + 1)]  # the release's branch points
        for k in range(depth):
            run = remaining[k] - remaining[k + 1]
            x = released_generate_partial(model, x, remaining[k], run, p, steps, 4, mask_id)
            assert torch.equal(x[:, p:], state_at(batch, steps - remaining[k + 1], mask_id)), (steps, depth, k)


# ------------------------------------------------------------------------------------------ (b) the advantages


@pytest.mark.parametrize("branching", [(2, 2), (3, 2), (2, 2, 2), (1, 3)])
def test_tree_advantages_equal_the_release_bottom_up_values_and_sibling_baselines(branching):
    b, g = 2, math.prod(branching)
    rewards = torch.randint(0, 3, (b * g,), generator=torch.Generator().manual_seed(3)).float()
    ours = tree_advantages(rewards, branching)  # [D, B G]
    gens = {(d, j): None for d in range(len(branching) + 1) for j in range(math.prod(branching[:d]))}
    nodes = released_tree(gens, branching, rewards, b)
    for d in range(len(branching)):
        per_node = g // math.prod(branching[: d + 1])
        for row in range(b * g):
            node = nodes[f"{d + 1}:{(row % g) // per_node}"]
            assert torch.isclose(ours[d, row], node["adv"][row // g]), (d, row)


# ------------------------------------------------------------------------------------------ (c) loss and gradient


def both_sides(models, batch, prompts, branching, rewards, cfg, t, mask_id, pad_id) -> tuple[Computed, ...]:
    """ddmrl's loss and gradient on the tree (our views, old and reference passes, tree advantages, ``tree_clip``)
    and the release's (its segments and ``compute_loss``, all parents in one step), and in float64 the condition
    measures of the sums; ``models``: the old, reference and current policies. The rewards stay float32 in a float64
    run: both sides' advantages and self-distillation targets q are float32 values (q in float32 on both)."""
    old_model, ref_model, model = models
    (n_prompts, p), length, g = prompts.shape, batch.completion_ids.shape[1], math.prod(branching)
    params = list(model.parameters())
    # ours
    views, weights, z, inputs = make_views(cfg, batch, 5, pad_id, mask_id)
    targets = view_targets(views, batch.completion_ids)
    adv = tree_advantages(rewards, branching)
    b = Batch(batch, rewards, torch.zeros(8), torch.zeros(2, dtype=torch.bool), views, weights, z, inputs, targets,
              {"view_advantages": adv})  # fmt: skip
    with torch.no_grad():
        old, ref = view_logps(old_model, inputs, targets), view_logps(ref_model, inputs, targets)
    ids = views.steps[0]
    assert ids == (0, 1)
    logps = torch.stack([token_logps(model, inputs[v], targets[v]) for v in ids])
    out = OBJECTIVES[METHOD.objective](objective_inputs(b, old, ref, logps, ids, slice(None), g, t / 10), cfg)
    ours = computed(out.loss, params)
    # its terms, logged to the curve: the self-distillation loss too, 0 while its weight is (t = 0)
    assert set(out.terms) == {"kl", "clip_ratio", "self_distillation"}
    assert (out.terms["self_distillation"] > 0) == (t > 0), (t, out.terms)

    # the release
    gens = {(0, 0): torch.cat([prompts, torch.full((n_prompts, length), mask_id)], 1)}
    for d in (1, 2):
        state = state_at(batch, batch.tree.steps[d - 1], mask_id).view(n_prompts, g, length)
        per_node = g // math.prod(branching[:d])
        for j in range(math.prod(branching[:d])):
            gens[(d, j)] = torch.cat([prompts, state[:, j * per_node]], 1)
    nodes = released_tree(gens, branching, rewards, n_prompts)
    seg = released_segments(nodes, old_model, ref_model, p, mask_id)
    loss = released_loss(model, seg, p, mask_id, t, 10, 0.4, 0.01, 3e-3, 2.0, 2.0, 0.7)
    theirs = Computed(loss.detach(), torch.autograd.grad(loss, params))
    cond = condition(out.loss, logps, params, p + length) if logps.dtype == torch.float64 else None
    return ours, theirs, cond


@pytest.mark.parametrize("t", [0, 5, 10])
def test_loss_and_gradient_equal_the_release_on_the_same_tree(tok, make_model, t):
    """Our views, old and reference passes, tree advantages and ``tree_clip`` against the release's segments and
    ``compute_loss`` (all parents in one step), at the start, middle and end of the self-distillation schedule.

    Tolerances from float32's error (tests/float_error.py): both sides also run in float64 (the models) and agree
    there to 1e-10 of the condition measure S, the check of the formulas; in float32 each is within n eps32 S of its
    float64 value and the two within 2 n eps32 S (n = T for the loss, T (P + L) for a gradient)."""
    length, p, branching, mask_id, n_prompts = 8, 3, (2, 2), tok.mask_token_id, 2
    model = make_model(max_positions=p + length, seed=5)
    with torch.no_grad():  # spread the confidences; the old and reference policies near the current one
        for w in model.parameters():
            w.add_(0.3 * torch.randn(w.shape, generator=torch.Generator().manual_seed(w.numel())))
    old_model, ref_model = copy.deepcopy(model), copy.deepcopy(model)
    with torch.no_grad():
        for i, (w_old, w_ref) in enumerate(zip(old_model.parameters(), ref_model.parameters(), strict=True)):
            w_old.add_(0.05 * torch.randn(w_old.shape, generator=torch.Generator().manual_seed(i)))
            w_ref.add_(0.05 * torch.randn(w_ref.shape, generator=torch.Generator().manual_seed(100 + i)))
    prompts = torch.randint(5, 10, (n_prompts, p), generator=torch.Generator().manual_seed(2))
    batch = tree(tok, model, prompts, branching, length, seed=3)
    batch = batch._replace(completion_mask=torch.ones_like(batch.completion_mask))  # no EOS cut (module docstring)
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.5])
    args = batch, prompts, branching, rewards, config(max_steps=10), t, mask_id, tok.pad_token_id
    ours, theirs, _ = both_sides((old_model, ref_model, model), *args)
    ours64, theirs64, cond = both_sides(in_float64(old_model, ref_model, model), *args)

    assert abs(theirs.loss.item()) > 1e-4
    loss_and_gradient_agree(ours, theirs, ours64, theirs64, cond)


def test_the_credit_diagnostic_divides_each_edge_by_its_advantage(tok, make_model):
    """``stages/credit.py`` on tree rollouts: the per-edge advantages (VIEW_ADVANTAGES) enter token_credit; at ratio 1
    a token's credit is its edge's share of the loss: every target of an edge with a nonzero advantage gets some."""
    length, p, branching = 8, 3, (2, 2)
    model = make_model(max_positions=p + length, seed=5)
    prompts = torch.randint(5, 10, (2, p), generator=torch.Generator().manual_seed(2))
    batch = tree(tok, model, prompts, branching, length, seed=3)
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.5])
    view_adv = VIEW_ADVANTAGES[METHOD.view_advantage](rewards, batch)  # [2, 8]
    assert torch.equal(view_adv, tree_advantages(rewards, branching))
    adv = view_adv.abs().amax(0)
    credit = token_credit(model, config(sd_lambda_max=0.0), batch, adv, 5, tok.pad_token_id, tok.mask_token_id,
                          None, view_adv)  # fmt: skip
    depth = (batch.reveal_step >= batch.tree.steps[0]).long()  # [N, L] the edge that revealed each token
    edge_adv = torch.where(depth == 0, view_adv[0][:, None], view_adv[1][:, None])  # [N, L]
    got = (credit > 0) & batch.completion_mask
    assert torch.equal(got, (edge_adv != 0) & batch.completion_mask)
    table = credit_by_reveal_step(credit, batch, adv)
    assert len(table) > 0 and table["relative_credit"].notna().all()

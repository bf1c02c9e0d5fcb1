"""IGPO through the GRPO loop (ddmrl.training.grpo with ddmrl.augmenters.igpo) on the chain task and a tiny model:
the augmenter runs between the rewards and the advantages, its counts reach the curve, replaced samples enter the
advantages with their rewards, and only the top tau of their hint positions carry weight in the objective."""

from __future__ import annotations

import copy

import pytest
import torch

import ddmrl.augmenters.igpo as igpo
import ddmrl.objectives.token_clip as token_clip_module
from ddmrl.augmenters.base import Augmenter
from ddmrl.config import ConfigError, SamplerConfig, method_config
from ddmrl.models.tokenizer import build_tokenizer
from ddmrl.objectives.advantages import group_advantages
from ddmrl.tasks import make_task
from ddmrl.training.grpo import train_grpo

G = 4


def config(**kw):
    base = dict(
        method="igpo", max_steps=2, num_prompts=2, num_generations=G, num_iterations=2, learning_rate=1e-2, beta=0.04,
        sampler=SamplerConfig(block_length=8, steps=12, temperature=1.0, kv_cache="prefix"),
    )  # fmt: skip
    return method_config("igpo", base, **kw)


@pytest.fixture
def setup(make_model):
    task = make_task("chain")
    tok = build_tokenizer(task.alphabet, task.special_tokens)
    policy = make_model(max_positions=task.prompt_length + 1 + task.completion_length, tokenizer=tok, hidden=16)
    return task, tok, policy


def test_all_wrong_groups_get_inpainted_samples_and_only_top_tau_hints_carry_weight(setup, monkeypatch):
    """Rollouts with the prefix KV cache (the inpainted samples are drawn without it). Verdicts under the test's
    control: every rollout wrong, every inpainted sample right. Each group then gets
    max_replacements = 2 inpainted samples; the objective's weights keep, per view and replaced row, exactly
    max(1, int(0.2 n)) of its n valid hint positions (a hint after the sample's first EOS is no target) and every
    other completion token; the advantages are those of the augmented rewards."""
    task, tok, policy = setup
    calls = []

    def verdicts(task_, texts, examples, g):
        calls.append(len(texts))
        return torch.full((len(texts),), len(calls) % 2 == 0)  # 1st call of a batch: rollouts; 2nd: inpainted

    monkeypatch.setattr(igpo, "correct", verdicts)
    seen_aug, seen_obj = [], []
    monkeypatch.setattr(
        igpo,
        "IGPO",
        Augmenter(igpo.check, lambda x: (seen_aug.append(out := igpo.augment(x)), out)[1]),
    )
    real = token_clip_module.token_clip
    monkeypatch.setattr(token_clip_module, "token_clip", lambda x, cfg: (seen_obj.append(x), real(x, cfg))[1])
    cfg = config(max_replacements=2)
    curve, _ = train_grpo(policy, copy.deepcopy(policy), tok, task, lambda it: task.generate(2, seed=it), cfg, 0)
    assert [row["augment/replaced"] for row in curve] == [4.0] and curve[0]["augment/groups"] == 2.0
    assert curve[0]["augment/all_wrong_groups"] == 2.0 and curve[0]["augment/inpainted_correct"] == 8.0
    batch = seen_aug[0].batch
    assert [bool(h.any()) for h in batch.hints] == [True, True, False, False] * 2
    hints = batch.hints & batch.completion_mask  # [N, L]
    advantages, _ = group_advantages(seen_aug[0].rewards, G)
    assert int(hints.sum(1).max()) >= 5  # some row has hints to filter
    for x in seen_obj:  # one per optimiser step: its view, all rows
        w = x.weights[0]  # [N, L]
        for row in range(2 * G):
            n = int(hints[row].sum())
            kept = int(((w[row] > 0) & hints[row]).sum())
            assert kept == (max(1, int(0.2 * n)) if n else 0), (row, n, kept)
            assert torch.equal(w[row][~hints[row]], batch.completion_mask[row][~hints[row]].float())
        assert torch.equal(x.advantages, advantages)


def test_the_loop_refuses_a_task_without_traces_in_one_line(setup, make_model):
    task = make_task("sudoku4")
    tok = build_tokenizer(task.alphabet, task.special_tokens)
    policy = make_model(max_positions=task.prompt_length + 1 + task.completion_length, tokenizer=tok)
    with pytest.raises(ConfigError, match="igpo: task 'sudoku4' has no reasoning traces") as err:
        train_grpo(policy, copy.deepcopy(policy), tok, task, lambda it: task.generate(2, seed=it), config(), 0)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "kw, key",
    [
        ({"sampler": SamplerConfig(name="maskgit")}, "sampler.name"),
        ({"sampler": SamplerConfig(kv_cache="none", remasking="rcr")}, "sampler.remasking"),
        ({"inpaint_ratio_low": 0.7}, "inpaint_ratio_low"),
        ({"min_chunk_size": 9}, "min_chunk_size"),
        ({"max_replacements": 5}, "max_replacements"),
    ],
)
def test_config_refusals_name_the_key(kw, key):
    with pytest.raises(ValueError, match=key):
        config(**kw)


def test_igpo_defaults_are_clip_higher_and_the_papers_ranges():
    cfg = config()
    assert (cfg.epsilon, cfg.epsilon_high, cfg.hint_entropy_top) == (0.2, 0.28, 0.2)
    assert (cfg.inpaint_ratio_low, cfg.inpaint_ratio_high, cfg.min_chunk_size, cfg.max_chunk_size) == (0.2, 0.6, 4, 8)
    assert cfg.max_replacements == 1 and cfg.remasking == "full_completion"

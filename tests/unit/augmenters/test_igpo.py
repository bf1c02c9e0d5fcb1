"""IGPO's rollout augmenter (ddmrl.augmenters.igpo): chunking and injection, and which samples it replaces."""

from __future__ import annotations

import random
import statistics

import pytest
import torch

import ddmrl.augmenters.igpo as igpo
from ddmrl.augmenters import AUGMENTERS
from ddmrl.augmenters.base import AugmentInputs
from ddmrl.config import SamplerConfig, method_config
from ddmrl.errors import ConfigError
from ddmrl.models.tokenizer import build_tokenizer
from ddmrl.rollout import Rollouts, rewards, rollout
from ddmrl.tasks import make_task
from ddmrl.tasks.base import Example, Task

G = 4


# ----------------------------------------------------------------------------------------------- chunks and eta


@pytest.mark.parametrize("length", [0, 3, 4, 11, 50, 301])
def test_chunks_are_consecutive_of_four_to_eight_tokens_and_only_a_short_tail_is_left(length):
    for seed in range(50):
        chunks = igpo.trace_chunks(length, random.Random(seed), 4, 8)
        assert all(4 <= b - a <= 8 for a, b in chunks)
        assert [a for a, _ in chunks] == [0, *(b for _, b in chunks[:-1])][: len(chunks)]  # consecutive from 0
        end = chunks[-1][1] if chunks else 0
        assert 0 <= length - end < 4  # what is left is a tail shorter than the smallest chunk


def test_sizes_cover_four_to_eight_uniformly():
    rng = random.Random(0)
    sizes = [b - a for _ in range(400) for a, b in igpo.trace_chunks(400, rng, 4, 8)[:-1]]  # the last may be cut
    counts = [sizes.count(s) / len(sizes) for s in range(4, 9)]
    assert all(abs(c - 0.2) < 0.02 for c in counts), counts


@pytest.mark.parametrize("eta", [0.0, 0.2, 0.37, 0.6, 1.0])
def test_the_revealed_share_of_chunks_is_eta_rounded_up(eta):
    chunks = [(6 * i, 6 * i + 6) for i in range(23)]
    for seed in range(20):
        shown = igpo.revealed_chunks(chunks, eta, random.Random(seed))
        assert len(shown) == 23 - int(23 * (1 - eta)) and set(shown) <= set(chunks) and len(set(shown)) == len(shown)
        assert 0 <= len(shown) / 23 - eta < 1 / 23 + 1e-12


def test_the_canvas_holds_the_trace_tokens_of_the_shown_chunks_at_their_offset():
    trace = list(range(10, 30))  # 20 tokens
    c = igpo.hint_canvas(26, 3, trace, [(0, 5), (12, 18)], mask_id=0)
    want = [0] * 26
    for k in [*range(0, 5), *range(12, 18)]:
        want[3 + k] = trace[k]
    assert c.tolist() == want
    assert igpo.hint_canvas(10, 3, trace, [(4, 12)], 0).tolist() == [0] * 7 + trace[4:7]  # cut at the end


class LongTrace(Task):
    """A task whose every example has a 300-token trace at completion offset 2 (a fake for statistics)."""

    name, reasoning_traces, prompt_length, completion_length = "long", True, 4, 310

    def sample(self, rng):
        return Example(id=str(rng.random()), prompt="", answer="")

    def trace_tokens(self, tokenizer, example):
        return 2, [5 + k % 7 for k in range(300)]

    def reward(self, completion, example):
        return 0.0

    def score(self, completion, example):
        return {"correct": False}


class FakeTok:
    mask_token_id = 0


def test_injection_ratios_are_uniform_between_low_and_high():
    """Each inpainted sample's hint share of the chunked trace is eta ~ U[0.2, 0.6] (rounded up to whole chunks of
    about 6 of 300 tokens): over 8 groups x 4 samples x 25 batches, mean 0.4 and spread (0.6 - 0.2) / sqrt(12)."""
    task, cfg = LongTrace(), method_config("igpo", {"method": "igpo", "sampler": SamplerConfig(kv_cache="none")})
    shares, canvases = [], []

    def fake_rollout(model, tok, task, examples, g, sampler, gen, clamp):
        canvases.append(clamp)
        n = clamp.shape[0]
        return Rollouts(torch.zeros(n, 1), clamp, torch.ones_like(clamp, dtype=torch.bool), clamp, [""] * n, 0,
                        hints=clamp != 0)  # fmt: skip

    for seed in range(25):
        examples = task.generate(8, seed)
        ids = torch.ones(32, 310, dtype=torch.long)
        batch = Rollouts(torch.zeros(32, 1), ids, ids.bool(), torch.zeros_like(ids), ["x"] * 32, 0)
        x = AugmentInputs(None, FakeTok(), task, examples, batch, torch.zeros(32), G, cfg, None, seed)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(igpo, "rollout", fake_rollout)
            out = igpo.augment(x)
        assert out.stats["augment/groups"] == 8 and out.stats["augment/replaced"] == 0
    for clamp in canvases:
        assert bool((clamp[:, :2] == 0).all()) and bool((clamp[:, 302:] == 0).all())  # only the trace's positions
        trace = torch.tensor([5 + k % 7 for k in range(300)])
        hinted = clamp[:, 2:302] != 0
        assert torch.equal(clamp[:, 2:302][hinted], trace.expand(len(clamp), -1)[hinted])
        shares += (hinted.sum(1) / 300).tolist()
    assert len(shares) == 25 * 8 * G
    assert 0.2 - 0.05 < min(shares) and max(shares) < 0.6 + 0.07  # token shares: chunks differ in size
    assert statistics.mean(shares) == pytest.approx(0.4, abs=0.015)  # (rounded up to whole chunks, less the tail)
    assert statistics.stdev(shares) == pytest.approx(0.4 / 12**0.5, rel=0.1)


# ----------------------------------------------------------------------------------------------- replacements


@pytest.fixture
def chain_setup(make_model):
    task = make_task("chain")
    tok = build_tokenizer(task.alphabet, task.special_tokens)
    model = make_model(max_positions=task.prompt_length + 1 + task.completion_length, tokenizer=tok, hidden=16)
    return task, tok, model


def test_only_all_wrong_groups_are_augmented_with_at_most_max_replacements_verified_correct_samples(
    chain_setup, monkeypatch
):
    """Three groups of the chain task on a random tiny model; verdicts under the test's control: group 0 has one
    right sample, groups 1 and 2 none. Of the inpainted samples, every one of group 1 is declared right, none of
    group 2. Group 1 gets exactly max_replacements = 2 of its inpainted samples (distinct, right, with their hint
    masks: the trace tokens at the trace's positions); every other row is bit-identical."""
    task, tok, model = chain_setup
    sampler = SamplerConfig(block_length=8, steps=12, temperature=1.0, kv_cache="none")
    cfg = method_config("igpo", {"method": "igpo", "sampler": sampler, "num_generations": G, "max_replacements": 2})
    examples = task.generate(3, seed=5)
    batch = rollout(model, tok, task, examples, G, sampler, torch.Generator().manual_seed(0))
    r = rewards(task, examples, batch, G)
    right = {(examples[0].id, batch.texts[1])}
    monkeypatch.setattr(task, "score", lambda text, ex: {"correct": (ex.id, text) in right})
    captured = []

    def spy(*args, **kw):
        out = rollout(*args, **kw)
        assert [ex.id for ex in args[3]] == [examples[1].id, examples[2].id]  # the all-wrong groups only
        right.update((examples[1].id, t) for t in out.texts[:G])
        captured.append(out)
        return out

    monkeypatch.setattr(igpo, "rollout", spy)
    x = AugmentInputs(model, tok, task, examples, batch, r, G, cfg, torch.Generator().manual_seed(1), 7)
    out = AUGMENTERS["igpo"].augment(x)
    inp = captured[0]
    assert out.stats == {"augment/all_wrong_groups": 2.0, "augment/groups": 2.0, "augment/inpainted_correct": 4.0,
                         "augment/replaced": 2.0}  # fmt: skip
    replaced = [4, 5]
    for row in range(3 * G):
        if row in replaced:
            continue
        assert torch.equal(out.batch.completion_ids[row], batch.completion_ids[row])
        assert torch.equal(out.batch.reveal_step[row], batch.reveal_step[row])
        assert out.batch.texts[row] == batch.texts[row] and out.rewards[row] == r[row]
        assert not bool(out.batch.hints[row].any())
    sources = []
    for row in replaced:
        src = next(j for j in range(G) if torch.equal(inp.completion_ids[j], out.batch.completion_ids[row]))
        sources.append(src)
        assert torch.equal(out.batch.hints[row], inp.hints[src]) and bool(inp.hints[src].any())
        assert out.batch.texts[row] == inp.texts[src]
        assert out.rewards[row] == task.reward(inp.texts[src], examples[1])
        offset, ids = task.trace_tokens(tok, examples[1])
        hinted = out.batch.hints[row].nonzero().flatten().tolist()
        assert all(out.batch.completion_ids[row, k].item() == ids[k - offset] for k in hinted)
    assert len(set(sources)) == 2 and len(set(out.batch.texts[4:6])) >= 1


def test_nothing_is_sampled_when_no_group_is_all_wrong(chain_setup, monkeypatch):
    task, tok, model = chain_setup
    cfg = method_config("igpo", {"method": "igpo", "sampler": SamplerConfig(kv_cache="none")})
    examples = task.generate(2, seed=5)
    batch = rollout(model, tok, task, examples, G, cfg.sampler, torch.Generator().manual_seed(0))
    monkeypatch.setattr(task, "score", lambda text, ex: {"correct": text == batch.texts[0] or ex is examples[1]})
    monkeypatch.setattr(igpo, "rollout", lambda *a, **k: pytest.fail("sampled although no group is all wrong"))
    r = torch.arange(2.0 * G)
    out = igpo.augment(AugmentInputs(model, tok, task, examples, batch, r, G, cfg, None, 0))
    assert out.stats["augment/groups"] == 0 and out.rewards is r
    assert torch.equal(out.batch.completion_ids, batch.completion_ids) and not bool(out.batch.hints.any())


def test_a_task_without_traces_is_refused_naming_it():
    with pytest.raises(ConfigError, match="igpo: task 'sudoku4' has no reasoning traces") as err:
        AUGMENTERS["igpo"].check(make_task("sudoku4"))
    assert "\n" not in str(err.value)
    AUGMENTERS["igpo"].check(make_task("chain"))

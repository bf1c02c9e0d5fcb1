"""ddmrl.samplers.dream against Dream's own ``diffusion_generate`` (shared/reference/dream's ``generation_utils.py``,
unmodified) on tiny random instances of the real ``DreamModel``: token for token, every ``alg``, greedy and sampled
(the same seed gives ddmrl's generator the draws Dream takes from the global one), and left-padded batches."""

from __future__ import annotations

import sys

import pytest
import torch
from real_dream import BOS, EOS, MASK, dream_checkpoint, needs_dream, sharpen, tokenizer

from ddmrl.models.dream import Aligned
from ddmrl.samplers import SAMPLERS
from ddmrl.samplers.dream import ALGS, generate

pytestmark = needs_dream

P, L, STEPS = 7, 10, 5
SETTINGS = {
    "greedy": dict(temperature=0.0),
    "greedy_top_p_top_k": dict(temperature=0.0, top_p=0.5, top_k=4),
    "sampled_top_p": dict(temperature=0.8, top_p=0.9),
    "sampled_top_k_alg_temp": dict(temperature=1.0, top_k=5, alg_temp=0.5),
}


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    m = dream_checkpoint(tmp_path_factory.mktemp("hub") / "dream-v0-instruct-7b", tokenizer(), seed=0)
    sharpen(m)  # peaked distributions: top-p, top-k and the confidence rules act on distinct values
    return m


def config(model, alg: str, steps: int = STEPS, **kw):
    """Dream's own ``DreamGenerationConfig`` (from the model's module) for ``L`` new tokens."""
    cls = sys.modules[type(model).__module__].DreamGenerationConfig
    ids = dict(mask_token_id=MASK, pad_token_id=EOS, eos_token_id=EOS, bos_token_id=BOS)
    return cls(max_new_tokens=L, steps=steps, alg=alg, **ids, **kw)


def prompts(n: int, length: int = P, seed: int = 1) -> torch.Tensor:
    return torch.randint(5, 100, (n, length), generator=torch.Generator().manual_seed(seed))


def reference(model, x: torch.Tensor, alg: str, seed: int, **kw) -> torch.Tensor:
    torch.manual_seed(seed)  # Dream draws from the global generator
    return model.diffusion_generate(x, generation_config=config(model, alg, **kw))[:, x.shape[1] :]


def ours(model, x: torch.Tensor, alg: str, seed: int, attention_mask=None, **kw) -> torch.Tensor:
    gen, steps = torch.Generator().manual_seed(seed), kw.pop("steps", STEPS)
    aligned = Aligned(model, EOS)  # as ddmrl loads Dream: logits aligned, leading pads found from the ids
    out = generate(
        aligned, x, L, mask_id=MASK, steps=steps, alg=alg, generator=gen, attention_mask=attention_mask, **kw
    )
    assert out.nfe == steps
    return out.completion_ids


@pytest.mark.parametrize("setting", SETTINGS)
@pytest.mark.parametrize("alg", ALGS)
def test_equals_dream_diffusion_generate_token_for_token(model, alg, setting):
    """Three prompts in a batch and one alone, two seeds: every completion token equals Dream's."""
    for x, seed in ((prompts(3), 3), (prompts(1, seed=5), 11)):
        want = reference(model, x, alg, seed, **SETTINGS[setting])
        got = ours(model, x, alg, seed, **SETTINGS[setting])
        assert torch.equal(got, want), f"{alg} {setting}: {got.tolist()} != {want.tolist()}"


@pytest.mark.parametrize("alg", ALGS)
def test_one_step_and_many_steps(model, alg):
    """steps = 1 (all at once) and steps = L (one token a step for the top-k rules)."""
    x = prompts(2, seed=7)
    for steps in (1, L):
        want = reference(model, x, alg, 0, steps=steps)
        got = ours(model, x, alg, 0, steps=steps)
        assert torch.equal(got, want)


def left_padded(model) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    """A batch of prompts of lengths 7, 4 and 5, left-padded with EOS; its mask; the unpadded prompts."""
    rows = [prompts(1, n, seed=20 + n)[0] for n in (7, 4, 5)]
    x = torch.full((3, 7), EOS)
    mask = torch.zeros(3, 7, dtype=torch.long)
    for i, r in enumerate(rows):
        x[i, 7 - len(r) :], mask[i, 7 - len(r) :] = r, 1
    return x, mask, rows


class IntendedForward:
    """Dream's ``_sample`` calls ``self(x, attention_mask, tok_idx)`` meaning (input_ids, attention_mask,
    position_ids), as Dream-org's code; the dLLM-RL copy reads the third argument as ``is_causal`` and adds its boolean
    mask to the scores. This drives Dream's loop with the intended forward (its mask as an additive one)."""

    def __init__(self, model):
        self.model, self.device = model, model.device

    def __call__(self, x, attention_mask, tok_idx):
        if not isinstance(attention_mask, torch.Tensor):  # "full": no padding
            return self.model(x)
        bias = torch.zeros(attention_mask.shape).masked_fill(~attention_mask, torch.finfo(torch.float32).min)
        return self.model(x, attention_mask=bias, position_ids=tok_idx)


@pytest.mark.parametrize("setting", ["greedy", "sampled_top_p"])
@pytest.mark.parametrize("alg", ALGS)
def test_left_padded_batch_equals_dreams_loop(model, alg, setting):
    x, mask, _ = left_padded(model)
    gc = config(model, alg, **SETTINGS[setting])
    gc.max_length = x.shape[1] + L
    sample = type(model).__mro__[1]._sample  # DreamGenerationMixin._sample, Dream's own loop
    torch.manual_seed(4)
    keep = lambda step, x, logits: x  # noqa: E731 Dream's default hooks
    want = sample(IntendedForward(model), x, mask, gc, keep, lambda step, x, logits: logits)[:, x.shape[1] :]
    assert torch.equal(ours(model, x, alg, 4, attention_mask=mask, **SETTINGS[setting]), want)


@pytest.mark.parametrize("alg", ["maskgit_plus", "topk_margin", "entropy"])
def test_left_padded_rows_equal_each_row_alone(model, alg):
    """Greedy and deterministic: a padded row's completion is the one Dream's ``diffusion_generate`` gives its
    prompt alone (every row has the same number of masks, so the batch's mean count is each row's)."""
    x, mask, rows = left_padded(model)
    got = ours(model, x, alg, 0, attention_mask=mask)
    for i, r in enumerate(rows):
        assert torch.equal(got[i], reference(model, r[None], alg, 0)[0]), f"row {i}"
    # as in a rollout, no mask given: the model finds the leading pads (EOS) itself
    assert torch.equal(ours(model, x, alg, 0), got)


def test_dreams_vendored_code_cannot_take_its_own_padding_mask(model):
    """Why the padded case is checked as above: ``diffusion_generate`` with a padding mask fails in this copy."""
    x, mask, _ = left_padded(model)
    with pytest.raises(RuntimeError, match="ambiguous"):
        model.diffusion_generate(x, attention_mask=mask, generation_config=config(model, "maskgit_plus"))


def test_reveal_steps_registry_and_refusals(model):
    x = prompts(2)
    out = SAMPLERS["dream"](Aligned(model, EOS), x, L, mask_id=MASK, steps=STEPS, alg="maskgit_plus")
    assert out.completion_ids.shape == (2, L) and out.nfe == STEPS
    counts = torch.stack([(out.reveal_step == s).sum(1) for s in range(STEPS)], 1)  # [2, STEPS]
    t, left, want = torch.linspace(1, 1e-3, STEPS + 1), L, []
    for i in range(STEPS):  # k = int(m (1 - t_{i+1} / t_i)), every remaining mask at the last step
        want.append(left if i == STEPS - 1 else int(torch.tensor(float(left)) * (1 - t[i + 1] / t[i])))
        left -= want[-1]
    assert counts.tolist() == [want, want] and want[0] == 1
    assert not (out.completion_ids == MASK).any()
    with pytest.raises(ValueError, match="origin, maskgit_plus, topk_margin, entropy"):
        generate(Aligned(model, EOS), x, L, mask_id=MASK, steps=2, alg="low_confidence")

"""The LLaDA sampler (ddmrl.samplers.llada) against the released samplers it follows, token for token, on tiny
random instances of the real LLaDA class (``tests/real_models.py``):

* LLaDA's ``generate`` (ML-GSAI/LLaDA ``generate.py``; at b7e6c35 with ``logits_eos_inf`` and
  ``confidence_eos_eot_inf``, the softmax in the logits' dtype; before f51cb17, June 2025, in float64);
* d1's ``generate`` (dllm-reasoning/d1 ``eval/generate.py``: ``max(1, steps // blocks)`` steps per block, the
  softmax in the logits' dtype);
* Fast-dLLM's ``generate``, ``generate_with_prefix_cache`` and ``generate_with_dual_cache`` with their threshold and
  factor rules (NVlabs/Fast-dLLM ``llada/generate.py`` at f6b35ec, ``get_transfer_index`` and
  ``get_transfer_index_dynamic``: the softmax in float64);
* MDPO's ``diffusion_generate`` with ``rcr=True`` over several blocks (autonomousvision/mdpo
  ``src/mdlm_generation_utils.py``, conf_alg llada, temperature 0: the softmax in the logits' dtype).

The transcriptions below keep the released control flow (``torch.topk`` per row, the released loops) and take the
token ids as arguments where the release hard-codes LLaDA-8B's (mask 126336, EOS 126081, EOT 126348). They do not
leave the mask token out of the proposals, as ddmrl does: the test model gives it a logit far below every other
(probability < 1e-60, as a released checkpoint never predicts it), so that choice changes nothing here.

The model is confident: its logits are scaled until a float32 softmax rounds most top probabilities to exactly 1
while float64 separates them. There float32 ranks by tie order and float64 by the true value (the issue behind
``confidence_dtype``); the references taken in the logits' dtype are compared on a less confident instance.
Fast-dLLM's caches need its modified model (``past_key_values``, ``replace_position``); :class:`FastDllmModel` gives
the real LLaDA class that interface through ddmrl's cached forward (``ddmrl.models.llada_cache``, tested against the
model's own forward in test_cache.py), so what is compared here is the samplers' control flow and arithmetic.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from real_models import llada_checkpoint, needs_reference, tokenizer

from ddmrl.models.llada_cache import forward_window
from ddmrl.samplers.llada import generate

pytestmark = needs_reference

MASK, P, L, ROWS = 0, 6, 16, 3
TOK = tokenizer()
EOS, EOT = TOK.eos_token_id, TOK.convert_tokens_to_ids("<|eot_id|>")


def confident_llada(tmp_path, scale: float, seed: int = 0):
    """The real ``LLaDAModelLM`` (2 layers), its output layer scaled by ``scale``; hidden dimension 0 is a large
    constant of every embedding (``real_models.favour``'s device) which only the mask token's row reads, with
    weight -50."""
    model = llada_checkpoint(tmp_path / f"llada-{scale}-{seed}", TOK, seed=seed)
    t = model.model.transformer
    with torch.no_grad():
        t.wte.weight[:, 0] = 4.0
        t.ff_out.weight.mul_(scale)
        t.ff_out.weight[:, 0] = 0.0
        t.ff_out.weight[MASK] = 0.0
        t.ff_out.weight[MASK, 0] = -50.0
    return model


@pytest.fixture(scope="module")
def sharp(tmp_path_factory):
    """Top probabilities of 0.6 to within 1e-8 of 1: float32 rounds a fifth of them to 1, float64 none."""
    return confident_llada(tmp_path_factory.mktemp("hub"), 450.0)


@pytest.fixture(scope="module")
def mild(tmp_path_factory):
    """Top probabilities of 0.3-0.99: no ties in float32 (the references whose softmax is float32)."""
    return confident_llada(tmp_path_factory.mktemp("hub"), 10.0)


def prompts(seed: int = 0) -> torch.Tensor:
    return torch.randint(12, len(TOK), (ROWS, P), generator=torch.Generator().manual_seed(seed))


def ours(model, prompt, block: int, steps: int, **kw) -> torch.Tensor:
    return generate(model, prompt, L, mask_id=MASK, block_length=block, steps=steps, **kw).completion_ids


# --------------------------------------------------------------------------- LLaDA's and d1's generate, transcribed


def add_gumbel_noise(logits, temperature):
    if temperature == 0:
        return logits
    logits = logits.to(torch.float64)
    noise = torch.rand_like(logits, dtype=torch.float64)
    return logits.exp() / (-torch.log(noise)) ** temperature


def get_num_transfer_tokens(mask_index, steps):
    mask_num = mask_index.sum(dim=1, keepdim=True)
    base, remainder = mask_num // steps, mask_num % steps
    num_transfer_tokens = torch.zeros(mask_num.size(0), steps, dtype=torch.int64) + base
    for i in range(mask_num.size(0)):
        num_transfer_tokens[i, : remainder[i]] += 1
    return num_transfer_tokens


@torch.no_grad()
def llada_generate(
    model, prompt, steps, gen_length, block_length, temperature=0.0, softmax_dtype=None, d1_steps=False,
    logits_eos_inf=False, confidence_eos_eot_inf=False,
):  # fmt: skip
    """LLaDA's ``generate`` (b7e6c35; no CFG, no attention mask). ``softmax_dtype`` float64: the version before
    f51cb17. ``d1_steps``: d1's ``eval/generate.py`` (``max(1, steps // num_blocks)``, no divisibility assert)."""
    x = torch.full((prompt.shape[0], prompt.shape[1] + gen_length), MASK, dtype=torch.long)
    x[:, : prompt.shape[1]] = prompt.clone()
    assert gen_length % block_length == 0
    num_blocks = gen_length // block_length
    if d1_steps:
        steps = max(1, steps // num_blocks)
    else:
        assert steps % num_blocks == 0
        steps = steps // num_blocks
    for num_block in range(num_blocks):
        lo = prompt.shape[1] + num_block * block_length
        num_transfer_tokens = get_num_transfer_tokens(x[:, lo : lo + block_length] == MASK, steps)
        for i in range(steps):
            mask_index = x == MASK
            logits = model(x).logits
            if logits_eos_inf:
                logits[:, :, EOS] = -torch.inf
            logits_with_noise = add_gumbel_noise(logits, temperature=temperature)
            x0 = torch.argmax(logits_with_noise, dim=-1)
            if confidence_eos_eot_inf:
                logits_with_noise[:, :, EOS] = logits[:, :, EOT] = -torch.inf
            p = F.softmax(logits if softmax_dtype is None else logits.to(softmax_dtype), dim=-1)
            x0_p = torch.squeeze(torch.gather(p, dim=-1, index=torch.unsqueeze(x0, -1)), -1)
            x0_p[:, lo + block_length :] = -np.inf
            x0 = torch.where(mask_index, x0, x)
            confidence = torch.where(mask_index, x0_p, -np.inf)
            transfer_index = torch.zeros_like(x0, dtype=torch.bool)
            for j in range(confidence.shape[0]):
                _, select_index = torch.topk(confidence[j], k=num_transfer_tokens[j, i])
                transfer_index[j, select_index] = True
            x[transfer_index] = x0[transfer_index]
    return x[:, prompt.shape[1] :]


# --------------------------------------------------------------------------- Fast-dLLM, transcribed


class FastDllmModel:
    """Fast-dLLM's modified LLaDA interface on the real class: ``model(x)`` the model's forward;
    ``model(x, use_cache=True)`` also every layer's keys and values; with ``past_key_values`` the window ``x`` right
    after the cached prefix, or (``replace_position``) in place of the marked positions of a full cache."""

    def __init__(self, model) -> None:
        self.model = model

    def __call__(self, x, past_key_values=None, use_cache=False, replace_position=None):
        if past_key_values is None and not use_cache:
            return self.model(x)
        if past_key_values is None:
            logits, past = forward_window(self.model, x, None, 0)
        elif replace_position is None:  # prefix: the cache holds the positions before the window
            start = past_key_values[0][0].shape[2]
            pad = [tuple(torch.cat([t, t.new_zeros(*t.shape[:2], x.shape[1], t.shape[3])], 2) for t in kv)
                   for kv in past_key_values]  # fmt: skip
            logits, past = forward_window(self.model, x, tuple(pad), start)
        else:
            start = int(replace_position[0].nonzero()[0])
            logits, past = forward_window(self.model, x, past_key_values, start)
        return type("Out", (), {"logits": logits, "past_key_values": past})()


def get_transfer_index(logits, temperature, mask_index, x, num_transfer_tokens, threshold=None):
    x0 = torch.argmax(add_gumbel_noise(logits, temperature=temperature), dim=-1)
    p = F.softmax(logits.to(torch.float64), dim=-1)
    x0_p = torch.squeeze(torch.gather(p, dim=-1, index=torch.unsqueeze(x0, -1)), -1)
    x0 = torch.where(mask_index, x0, x)
    confidence = torch.where(mask_index, x0_p, -np.inf)
    transfer_index = torch.zeros_like(x0, dtype=torch.bool)
    if threshold is not None:
        num_transfer_tokens = mask_index.sum(dim=1, keepdim=True)
    for j in range(confidence.shape[0]):
        _, select_index = torch.topk(confidence[j], k=num_transfer_tokens[j])
        transfer_index[j, select_index] = True
        if threshold is not None:
            for k in range(1, num_transfer_tokens[j]):
                if confidence[j, select_index[k]] < threshold:
                    transfer_index[j, select_index[k]] = False
    return x0, transfer_index


def get_transfer_index_dynamic(logits, temperature, mask_index, x, num_transfer_tokens, factor=1):
    x0 = torch.argmax(add_gumbel_noise(logits, temperature=temperature), dim=-1)
    p = F.softmax(logits.to(torch.float64), dim=-1)
    x0_p = torch.squeeze(torch.gather(p, dim=-1, index=torch.unsqueeze(x0, -1)), -1)
    x0 = torch.where(mask_index, x0, x)
    confidence = torch.where(mask_index, x0_p, -np.inf)
    transfer_index = torch.zeros_like(x0, dtype=torch.bool)
    num_transfer_tokens = mask_index.sum(dim=1, keepdim=True)
    for j in range(confidence.shape[0]):
        ns = list(range(1, num_transfer_tokens[j] + 1))
        threshs = [1 - factor / (n + 1) for n in ns]
        threshs[0] = -1  # always transfer at least one token
        sorted_conf = torch.sort(confidence[j][mask_index[j]], dim=-1, descending=True)[0]
        assert len(sorted_conf) == len(threshs)
        for top_i in range(len(threshs)):
            if sorted_conf[top_i] < threshs[top_i]:
                break
        if top_i == 0 or top_i == len(threshs) - 1:
            top_i += 1
        _, select_index = torch.topk(confidence[j], k=top_i)
        transfer_index[j, select_index] = True
    return x0, transfer_index


def _transfer(logits, mask_index, x, counts, i, threshold, factor):
    if factor is None:
        return get_transfer_index(logits, 0.0, mask_index, x, counts[:, i] if threshold is None else None, threshold)
    return get_transfer_index_dynamic(logits, 0.0, mask_index, x, None, factor)


@torch.no_grad()
def fast_dllm_generate(model, prompt, steps, gen_length, block_length, cache="none", threshold=None, factor=None):
    """Fast-dLLM's ``generate`` (cache none), ``generate_with_prefix_cache`` (prefix) and ``generate_with_dual_cache``
    (dual) at temperature 0, remasking low_confidence, on a :class:`FastDllmModel`."""
    x = torch.full((prompt.shape[0], prompt.shape[1] + gen_length), MASK, dtype=torch.long)
    x[:, : prompt.shape[1]] = prompt.clone()
    assert gen_length % block_length == 0
    num_blocks = gen_length // block_length
    assert steps % num_blocks == 0
    steps_per_block = steps // num_blocks
    for num_block in range(num_blocks):
        start = prompt.shape[1] + num_block * block_length
        end = start + block_length
        counts = get_num_transfer_tokens(x[:, start:end] == MASK, steps_per_block)
        if cache == "none":
            i = 0
            while True:
                mask_index = x == MASK
                logits = model(x).logits
                mask_index[:, end:] = 0
                x0, transfer_index = _transfer(logits, mask_index, x, counts, i, threshold, factor)
                x[transfer_index] = x0[transfer_index]
                i += 1
                if (x[:, start:end] == MASK).sum() == 0:
                    break
            continue
        output = model(x, use_cache=True)
        past_key_values = output.past_key_values
        mask_index = x == MASK
        mask_index[:, end:] = 0
        x0, transfer_index = _transfer(output.logits, mask_index, x, counts, 0, threshold, factor)
        x[transfer_index] = x0[transfer_index]
        if cache == "prefix":
            past_key_values = [tuple(t[:, :, :start] for t in kv) for kv in past_key_values]
        replace_position = torch.zeros_like(x, dtype=torch.bool)
        replace_position[:, start:end] = 1
        i = 1
        while True:
            if (x[:, start:end] == MASK).sum() == 0:
                break
            if cache == "prefix":
                mask_index = x[:, start:] == MASK
                mask_index[:, block_length:] = 0
                logits = model(x[:, start:], past_key_values=past_key_values, use_cache=True).logits
                x0, transfer_index = _transfer(logits, mask_index, x[:, start:], counts, i, threshold, factor)
                x[:, start:][transfer_index] = x0[transfer_index]
            else:
                mask_index = x[:, start:end] == MASK
                logits = model(
                    x[:, start:end], past_key_values=past_key_values, use_cache=True, replace_position=replace_position
                ).logits
                x0, transfer_index = _transfer(logits, mask_index, x[:, start:end], counts, i, threshold, factor)
                x[:, start:end][transfer_index] = x0[transfer_index]
            i += 1
    return x[:, prompt.shape[1] :]


# --------------------------------------------------------------------------- MDPO's RCR, transcribed


@torch.no_grad()
def mdpo_rcr(model, prompt, steps, gen_length, block_length):
    """MDPO's ``diffusion_generate`` with ``rcr=True``, conf_alg llada, temperature 0, mode linear (whose counts are
    LLaDA's for the block sizes used here), top_p and top_k None; one row."""
    x = torch.full((1, prompt.shape[1] + gen_length), MASK, dtype=torch.long)
    x[:, : prompt.shape[1]] = prompt.clone()
    num_blocks = gen_length // block_length
    steps_per_block = max(1, steps // num_blocks)
    overtime_confidence = torch.zeros_like(x, dtype=torch.float32)
    for num_block in range(num_blocks):
        end_idx = prompt.shape[1] + (num_block + 1) * block_length
        counts = get_num_transfer_tokens(x[:, end_idx - block_length : end_idx] == MASK, steps_per_block)
        for i in range(steps_per_block):
            mask_index = x == MASK
            logits = model(x).logits
            p = F.softmax(logits, dim=-1)
            confidence, x0 = p.max(dim=-1)
            confidence[:, end_idx:] = -np.inf
            x0 = torch.where(mask_index, x0, x)
            confidence = torch.where(mask_index, confidence, torch.tensor(-np.inf))
            for j in range(confidence.shape[0]):
                _, select_indices = torch.topk(confidence[j], k=counts[j, i:].sum().item())
                x[j, select_indices] = x0[j, select_indices]
                overtime_confidence[j, select_indices] = confidence[j, select_indices].clone()
                if i != (steps_per_block - 1):
                    overtime_conf_wo_zeros = torch.where(overtime_confidence == 0.0, 1.0, overtime_confidence)[j]
                    num_tokens_to_mask = counts[j, i + 1 :].sum().item()
                    _, mask_select_indices = torch.topk(overtime_conf_wo_zeros, k=num_tokens_to_mask, largest=False)
                    if len(mask_select_indices) == 0:
                        break
                    x[j, mask_select_indices] = MASK
    return x[:, prompt.shape[1] :]


# --------------------------------------------------------------------------- the comparisons

#: (block_length, steps) over L = 16: every block size with steps from one token per step to one step per block
LLADA_CONFIGS = [(16, 16), (16, 8), (16, 1), (8, 16), (8, 4), (8, 2), (4, 16), (4, 8), (4, 4)]


def test_the_test_model_ties_in_float32_and_not_in_float64(sharp):
    """The premise of the float64 default: on this model some first-step top probabilities are exactly 1 in float32,
    none in float64."""
    p = torch.randint(12, len(TOK), (8, P), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits = sharp(torch.cat([p, torch.full((8, L), MASK)], 1)).logits[:, P:]
    top32 = torch.softmax(logits.float(), -1).amax(-1)
    top64 = torch.softmax(logits.double(), -1).amax(-1)
    assert int((top32 == 1).sum()) > 0 and int((top64 == 1).sum()) == 0


@pytest.mark.parametrize(("block", "steps"), LLADA_CONFIGS)
def test_float64_confidence_is_llada_generate_before_june_2025_and_fast_dllm(sharp, block, steps):
    """Defaults (confidence_dtype float64) = LLaDA's generate with its float64 softmax = Fast-dLLM's generate without
    a rule, on the confident model; float32 (ddmrl's confidence before) does not reproduce it there."""
    p = prompts()
    want = llada_generate(sharp, p, steps, L, block, softmax_dtype=torch.float64)
    assert torch.equal(ours(sharp, p, block, steps), want)
    assert torch.equal(fast_dllm_generate(FastDllmModel(sharp), p, steps, L, block), want)


def test_float32_confidence_differs_on_the_confident_model(sharp):
    """With the ranking left to tie order (float32), some of 8 rows leave the reference (here 2 of 24 over three
    configurations; float64: none)."""
    p = torch.randint(12, len(TOK), (8, P), generator=torch.Generator().manual_seed(1))
    differ = []
    for block, steps in ((16, 16), (8, 4), (4, 4)):
        want = llada_generate(sharp, p, steps, L, block, softmax_dtype=torch.float64)
        differ.append(not torch.equal(ours(sharp, p, block, steps, confidence_dtype="float32"), want))
        assert torch.equal(ours(sharp, p, block, steps), want)
    assert any(differ)


@pytest.mark.parametrize(("block", "steps"), [*LLADA_CONFIGS, (8, 3), (4, 6)])
def test_float32_confidence_is_d1_and_current_llada_generate(mild, block, steps):
    """confidence_dtype float32 = d1's eval/generate.py (also with steps that do not divide into the blocks) and
    LLaDA's current generate (softmax in the logits' dtype, float32 here)."""
    p = prompts()
    got = ours(mild, p, block, steps, confidence_dtype="float32")
    assert torch.equal(got, llada_generate(mild, p, steps, L, block, d1_steps=True))
    if steps % (L // block) == 0:
        assert torch.equal(got, llada_generate(mild, p, steps, L, block))


TIES_AT_ZERO = pytest.mark.xfail(
    reason="confidence_eos_eot_inf alone at temperature 0: the release scores every EOS and EOT proposal exactly 0, "
    "and the order among those ties is torch.topk's (unspecified), not ddmrl's argsort",
    strict=False,
)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize(
    ("logits_eos_inf", "confidence_eos_eot_inf"),
    [(True, False), pytest.param(False, True, marks=TIES_AT_ZERO), (True, True)],
)
def test_llada_eos_switches_are_its_released_options(tmp_path, temperature, logits_eos_inf, confidence_eos_eot_inf):
    """LLaDA's logits_eos_inf and confidence_eos_eot_inf (current generate, float32 softmax) on a model that favours
    EOS and EOT. At temperature 1 the Gumbel noise is the same numbers: the reference draws it from the global RNG,
    ddmrl from its generator, both seeded alike. Each setting changes the samples or their order."""
    from real_models import favour

    model = confident_llada(tmp_path, 3.0)
    favour(model, [EOS], strength=0.6)
    favour(model, [EOT], strength=0.65)
    p, kw = prompts(), {"logits_eos_inf": logits_eos_inf, "confidence_eos_eot_inf": confidence_eos_eot_inf}
    changed = []
    for block, steps in ((16, 16), (4, 8)):
        torch.manual_seed(3)
        want = llada_generate(model, p, steps, L, block, temperature=temperature, **kw)
        got, plain = (
            generate(
                model, p, L, mask_id=MASK, block_length=block, steps=steps, temperature=temperature,
                confidence_dtype="float32", eos_id=EOS, eot_id=EOT, generator=torch.Generator().manual_seed(3), **k,
            )
            for k in (kw, {})
        )  # fmt: skip
        assert torch.equal(got.completion_ids, want)
        changed.append(not torch.equal(got.completion_ids, plain.completion_ids)
                       or not torch.equal(got.reveal_step, plain.reveal_step))  # fmt: skip
        if logits_eos_inf:
            assert not bool((got.completion_ids == EOS).any())
    assert any(changed), "the switch changes the samples or their order"


#: Fast-dLLM's configurations: steps = L (one token per step) and its evaluations' steps = L / block_length
FAST_CONFIGS = [(16, 16), (16, 1), (8, 16), (8, 2), (4, 16), (4, 4)]


@pytest.mark.parametrize("cache", ["none", "prefix", "dual"])
@pytest.mark.parametrize(("block", "steps"), FAST_CONFIGS)
def test_threshold_with_parallel_floor_one_is_fast_dllm(sharp, cache, block, steps):
    """parallel threshold, parallel_floor one = Fast-dLLM's generate / generate_with_prefix_cache /
    generate_with_dual_cache with a threshold (the confident model; thresholds that split its confidences)."""
    p, kv = prompts(), {"none": "none", "prefix": "prefix", "dual": "dual"}[cache]
    for threshold in (0.9, 0.99999):
        want = fast_dllm_generate(FastDllmModel(sharp), p, steps, L, block, cache, threshold=threshold)
        got = ours(
            sharp, p, block, steps, kv_cache=kv, parallel="threshold", threshold=threshold, parallel_floor="one"
        )
        assert torch.equal(got, want)


@pytest.mark.parametrize("cache", ["none", "prefix", "dual"])
@pytest.mark.parametrize(("block", "steps"), FAST_CONFIGS)
def test_factor_with_the_release_rule_and_floor_one_is_fast_dllm(mild, cache, block, steps):
    """parallel factor, factor_rule fast_dllm_release, parallel_floor one = Fast-dLLM's factor decoding (one row at a
    time: the release fails on a batch whose rows finish a block at different steps)."""
    for factor in (0.5, 1.0, 2.0):
        for row in prompts().split(1):
            want = fast_dllm_generate(FastDllmModel(mild), row, steps, L, block, cache, factor=factor)
            got = ours(
                mild, row, block, steps, kv_cache=cache, parallel="factor", factor=factor, parallel_floor="one",
                factor_rule="fast_dllm_release",
            )  # fmt: skip
            assert torch.equal(got, want), (factor, row)


@pytest.mark.parametrize(("block", "steps"), [(16, 16), (16, 8), (8, 8), (4, 8), (4, 16)])
def test_rcr_is_mdpo_over_several_blocks(mild, block, steps):
    """remasking rcr (rcr_scope sequence, the default) with MDPO's float32 softmax = MDPO's diffusion_generate with
    rcr=True, also with several blocks, where earlier blocks' tokens are re-masked; rcr_scope block (ddmrl's rule
    before) agrees with one block only."""
    for row in prompts().split(1):
        want = mdpo_rcr(mild, row, steps, L, block)
        got = ours(mild, row, block, steps, remasking="rcr", confidence_dtype="float32")
        assert torch.equal(got, want)
        local = ours(mild, row, block, steps, remasking="rcr", rcr_scope="block", confidence_dtype="float32")
        if block == L:
            assert torch.equal(local, want)

"""MMaDA's text-to-image layout around a model (ddmrl.models.layout), with the geneval-mini task's tokens."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from float_error import sums_to_one

from ddmrl.likelihood import token_logps
from ddmrl.models.layout import EXCLUDED_LOGIT, ImageLayout, MMaDALayout, for_task, unwrap
from ddmrl.models.mmada import T2ILayout
from ddmrl.models.tokenizer import build_tokenizer
from ddmrl.samplers import SAMPLERS
from ddmrl.tasks import make_task
from ddmrl.tasks.encoding import drop_prompts, encode_examples, encode_prompts, prompt_length


@pytest.fixture(scope="module")
def task():
    return make_task("geneval_mini")


@pytest.fixture(scope="module")
def itok(task):
    return build_tokenizer([task.alphabet], task.special_tokens)


@pytest.fixture
def layout(task, itok, make_model):
    model = make_model(max_positions=prompt_length(task) + task.completion_length + 1, tokenizer=itok)
    return for_task(model, itok, task)


def codes(task, itok) -> list[int]:
    return itok.convert_tokens_to_ids(list(task.image_tokens))


def test_text_tasks_are_left_alone(task, itok, make_model):
    model = make_model(max_positions=8, tokenizer=itok)
    assert for_task(model, itok, make_task("sudoku4")) is model and unwrap(model) is model


def test_sequence_is_prompt_soi_image_eoi(task, itok, make_model):
    """[PAD.., BOS, caption, <soi>] | 64 image codes, and the wrapper adds <eoi> as the last position."""
    batch = encode_examples(itok, task, task.generate(3, seed=0))
    soi, eoi = itok.convert_tokens_to_ids(["<soi>", "<eoi>"])
    assert (batch.prompt_ids[:, -1] == soi).all()
    assert batch.completion_ids.shape == (3, task.completion_length)
    assert set(batch.completion_ids.unique().tolist()) <= set(codes(task, itok))
    assert batch.completion_mask.all()  # no EOS in an image: every image token counts
    seen = []
    model = make_model(max_positions=prompt_length(task) + task.completion_length + 1, tokenizer=itok)
    model.register_forward_pre_hook(lambda m, args: seen.append(args[0]))
    x = torch.cat([batch.prompt_ids, batch.completion_ids], 1)
    for_task(model, itok, task)(x)
    assert seen[0].shape[1] == x.shape[1] + 1 and (seen[0][:, -1] == eoi).all()
    assert torch.equal(seen[0][:, :-1], x)


def test_logits_equal_the_models_with_the_suffix_and_are_sliced_to_codes(task, itok, layout):
    x = torch.cat([encode_prompts(itok, task, task.generate(2, seed=1)), torch.zeros(2, 64, dtype=torch.long)], 1)
    eoi = itok.convert_tokens_to_ids("<eoi>")
    full = unwrap(layout)(torch.cat([x, torch.full((2, 1), eoi)], 1)).logits[:, :-1]
    got = layout(x).logits
    p = x.shape[1] - task.completion_length
    assert torch.equal(got[:, :p], full[:, :p])  # prompt positions untouched
    inside = torch.zeros(len(itok), dtype=torch.bool)
    inside[codes(task, itok)] = True
    assert torch.equal(got[:, p:, inside], full[:, p:, inside])
    assert (got[:, p:, ~inside] == EXCLUDED_LOGIT).all()
    # log-probs are a distribution over the codes alone, and p log p stays finite
    logp = torch.log_softmax(got[:, p:].float(), -1)
    sums_to_one(logp[..., inside].exp().sum(-1), len(itok))  # within a log-softmax's float32 rounding
    assert torch.isfinite((logp.exp() * logp).sum(-1)).all()
    completion = torch.tensor(codes(task, itok) * 10)[:64].expand(2, 64)
    # the same pass and log-softmax of the same positions (token_logps's own): bit for bit
    assert torch.equal(token_logps(layout, x, completion), logp.gather(-1, completion[..., None]).squeeze(-1))


def test_saved_weights_are_the_inner_models(layout):
    assert isinstance(layout, ImageLayout) and unwrap(layout) is layout.model
    assert set(layout.state_dict()) == {f"model.{k}" for k in layout.model.state_dict()}  # buffers not saved


@pytest.mark.parametrize("name", ["maskgit", "emerge"])
@pytest.mark.parametrize("cfg_scale", [0.0, 2.0])
def test_both_image_samplers_fill_the_canvas_with_codes(task, itok, layout, name, cfg_scale):
    prompts = encode_prompts(itok, task, task.generate(4, seed=2))
    out = SAMPLERS[name](
        layout,
        prompts,
        task.completion_length,
        mask_id=itok.mask_token_id,
        steps=12,
        temperature=1.0,
        cfg_scale=cfg_scale,
        generator=torch.Generator().manual_seed(0),
    )
    assert out.completion_ids.shape == (4, 64)
    assert set(out.completion_ids.unique().tolist()) <= set(codes(task, itok))
    assert out.nfe == 12 * (2 if cfg_scale else 1)
    assert ((out.reveal_step >= 0) & (out.reveal_step < 12)).all()


def test_caption_dropout_masks_whole_prompts_at_the_given_rate():
    prompts = torch.arange(1, 6).repeat(4000, 1)  # [N, 5]
    dropped = drop_prompts(prompts, 0.1, 0, torch.Generator().manual_seed(0))
    rows = (dropped == 0).all(1)
    assert ((dropped == prompts).all(1) | rows).all()  # a row is kept whole or masked whole
    assert abs(rows.float().mean().item() - 0.1) < 0.015  # 4000 rows: SE 0.005
    assert torch.equal(drop_prompts(prompts, 0.0, 0, torch.Generator()), prompts)


# ------------------------------------------------------------------------------------------ MMaDA's own layout


class FakeMMaDA(torch.nn.Module):
    """Logits that depend on every visible token (mean of embeddings over the positions the bias lets a row see),
    and records what it was called with, as MMaDA's forward(input_ids, attention_bias=...)."""

    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.config = SimpleNamespace(vocab_size=vocab)
        self.emb = torch.nn.Embedding(vocab, 8)
        self.head = torch.nn.Linear(8, vocab)
        self.calls = []

    def forward(self, input_ids, attention_bias):
        self.calls.append((input_ids.clone(), attention_bias.clone()))
        h = self.emb(input_ids)  # [N, T, 8]
        seen = attention_bias[:, 0].float()  # [N, T, T]
        mixed = seen @ h / seen.sum(-1, keepdim=True).clamp_min(1)
        return SimpleNamespace(logits=self.head(h + mixed))


SMALL = T2ILayout(
    max_seq_length=6, num_image_tokens=4, image_offset=20, codebook_size=8,
    mask_token_id=1, t2i_id=2, soi_id=3, eoi_id=4, pad_id=5, bos_id=6, eos_id=7,
)  # fmt: skip


def test_mmada_layout_prompt_bias_unconditional_form_and_code_slice():
    torch.manual_seed(0)
    model = FakeMMaDA(SMALL.image_offset + SMALL.codebook_size)
    wrapped = MMaDALayout(model, SMALL)
    prompts = wrapped.prompt_ids([[10, 11], [12]])  # [2, text_len + 1]
    assert prompts[0].tolist() == [5, 5, 2, 6, 10, 11, 7, 3] and prompts[1].tolist() == [5, 5, 5, 2, 6, 12, 7, 3]
    image = torch.tensor([[20, 1, 27, 1], [1, 1, 1, 1]])
    masked_prompt = torch.full_like(prompts[:1], SMALL.mask_token_id)  # the samplers' unconditional branch
    x = torch.cat([torch.cat([prompts, masked_prompt]), torch.cat([image, image[:1]])], 1)  # [3, 12]
    logits = wrapped(x).logits
    seen, bias = model.calls[-1]
    assert seen.shape == (3, 13) and (seen[:, -1] == SMALL.eoi_id).all()
    assert seen[2, :8].tolist() == [5, 5, 5, 5, 2, 6, 7, 3], "all-mask prompt -> MMaDA's empty caption"
    assert torch.equal(seen[2, 8:12], image[0]), "the unconditional row keeps the current image tokens"
    assert not bias[0, 0, :, :2].any() and not bias[0, 0, :2].any() and bias[0, 0, 2:, 2:].all()  # [iPAD] cut off
    assert torch.equal(seen[:2, :12], x[:2])
    assert logits.shape == (3, 12, 28)
    codes = torch.arange(28) >= 20
    assert (logits[:, 8:, ~codes] == EXCLUDED_LOGIT).all() and (logits[:, 8:, codes] > EXCLUDED_LOGIT).all()
    assert torch.equal(logits[:, :8], model(seen, bias).logits[:, :8]), "prompt positions untouched"
    assert unwrap(wrapped) is model


def test_samplers_with_guidance_fill_mmada_layout_with_codes_only():
    torch.manual_seed(0)
    wrapped = MMaDALayout(FakeMMaDA(28), SMALL)
    prompts = wrapped.prompt_ids([[10, 11], [12, 13, 14]])
    gen = torch.Generator().manual_seed(0)
    for name in ("maskgit", "emerge"):
        out = SAMPLERS[name](wrapped, prompts, 4, mask_id=1, steps=4, temperature=1.0, cfg_scale=3.5, generator=gen)
        assert ((out.completion_ids >= 20) & (out.completion_ids < 28)).all(), name
    calls = wrapped.model.calls
    assert any((c[0][:, :8] == wrapped.uncond_prompt).all(1).any() for c in calls), "guidance used the empty caption"

"""Examples to tensors (ddmrl.tasks.encoding): LLaDA's layout [PAD.. BOS prompt | answer EOS..]."""

from __future__ import annotations

import pytest
import torch

from ddmrl.models.tokenizer import build_tokenizer
from ddmrl.tasks import make_task
from ddmrl.tasks.base import Example, Task
from ddmrl.tasks.encoding import completion_mask, encode_examples, encode_prompts, prompt_length


class Toy(Task):
    """Prompts of up to 4 tokens, completions of 5 tokens (answers of up to 4 plus an end token)."""

    name = "toy"
    special_tokens = ("<a>",)
    alphabet = "0123"
    prompt_length = 4
    completion_length = 5

    def sample(self, rng):
        raise NotImplementedError

    def reward(self, completion, example):
        return 0.0

    def score(self, completion, example):
        return {"correct": False}


@pytest.fixture(scope="module")
def toy():
    return Toy(), build_tokenizer(Toy.alphabet, Toy.special_tokens)


def test_prompts_are_bos_prefixed_and_left_padded(toy):
    task, tok = toy
    ex = [Example("a", "01", "<a>2"), Example("b", "<a>123", "3")]
    ids = encode_prompts(tok, task, ex)
    pad, bos = tok.pad_token_id, tok.bos_token_id
    d = {c: tok.convert_tokens_to_ids(c) for c in "0123"}
    a = tok.convert_tokens_to_ids("<a>")
    assert prompt_length(task) == 5
    assert ids.tolist() == [[pad, pad, bos, d["0"], d["1"]], [bos, a, d["1"], d["2"], d["3"]]]


def test_answers_are_right_padded_with_eos_and_masked_up_to_the_first_eos(toy):
    task, tok = toy
    ex = [Example("a", "01", "<a>2"), Example("b", "1", "3012")]
    enc = encode_examples(tok, task, ex)
    eos = tok.eos_token_id
    d = {c: tok.convert_tokens_to_ids(c) for c in "0123"}
    a = tok.convert_tokens_to_ids("<a>")
    assert enc.completion_ids.tolist() == [[a, d["2"], eos, eos, eos], [d["3"], d["0"], d["1"], d["2"], eos]]
    assert enc.completion_mask.tolist() == [[True, True, True, False, False], [True] * 5]
    assert enc.prompt_ids.shape == (2, 5)
    assert not bool((enc.prompt_ids == eos).any()) and not bool((enc.completion_ids == tok.pad_token_id).any())


def test_too_long_prompt_or_answer_is_refused_naming_the_example(toy):
    task, tok = toy
    with pytest.raises(ValueError, match="example long"):
        encode_prompts(tok, task, [Example("long", "01230", "1")])
    with pytest.raises(ValueError, match="example full.*room for EOS"):
        encode_examples(tok, task, [Example("full", "0", "01230")])
    with pytest.raises(ValueError, match="not in the tokenizer"):
        encode_prompts(tok, task, [Example("bad", "9", "1")])


def test_completion_mask_is_true_up_to_and_including_the_first_eos():
    eos = 3
    ids = torch.tensor([[5, 6, 3, 3], [3, 5, 5, 5], [5, 3, 6, 3], [5, 6, 7, 8]])
    assert completion_mask(ids, eos).tolist() == [
        [True, True, True, False],
        [True, False, False, False],
        [True, True, False, False],  # tokens after the first EOS are not part of the completion, even non-EOS ones
        [True, True, True, True],  # no EOS: all valid
    ]


def test_sudoku_examples_fit_the_declared_budgets():
    task = make_task("sudoku4")
    tok = build_tokenizer(task.alphabet, task.special_tokens)
    enc = encode_examples(tok, task, task.generate(5, seed=0))
    assert enc.prompt_ids.shape == (5, task.prompt_length + 1)
    assert enc.completion_ids.shape == (5, task.completion_length)
    assert bool((enc.prompt_ids[:, 0] == tok.bos_token_id).all())  # <sudoku> + 16 digits fill the budget exactly
    assert enc.completion_mask.sum(1).tolist() == [19] * 5  # <answer> 16 digits </answer> EOS

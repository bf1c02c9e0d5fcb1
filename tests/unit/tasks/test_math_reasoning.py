"""GSM8K and MATH500 as tasks (ddmrl.tasks.math_reasoning): lazy sources, disjoint train/test ids, d1's prompt
styles through the chat template (prefill at evaluation only), d1's rewards and parsers."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from transformers import PreTrainedTokenizerFast

from ddmrl.io import DataError
from ddmrl.models.tokenizer import build_tokenizer
from ddmrl.tasks import make_task
from ddmrl.tasks.benchmarks import GSM_SYSTEM_PROMPT, TRAIN_SYSTEM_PROMPT
from ddmrl.tasks.encoding import encode_prompts

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "benchmarks"
GSM8K, MATH500 = str(FIXTURES / "gsm8k_test.jsonl"), str(FIXTURES / "math500_test.jsonl")


@pytest.fixture
def chat_tok() -> PreTrainedTokenizerFast:
    tok = build_tokenizer("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,?$\n", ["<u>", "<a>"])
    tok.chat_template = "{% for m in messages %}<u>{{ m['content'] }}{% endfor %}<a>"
    return tok


def test_sources_are_read_on_first_use_only(tmp_path):
    task = make_task("gsm8k", train=str(tmp_path / "missing.jsonl"), eval=str(tmp_path / "missing.jsonl"))
    assert task.chat and task.completion_length == 256  # building it read nothing
    with pytest.raises(DataError, match="missing.jsonl"):
        task.held_out(2, 0)
    with pytest.raises(ValueError, match="train = ''"):
        make_task("gsm8k", train="", eval=GSM8K)


def test_train_and_test_items_have_their_own_ids_and_prompt_styles():
    task = make_task("gsm8k", train=GSM8K, eval=GSM8K)
    test = task.held_out(10, seed=0)
    assert [ex.id for ex in test] == ["test-gsm8k-0", "test-gsm8k-1", "test-gsm8k-2"], "all of it, in file order"
    assert task.held_out(2, seed=0) == test[:2]
    assert all(ex.prompt.startswith(GSM_SYSTEM_PROMPT) for ex in test)
    train = task.generate(3, seed=1, exclude={ex.id for ex in test})  # same file, yet nothing is excluded
    assert sorted(ex.id for ex in train) == ["train-gsm8k-0", "train-gsm8k-1", "train-gsm8k-2"]
    assert all(ex.prompt.startswith(TRAIN_SYSTEM_PROMPT) and ex.gold["split"] == "train" for ex in train)
    assert task.generate(2, seed=1) == task.generate(2, seed=1)
    assert task.sample(random.Random(0)).id.startswith("train-")
    with pytest.raises(DataError, match="2 training items, 3 needed"):
        task.generate(3, seed=0, exclude={"train-gsm8k-0"})


def test_chat_text_prefills_reasoning_at_evaluation_only(chat_tok):
    task = make_task("gsm8k", train=GSM8K, eval=GSM8K)
    test, train = task.held_out(1, 0)[0], task.generate(1, 0)[0]
    assert task.chat_text(test, chat_tok) == f"<u>{test.prompt}<a><reasoning>"
    assert task.chat_text(train, chat_tok) == f"<u>{train.prompt}<a>"
    ids = encode_prompts(chat_tok, task, [test, train])  # [2, P]: left-padded to the longest
    lengths = [len(chat_tok(task.chat_text(ex, chat_tok))["input_ids"]) for ex in (test, train)]
    assert ids.shape == (2, max(lengths))
    short = lengths.index(min(lengths))
    assert (ids[short, : max(lengths) - min(lengths)] == chat_tok.pad_token_id).all()


def test_rewards_and_scores_are_d1s(chat_tok):
    gsm = make_task("gsm8k", train=GSM8K, eval=GSM8K)
    ex = gsm.held_out(1, 0)[0]  # Janet's ducks: 18
    right = "<reasoning>\n16 - 3 - 4 = 9; 9 * 2 = 18\n</reasoning>\n<answer>\n18\n</answer>\n"
    assert gsm.reward(right, ex) == 4.0 and gsm.reward(right.replace("18\n</", "17\n</"), ex) == 2.0
    assert gsm.reward(right, ex) == make_task("gsm8k", train=GSM8K, eval=GSM8K).reward(right, ex)
    assert gsm.score("so \\boxed{18}", ex)["correct"] and not gsm.score("\\boxed{17}", ex)["correct"]
    assert gsm.accuracy([{"correct": True}, {"correct": False}]) == 50.0
    math = make_task("math500", train=MATH500, eval=MATH500, legacy_reward_quirks=True)
    item = math.held_out(1, 0)[0]
    boxed = f"<answer>\n\\boxed{{{item.gold['ground_truth']}}}\n</answer>"
    assert math.reward(boxed, item) == 2.75  # legacy: the boxed term never fires
    assert make_task("math500", train=MATH500, eval=MATH500).reward(boxed, item) == 3.0
    assert math.score(boxed, item)["correct"]

"""Benchmark loaders on a few real rows (tests/fixtures/benchmarks, see its README for provenance)."""

import json
from pathlib import Path

import numpy as np
import pytest

from ddmrl.io import DataError
from ddmrl.tasks import benchmarks
from ddmrl.tasks.benchmarks import (
    CTD_SYSTEM_PROMPT,
    GSM_SYSTEM_PROMPT,
    MATH500_SYSTEM_PROMPT,
    SUDOKU_SYSTEM_PROMPT,
    TRAIN_SYSTEM_PROMPT,
    load_benchmark,
    solve_countdown,
)

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "benchmarks"
FILES = {
    "gsm8k": FIX / "gsm8k_test.jsonl",
    "math500": FIX / "math500_test.jsonl",
    "mbpp": FIX / "mbpp.jsonl",
    "countdown": FIX / "countdown_cd3_test.jsonl",
    "sudoku": FIX / "4x4_test_sudoku.csv",
}


class ChatTokenizer:
    """Just the chat-template call the benchmark makes."""

    def apply_chat_template(self, messages, add_generation_prompt, tokenize):
        assert add_generation_prompt is True and tokenize is False and len(messages) == 1
        return f"<user>{messages[0]['content']}</user><assistant>"


def test_docstring_examples():
    import doctest

    assert doctest.testmod(benchmarks).failed == 0


@pytest.mark.parametrize("name", sorted(FILES))
def test_reference_answers_score_correct(name):
    bench = load_benchmark(name, FILES[name])
    assert len(bench.examples) == 3 and len({ex.id for ex in bench.examples}) == 3
    scores = [bench.score(ex.answer, ex) for ex in bench.examples]
    assert bench.accuracy(scores) == 100.0
    wrong = [bench.score("I do not know.", ex) for ex in bench.examples]
    assert bench.accuracy(wrong) == 0.0


def test_gsm8k_rows():
    bench = load_benchmark("gsm8k", FILES["gsm8k"])
    ex = bench.examples[0]
    question = json.loads(FILES["gsm8k"].read_text().splitlines()[0])["question"]
    assert ex.id == "gsm8k-0"
    assert ex.prompt == GSM_SYSTEM_PROMPT + "\n\n" + question
    assert ex.gold["ground_truth"] == 18.0 and ex.gold["question"] == question  # d1's parsed gold
    assert ex.answer.endswith("\n</reasoning>\n<answer>\n\\boxed{18}\n</answer>") and "<<" not in ex.answer
    assert bench.chat_prompt(ex, ChatTokenizer()) == f"<user>{ex.prompt}</user><assistant><reasoning>"
    record = bench.score_record(ex, "\\boxed{18}")
    assert record["ground_truth"].endswith("#### 18") and record["generation"] == "\\boxed{18}"


def test_math500_rows_and_optional_columns(tmp_path):
    bench = load_benchmark("math500", FILES["math500"])
    ex = bench.examples[0]
    assert ex.gold["ground_truth"] == "\\frac{1}{4}" and ex.id == "math500-0"
    assert ex.prompt.startswith(MATH500_SYSTEM_PROMPT + "\n\n")
    assert MATH500_SYSTEM_PROMPT.endswith('</answer>" \n')  # d1's stray quote
    full = {"problem": "1+1?", "solution": "It is \\boxed{2}.", "answer": "2", "subject": "Algebra", "level": 1}
    path = tmp_path / "m.jsonl"
    path.write_text(json.dumps({**full, "unique_id": "test/algebra/1.json"}) + "\n")
    ex = load_benchmark("math500", path).examples[0]
    assert ex.id == "test/algebra/1.json" and ex.gold["subject"] == "Algebra" and ex.gold["level"] == 1
    assert "It is \\boxed{2}." in ex.answer


def test_countdown_rows_and_d1_question():
    bench = load_benchmark("countdown", FILES["countdown"])
    ex = bench.examples[0]  # {"input": "30,100,93", "output": "23"}
    assert ex.gold == {"question": "Numbers: [30, 100, 93]\nTarget: 23", "ground_truth": [[30, 100, 93], 23]}
    assert ex.prompt == CTD_SYSTEM_PROMPT + "\n\nNumbers: [30, 100, 93]\nTarget: 23"
    assert "b * c}Respond in the following format" in CTD_SYSTEM_PROMPT  # no separator, as in d1
    assert bench.score("\\boxed{30 - (100 - 93)}", ex)["correct"]
    assert not bench.score("<answer>30 - (100 - 93)</answer>", ex)["correct"]  # d1 needs the box


def test_sudoku_rows_keep_leading_zeros():
    bench = load_benchmark("sudoku", FILES["sudoku"])
    ex = bench.examples[1]  # Puzzle 0140432014020000
    assert ex.gold["puzzle"] == "0140432014020000" and ex.gold["ground_truth"] == "2143432114323214"
    assert ex.gold["question"] == "Solve the following Sudoku puzzle: 0140432014020000\n"
    assert ex.prompt == SUDOKU_SYSTEM_PROMPT + "\n\n" + ex.gold["question"]
    scores = [bench.score("<answer>2143</answer>", ex), bench.score(ex.answer, ex)]
    assert bench.accuracy(scores) == pytest.approx(100 * (2 + 8) / 16)  # pooled cells


def test_mbpp_full_and_sanitized_schemas():
    full = load_benchmark("mbpp", FILES["mbpp"])
    assert [ex.id for ex in full.examples] == ["mbpp-2", "mbpp-11", "mbpp-12"]  # local file: every row
    test_only = load_benchmark("mbpp", FILES["mbpp"], split="test")
    assert [ex.id for ex in test_only.examples] == ["mbpp-11", "mbpp-12"]
    ex = test_only.examples[0]
    assert ex.prompt.startswith("You are an expert Python programmer, and here is your task: Write a python")
    assert ex.prompt.endswith(
        'Your code should pass these tests:\n\nassert remove_Occ("hello","l") == "heo"\n'
        'assert remove_Occ("abcda","a") == "bcd"\nassert remove_Occ("PHP","P") == "H"'
    )
    assert test_only.chat_prompt(ex, ChatTokenizer()).endswith("<assistant>")  # no <reasoning> prefill
    sanitized = load_benchmark("mbpp", FIX / "sanitized-mbpp.json", split="test")
    assert sanitized.examples[1].gold["ground_truth"]["test_imports"] == ["import math"]
    assert sanitized.score(sanitized.examples[1].answer, sanitized.examples[1])["correct"]
    wrong = "```python\ndef sort_matrix(M):\n    return M\n```"
    verdict = sanitized.score(wrong, sanitized.examples[1])
    assert not verdict["correct"] and verdict["status"] == "failed"


def test_train_style_prompts():
    gsm = load_benchmark("gsm8k", FILES["gsm8k"], style="train")
    assert gsm.examples[0].prompt.startswith(TRAIN_SYSTEM_PROMPT + "\n\n") and not gsm.reasoning_prefill
    ctd = load_benchmark("countdown", FILES["countdown"], style="train").examples[0]
    assert "Using only the numbers [30, 100, 93], create an arithmetic expression that evaluates to exactly 23" in (
        ctd.prompt
    )
    math = load_benchmark("math500", FILES["math500"], style="train").examples[0]
    assert math.prompt.startswith(TRAIN_SYSTEM_PROMPT + "\n\nYou are a math expert.")
    with pytest.raises(ValueError, match="style"):
        load_benchmark("gsm8k", FILES["gsm8k"], style="other")


def test_parquet_and_saved_dataset_sources(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [json.loads(line) for line in FILES["mbpp"].read_text().splitlines()]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "mbpp.parquet")
    bench = load_benchmark("mbpp", tmp_path / "mbpp.parquet", split="test")
    assert [ex.id for ex in bench.examples] == ["mbpp-11", "mbpp-12"]
    assert bench.examples[0].gold["ground_truth"]["test_list"][0] == 'assert remove_Occ("hello","l") == "heo"'

    import datasets

    rows = [json.loads(line) for line in FILES["gsm8k"].read_text().splitlines()]
    datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)}).save_to_disk(str(tmp_path / "gsm8k_saved"))
    assert len(load_benchmark("gsm8k", tmp_path / "gsm8k_saved").examples) == 3


def test_d1_subset_is_numpy_seed_42(tmp_path):
    path = tmp_path / "countdown.jsonl"
    path.write_text("".join(json.dumps({"input": f"{i},1,2", "output": str(i + 3)}) + "\n" for i in range(300)))
    bench = load_benchmark("countdown", path)
    np.random.seed(42)  # what d1's init_seed(42) does, then CTDDataset draws its subset
    expected = np.random.choice(300, 256, replace=False)
    assert [ex.id for ex in bench.d1_subset()] == [f"countdown-{i}" for i in expected]
    assert len(load_benchmark("countdown", FILES["countdown"]).d1_subset()) == 3  # fewer rows than 256: all
    assert len(load_benchmark("gsm8k", FILES["gsm8k"]).d1_subset()) == 3  # GSM8K: every item


def test_hub_id_fails_at_once_when_offline(monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(DataError) as err:
        load_benchmark("gsm8k", "openai/gsm8k")
    message = str(err.value)
    assert message.startswith("'openai/gsm8k' is not a local path and hub access is off; download it with `python")
    assert "load_dataset('openai/gsm8k', 'main', split='test').to_json(" in message
    assert message.endswith("and pass the path")
    with pytest.raises(DataError, match="'HuggingFaceH4/MATH-500' is not a local path and hub access is off"):
        load_benchmark("math500")  # default source: the Hub id


def test_hub_errors_online_are_rewritten(monkeypatch):
    import datasets

    for var in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(var, raising=False)

    def unreachable(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'openai/gsm8k' on the Hub")

    monkeypatch.setattr(datasets, "load_dataset", unreachable)
    with pytest.raises(DataError, match="could not be loaded from the hub"):
        load_benchmark("gsm8k", "openai/gsm8k")


def test_d1_sets_are_not_on_the_hub():
    with pytest.raises(DataError, match="dllm-reasoning/d1 GitHub repository.*countdown_cd3_test.jsonl"):
        load_benchmark("countdown", "dllm-reasoning/countdown")
    with pytest.raises(DataError, match="4x4_test_sudoku.csv"):
        load_benchmark("sudoku")


@pytest.mark.parametrize(
    ("name", "filename", "content", "message"),
    [
        ("gsm8k", "g.jsonl", '{"question": "q", "answer": "no marker"}\n', "g.jsonl record 1: 'answer' has no"),
        ("gsm8k", "g.jsonl", '{"question": "q"}\n', r"g.jsonl record 1: missing key\(s\) answer \(found question\)"),
        (
            "sudoku",
            "s.csv",
            "Puzzle,Solution\n310220000210032,3142243142131324\n",
            "s.csv record 1: Puzzle must be 16",
        ),
        ("countdown", "c.jsonl", '{"input": "1,x", "output": "3"}\n', "c.jsonl record 1: 'input' must be"),
        (
            "mbpp",
            "m.jsonl",
            '{"task_id": 11, "code": "", "test_list": [], "text": "t"}\n',
            "m.jsonl record 1: 'test_list'",
        ),
        ("gsm8k", "g.txt", "hello", "unsupported file type '.txt'"),
        ("gsm8k", "g.jsonl", "", "no gsm8k records"),
    ],
)
def test_bad_files_name_the_record(tmp_path, name, filename, content, message):
    path = tmp_path / filename
    path.write_text(content)
    with pytest.raises(DataError, match=message):
        load_benchmark(name, path)


def test_unknown_benchmark():
    with pytest.raises(ValueError, match="unknown benchmark"):
        load_benchmark("humaneval", FILES["gsm8k"])


def test_solve_countdown():
    assert solve_countdown([3, 7, 9], 20) is not None
    assert solve_countdown([1, 1, 1], 100) is None

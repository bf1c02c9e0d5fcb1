"""The papers' text benchmarks as Task-like objects: GSM8K, MATH500, MBPP, and d1's Countdown and Sudoku test sets.

A :class:`Benchmark` holds a fixed list of :class:`~ddmrl.tasks.base.Example` (``prompt`` = the user turn,
``answer`` = a reference completion the scorer accepts, ``gold`` = ``question`` and ``ground_truth`` in the form
d1's generation files store them) and scores completions with the same rules as ``python -m ddmrl.score``
(:mod:`ddmrl.tasks.scoring`, :mod:`ddmrl.tasks.d1_eval`). Like :class:`~ddmrl.tasks.base.Task` it has
``score(completion, example) -> {"correct": ...}`` and ``accuracy(scores)``; unlike it, it has no generator
and no training reward.

Prompts (``style``):

* ``"eval"`` (default): d1's evaluation prompts (``eval/gsm8k.py``, ``math500.py``, ``countdown.py``,
  ``sudoku.py``): one user turn ``SYSTEM_PROMPT + "\\n\\n" + question``; :meth:`Benchmark.chat_prompt` applies
  the model's chat template and appends the ``<reasoning>`` prefill, as d1 does for every task. The strings are
  reproduced character for character, stray quote in the MATH500 prompt included.
* ``"train"``: d1's training prompts (``diffu-grpo/data_utils.py``): the generic
  ``<reasoning>``/``<answer>`` system prompt (Sudoku: its own), no ``\\boxed`` request for GSM8K, an
  ``<answer>``-tag instruction for Countdown; no prefill.

MBPP has one prompt in both styles (MaskGRPO's, :mod:`ddmrl.tasks.mbpp`) and no prefill.

Sources (:func:`load_benchmark`): a local ``.jsonl``, ``.json`` (array), ``.parquet`` or ``.csv`` file, a
directory written by ``datasets``' ``save_to_disk``, or a Hub id loaded with ``datasets.load_dataset``. With
``HF_DATASETS_OFFLINE``/``HF_HUB_OFFLINE`` set (the pipeline's default), a Hub id fails at once with a message
saying how to download it. Expected schemas (the public files'): GSM8K ``question, answer``; MATH-500
``problem, answer`` (``solution, subject, level, unique_id`` optional); MBPP full ``task_id, text, code,
test_list, test_setup_code`` or sanitized ``task_id, prompt, code, test_list, test_imports``; Countdown
(``countdown_cd3_test.jsonl``) ``input, output``; Sudoku (``4x4_test_sudoku.csv``) ``Puzzle, Solution``, read
as strings (leading zeros).

d1 evaluates all of GSM8K (1319) and MATH-500 (500) but a fixed 256-item subset of Countdown and Sudoku:
``np.random.choice(len, 256, replace=False)`` right after ``np.random.seed(42)``; :meth:`Benchmark.d1_subset`
reproduces it (assuming, as in d1's ``eval.py``, that nothing else draws from NumPy's global generator first).
"""

from __future__ import annotations

import itertools
import json
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

from ddmrl.io import DataError, read_jsonl
from ddmrl.tasks.base import Example
from ddmrl.tasks.d1_eval import gsm8k_gold
from ddmrl.tasks.mbpp import MbppTests, mbpp_prompt, mbpp_split_of
from ddmrl.tasks.scoring import parse_ground_truth, score_item, summarize

__all__ = [
    "BENCHMARKS",
    "CTD_SYSTEM_PROMPT",
    "GSM_SYSTEM_PROMPT",
    "MATH500_SYSTEM_PROMPT",
    "SUDOKU_SYSTEM_PROMPT",
    "TRAIN_SYSTEM_PROMPT",
    "Benchmark",
    "load_benchmark",
    "load_records",
]

# --------------------------------------------------------------------------------------------- d1's prompts

#: d1 eval/gsm8k.py (note the space before the first newline)
GSM_SYSTEM_PROMPT = (
    "You are a math expert. You will be given a question to solve. Solve it step by step. Wrap the final answer "
    "in a \\boxed{}. \nRespond in the following format:\n<reasoning>\nYour reasoning here\n</reasoning>\n"
    "<answer>\n\\boxed{...}\n</answer>"
)
#: d1 eval/math500.py (with its stray '" ' and final newline)
MATH500_SYSTEM_PROMPT = (
    "You are a math expert. You will be given a question to solve. Solve it step by step. Wrap the final answer "
    "in a \\boxed{}.\nRespond in the following format:\n<reasoning>\nYour reasoning here\n</reasoning>\n"
    '<answer>\n\\boxed{...}\n</answer>" \n'
)
#: d1 eval/countdown.py (no space or newline before "Respond")
CTD_SYSTEM_PROMPT = (
    "Using only the provided numbers, create an arithmetic expression that evaluates to exactly the provided "
    "target number. You may use the operations +, -, *, and / as needed, but each number must be used exactly "
    "once. Think step-by-step. After reasoning, provide only your final expression inside \\boxed{} tags without "
    "including an equals sign or the target number. For example: \\boxed{a + b * c}Respond in the following "
    "format:\n<reasoning>\nYour reasoning here\n</reasoning>\n<answer>\n\\boxed{...}\n</answer>"
)
#: d1 eval/sudoku.py and diffu-grpo/data_utils.py (the same string)
SUDOKU_SYSTEM_PROMPT = (
    "\nPlease solve the following 4x4 Sudoku puzzle. The puzzle is provided as a 16-character string reading "
    "left-to-right, top-to-bottom, where '0' represents empty cells.\n\nRules:\n- Fill empty cells with digits "
    "1-4\n- Each row must contain digits 1-4 exactly once\n- Each column must contain digits 1-4 exactly once\n"
    "- Each 2x2 box must contain digits 1-4 exactly once\n\nImportant: Your solution must be a COMPLETE "
    "16-character string with only the digits 1-4, representing your final solved grid.\n\nRespond in this "
    "exact format:\n<reasoning>\nYour step-by-step solving process\n</reasoning>\n<answer>\n[16-character "
    "solution string with no spaces or separators]\n</answer>\n"
)
#: d1 diffu-grpo/data_utils.py SYSTEM_PROMPT (training, all tasks but Sudoku)
TRAIN_SYSTEM_PROMPT = "\nRespond in the following format:\n<reasoning>\n...\n</reasoning>\n<answer>\n...\n</answer>\n"
_TRAIN_MATH = (
    "You are a math expert. You will be given a question to solve. Solve it step by step. Wrap the final answer "
    "in a \\boxed{}. \n\n"
)


def _train_countdown(numbers: list[int], target: int) -> str:
    return (
        f"{TRAIN_SYSTEM_PROMPT}\nUsing only the numbers {numbers}, create an arithmetic expression that evaluates "
        f"to exactly {target}. You must use all numbers from the list, and each number must be used exactly once. "
        "You may use the operations +, -, *, and / as needed. After reasoning, provide only your final expression "
        "inside <answer></answer> tags without including an equals sign or the target number. For example, if "
        "the numbers are [2, 3, 4] and the target is 5, a valid answer is: <answer>\n2*4-3\n</answer>"
    )


def _reference(reasoning: str, answer: str) -> str:
    """A completion after the ``<reasoning>`` prefill, in d1's format."""
    return f"\n{reasoning.strip()}\n</reasoning>\n<answer>\n{answer}\n</answer>"


def solve_countdown(numbers: Sequence[int], target: int) -> str | None:
    """One expression using every number once that equals ``target`` (exact arithmetic), or ``None``.

    >>> solve_countdown([30, 100, 93], 23)
    '(30-100)+93'
    """
    ops = "+-*/"

    def apply(a: Fraction, op: str, b: Fraction) -> Fraction | None:
        if op == "/":
            return None if b == 0 else a / b
        return a + b if op == "+" else a - b if op == "-" else a * b

    for perm in itertools.permutations(numbers):
        if len(perm) == 1:
            if perm[0] == target:
                return str(perm[0])
            continue
        if len(perm) == 2:
            for op in ops:
                if apply(Fraction(perm[0]), op, Fraction(perm[1])) == target:
                    return f"{perm[0]}{op}{perm[1]}"
            continue
        if len(perm) != 3:
            return None
        a, b, c = (Fraction(x) for x in perm)
        for o1, o2 in itertools.product(ops, repeat=2):
            left = apply(a, o1, b)
            if left is not None and apply(left, o2, c) == target:
                return f"({perm[0]}{o1}{perm[1]}){o2}{perm[2]}"
            right = apply(b, o2, c)
            if right is not None and apply(a, o1, right) == target:
                return f"{perm[0]}{o1}({perm[1]}{o2}{perm[2]})"
    return None


# ------------------------------------------------------------------------------------------------- loading


def _hub_offline() -> bool:
    return any(os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on") for v in _OFFLINE_VARS)


_OFFLINE_VARS = ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE")


def _plain(value: Any) -> Any:
    """Arrow/NumPy values as plain Python (lists, ints, strs)."""
    if hasattr(value, "tolist"):
        return value.tolist()
    return value


def _from_datasets(data: Any, split: str | None, source: str) -> list[dict[str, Any]]:
    import datasets

    if isinstance(data, datasets.DatasetDict | datasets.IterableDatasetDict):
        if split is None or split not in data:
            raise DataError(f"{source}: choose a split among {', '.join(data.keys())} (got {split!r})")
        data = data[split]
    return [dict(row) for row in data]


def load_records(
    source: str | Path, *, hub_config: str | None = None, split: str | None = None, download_hint: str = ""
) -> list[dict[str, Any]]:
    """Rows of a local file/directory, or of a Hub dataset when ``source`` is not a path (see module docstring).

    A Hub id with hub access off raises :class:`DataError` at once: ``'<id>' is not a local path and hub access
    is off; download it with <download_hint> and pass the path``.
    """
    path = Path(source)
    if path.is_dir():
        import datasets

        return _from_datasets(datasets.load_from_disk(str(path)), split, str(path))
    if path.is_file():
        suffix = path.suffix.lower()
        if suffix == ".jsonl":
            return read_jsonl(path)
        if suffix == ".json":
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
                raise DataError(f"{path}: not a readable JSON file ({e})") from None
            if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
                raise DataError(f"{path}: expected a JSON array of objects")
            return data
        if suffix == ".parquet":
            import pyarrow.parquet as pq

            try:
                return pq.read_table(path).to_pylist()
            except Exception as e:  # pyarrow raises its own error types for broken files
                raise DataError(f"{path}: not a readable Parquet file ({e})") from None
        if suffix == ".csv":
            import pandas as pd

            try:
                frame = pd.read_csv(path, dtype=str, keep_default_na=False)  # digits stay strings: '0123...'
            except (OSError, ValueError, pd.errors.ParserError) as e:
                raise DataError(f"{path}: not a readable CSV file ({e})") from None
            return frame.to_dict("records")
        raise DataError(f"{path}: unsupported file type {suffix!r}; use .jsonl, .json, .parquet or .csv")
    hint = download_hint or f"datasets.load_dataset({str(source)!r}) on a machine with network access"
    message = f"'{source}' is not a local path and hub access is off; download it with {hint} and pass the path"
    if _hub_offline():
        raise DataError(message)
    import datasets

    try:
        data = datasets.load_dataset(str(source), hub_config, split=split)
    except (ConnectionError, OSError) as e:
        raise DataError(f"'{source}' is not a local path and could not be loaded from the hub ({e}); {hint}") from None
    return _from_datasets(data, split, str(source))


def _require(record: dict[str, Any], keys: Sequence[str], where: str) -> None:
    missing = [k for k in keys if k not in record]
    if missing:
        raise DataError(f"{where}: missing key(s) {', '.join(missing)} (found {', '.join(sorted(record)) or 'none'})")


# -------------------------------------------------------------------------------------------------- builders


def _gsm8k(record: dict[str, Any], i: int, where: str, style: str) -> Example:
    _require(record, ("question", "answer"), where)
    question, solution = str(record["question"]), str(record["answer"])
    if "####" not in solution:
        raise DataError(f"{where}: 'answer' has no '#### <final answer>' line")
    reasoning, final = solution.split("####", 1)
    prompt = (GSM_SYSTEM_PROMPT if style == "eval" else TRAIN_SYSTEM_PROMPT) + "\n\n" + question
    # commas dropped in the box: d1 reads \boxed{1,200} as 1.0
    answer = _reference(re.sub(r"<<[^>]*>>", "", reasoning), "\\boxed{" + final.strip().replace(",", "") + "}")
    gold = {"question": question, "ground_truth": gsm8k_gold(solution), "solution": solution}
    return Example(id=f"gsm8k-{i}", prompt=prompt, answer=answer, gold=gold)


def _math500(record: dict[str, Any], i: int, where: str, style: str) -> Example:
    _require(record, ("problem", "answer"), where)
    problem, final = str(record["problem"]), str(record["answer"])
    if style == "eval":
        prompt = MATH500_SYSTEM_PROMPT + "\n\n" + problem
    else:
        prompt = f"{TRAIN_SYSTEM_PROMPT}\n\n{_TRAIN_MATH}{problem}"
    answer = _reference(str(record.get("solution") or ""), "\\boxed{" + final + "}")
    gold = {"question": problem, "ground_truth": final}
    gold.update({k: record[k] for k in ("subject", "level") if k in record})
    return Example(id=str(record.get("unique_id") or f"math500-{i}"), prompt=prompt, answer=answer, gold=gold)


def _countdown(record: dict[str, Any], i: int, where: str, style: str) -> Example:
    _require(record, ("input", "output"), where)
    try:
        numbers = [int(n) for n in str(record["input"]).split(",")]
        target = int(record["output"])
    except ValueError:
        raise DataError(f"{where}: 'input' must be comma-separated integers and 'output' an integer") from None
    question = f"Numbers: {numbers}\nTarget: {target}"  # d1's eval question (Python list repr)
    prompt = CTD_SYSTEM_PROMPT + "\n\n" + question if style == "eval" else _train_countdown(numbers, target)
    expression = solve_countdown(numbers, target)
    answer = _reference("", "\\boxed{" + expression + "}") if expression else ""
    gold = {"question": question, "ground_truth": [numbers, target]}
    return Example(id=f"countdown-{i}", prompt=prompt, answer=answer, gold=gold)


def _sudoku(record: dict[str, Any], i: int, where: str, style: str) -> Example:
    record = {k.lower(): v for k, v in record.items()}
    _require(record, ("puzzle", "solution"), where)
    puzzle, solution = str(record["puzzle"]), str(record["solution"])
    for name, grid in (("Puzzle", puzzle), ("Solution", solution)):
        if len(grid) != 16 or not grid.isdigit():
            raise DataError(f"{where}: {name} must be 16 digits (read as text, leading zeros kept), got {grid!r}")
    question = f"Solve the following Sudoku puzzle: {puzzle}\n"
    prompt = SUDOKU_SYSTEM_PROMPT + "\n\n" + question  # the same in d1's eval and training code
    gold = {"question": question, "ground_truth": solution, "puzzle": puzzle}
    return Example(id=f"sudoku-{i}", prompt=prompt, answer=_reference("", solution), gold=gold)


def _mbpp(record: dict[str, Any], i: int, where: str, style: str) -> Example:
    _require(record, ("task_id", "code", "test_list"), where)
    description = record.get("prompt", record.get("text"))
    if not isinstance(description, str):
        raise DataError(f"{where}: needs 'prompt' (sanitized MBPP) or 'text' (full MBPP)")
    try:
        tests = MbppTests.from_record({k: _plain(v) for k, v in record.items()})
    except ValueError as e:
        raise DataError(f"{where}: {e}") from None
    prompt = mbpp_prompt(description, tests.test_list)
    gold = {"question": description, "ground_truth": tests.to_record(), "task_id": int(record["task_id"])}
    answer = "```python\n" + str(record["code"]).replace("\r\n", "\n") + "\n```"
    return Example(id=f"mbpp-{int(record['task_id'])}", prompt=prompt, answer=answer, gold=gold)


@dataclass(frozen=True)
class _Spec:
    build: Callable[[dict[str, Any], int, str, str], Example]
    hub_id: str | None
    hub_config: str | None
    hub_split: str
    hint: str
    reasoning_prefill: bool = True
    d1_subsample: int | None = None


def _hf_hint(hub_id: str, config: str | None, split: str, out: str) -> str:
    args = f"'{hub_id}'" + (f", '{config}'" if config else "")
    return f"`python -c \"from datasets import load_dataset; load_dataset({args}, split='{split}').to_json('{out}')\"`"


_D1_GITHUB = "the dllm-reasoning/d1 GitHub repository (file {})"
_SPECS: dict[str, _Spec] = {
    "gsm8k": _Spec(
        _gsm8k, "openai/gsm8k", "main", "test", _hf_hint("openai/gsm8k", "main", "test", "gsm8k_test.jsonl")
    ),
    "math500": _Spec(
        _math500,
        "HuggingFaceH4/MATH-500",
        None,
        "test",
        _hf_hint("HuggingFaceH4/MATH-500", None, "test", "math500.jsonl"),
    ),
    "mbpp": _Spec(
        _mbpp,
        "google-research-datasets/mbpp",
        "sanitized",
        "test",
        _hf_hint("google-research-datasets/mbpp", "sanitized", "test", "mbpp_sanitized_test.jsonl"),
        reasoning_prefill=False,
    ),
    "countdown": _Spec(
        _countdown, None, None, "test", _D1_GITHUB.format("dataset/countdown_cd3_test.jsonl"), d1_subsample=256
    ),
    "sudoku": _Spec(_sudoku, None, None, "test", _D1_GITHUB.format("dataset/4x4_test_sudoku.csv"), d1_subsample=256),
}
BENCHMARKS = tuple(_SPECS)


# ------------------------------------------------------------------------------------------------ benchmark


@dataclass
class Benchmark:
    """A fixed evaluation set with d1's prompts and scorer.

    Attributes:
        name: one of :data:`BENCHMARKS`.
        examples: the items, in file order.
        source: where they were loaded from.
        style: ``"eval"`` or ``"train"`` prompts (module docstring).
        reasoning_prefill: whether :meth:`chat_prompt` appends ``<reasoning>`` (d1 eval: yes; MBPP: no).
    """

    name: str
    examples: list[Example]
    source: str = ""
    style: str = "eval"
    reasoning_prefill: bool = True
    d1_subsample: int | None = field(default=None, repr=False)

    def chat_prompt(self, example: Example, tokenizer: Any) -> str:
        """The model input text: ``example.prompt`` as one user turn through ``tokenizer``'s chat template
        (``add_generation_prompt=True``), plus the ``<reasoning>`` prefill when :attr:`reasoning_prefill`."""
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": example.prompt}], add_generation_prompt=True, tokenize=False
        )
        return text + "<reasoning>" if self.reasoning_prefill else text

    def score_record(self, example: Example, generation: str) -> dict[str, Any]:
        """One line of ``python -m ddmrl.score``'s input for ``generation`` (GSM8K keeps the worked solution as
        ground truth, so that both protocols can read it)."""
        truth = example.gold["solution"] if self.name == "gsm8k" else example.gold["ground_truth"]
        return {"question": example.gold["question"], "ground_truth": truth, "generation": generation}

    def score(self, completion: str, example: Example, protocol: str = "d1") -> dict[str, Any]:
        """Verdict on one completion (``correct`` and more, see :func:`ddmrl.tasks.scoring.score_item`)."""
        record = self.score_record(example, completion)
        gold = parse_ground_truth(self.name, record["ground_truth"], record["question"], protocol)
        return score_item(self.name, completion, gold, protocol)

    def accuracy(self, scores: list[dict[str, Any]]) -> float:
        """Accuracy in percent as the papers report it (Sudoku: cell accuracy pooled over the set)."""
        return summarize(self.name, "d1", scores)["accuracy"]

    def d1_subset(self, seed: int = 42) -> list[Example]:
        """The items d1 evaluates: all of them, or for Countdown and Sudoku the 256 drawn by
        ``np.random.choice(len, 256, replace=False)`` after ``np.random.seed(42)``, in that order."""
        if self.d1_subsample is None or len(self.examples) < self.d1_subsample:
            return list(self.examples)
        import numpy as np

        order = np.random.RandomState(seed).choice(len(self.examples), self.d1_subsample, replace=False)
        return [self.examples[int(i)] for i in order]


def load_benchmark(
    name: str, source: str | Path | None = None, *, split: str | None = None, style: str = "eval"
) -> Benchmark:
    """Load benchmark ``name`` from ``source`` (a local file/directory or Hub id; default: its Hub id).

    ``split`` picks the Hub split (default ``test``); for MBPP it also keeps only that split's task ids
    (``None`` on a local file = keep every row). Bad rows raise :class:`DataError` naming the source and record.
    """
    if name not in _SPECS:
        raise ValueError(f"unknown benchmark {name!r}; choose one of {', '.join(BENCHMARKS)}")
    if style not in ("eval", "train"):
        raise ValueError(f"style must be 'eval' or 'train', got {style!r}")
    spec = _SPECS[name]
    if source is None:
        if spec.hub_id is None:
            raise DataError(f"{name} is not on the Hub: download it from {spec.hint} and pass the path")
        source = spec.hub_id
    is_local = Path(source).exists()
    if not is_local and spec.hub_id is None:
        raise DataError(f"'{source}' is not a local path; {name} is not on the Hub: download it from {spec.hint}")
    hub_split = split or spec.hub_split
    records = load_records(
        source,
        hub_config=spec.hub_config,
        split=None if is_local and Path(source).is_file() else hub_split,
        download_hint=spec.hint,
    )
    examples = [spec.build(r, i, f"{source} record {i + 1}", style) for i, r in enumerate(records)]
    if name == "mbpp" and (split is not None or not is_local):
        examples = [ex for ex in examples if mbpp_split_of(ex.gold["task_id"]) == hub_split]
    if not examples:
        raise DataError(f"{source}: no {name} records" + (f" in split {hub_split!r}" if name == "mbpp" else ""))
    return Benchmark(
        name=name,
        examples=examples,
        source=str(source),
        style=style,
        reasoning_prefill=spec.reasoning_prefill and style == "eval",
        d1_subsample=spec.d1_subsample,
    )

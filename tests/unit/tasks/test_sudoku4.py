"""sudoku4: generator validity and uniqueness, d1 reward/score, pooled cell accuracy, random baseline."""

import doctest
import random
import re

import pytest

import ddmrl.tasks
from ddmrl.tasks import TASKS, make_task
from ddmrl.tasks import sudoku4 as sudoku4_module
from ddmrl.tasks.base import Example
from ddmrl.tasks.sudoku4 import Sudoku4, all_grids, count_solutions, is_valid_grid

SPECIAL = re.compile("|".join(re.escape(t) for t in Sudoku4.special_tokens))


def n_tokens(text: str) -> int:
    """Length under the character-level tokenizer, a special token counting as one."""
    return len(SPECIAL.sub("#", text))


@pytest.fixture(scope="module")
def task():
    return Sudoku4()


@pytest.fixture(scope="module")
def examples(task):
    return task.generate(200, seed=0)


def test_all_grids():
    grids = all_grids()
    assert len(grids) == 288 == len(set(grids))
    assert all(is_valid_grid(g) for g in grids)
    assert all_grids() is grids  # cached
    assert "3142243142131324" in grids  # a solution from d1's test set


def test_is_valid_grid_rejects():
    assert not is_valid_grid("1234341221434321"[:15])
    assert not is_valid_grid("1234123412341234")  # columns repeat
    assert not is_valid_grid("1234214334124321")  # 2x2 boxes repeat (rows and columns are fine)
    assert not is_valid_grid("3142243142131320")


def test_count_solutions():
    assert count_solutions("3102200002100320") == 1  # d1 test puzzle
    assert count_solutions("0" * 16, limit=1000) == 288
    assert count_solutions("3142243142131324") == 1
    assert count_solutions("1234341200000000") == 2  # the bottom half can be swapped


def test_generated_examples_are_valid(task, examples):
    assert len(examples) == 200 == len({e.id for e in examples})
    for ex in examples:
        puzzle, solution = ex.gold["puzzle"], ex.gold["solution"]
        assert is_valid_grid(solution)
        assert len(puzzle) == 16 and puzzle.count("0") == task.num_empty
        assert all(p in ("0", s) for p, s in zip(puzzle, solution, strict=True))
        assert count_solutions(puzzle) == 1
        assert ex.id == puzzle
        assert ex.prompt == "<sudoku>" + puzzle
        assert ex.answer == f"<answer>{solution}</answer>"
        assert n_tokens(ex.prompt) == task.prompt_length
        assert n_tokens(ex.answer) < task.completion_length
        assert set(SPECIAL.sub("", ex.prompt + ex.answer)) <= set(task.alphabet)
        assert Example.from_record(ex.to_record()) == ex


@pytest.mark.parametrize("num_empty", [4, 10, 12])
def test_num_empty(num_empty):
    for ex in Sudoku4(num_empty=num_empty).generate(20, seed=1):
        assert ex.gold["puzzle"].count("0") == num_empty
        assert count_solutions(ex.gold["puzzle"]) == 1


@pytest.mark.parametrize("num_empty", [0, 13])
def test_num_empty_out_of_range(num_empty):
    with pytest.raises(ValueError):
        Sudoku4(num_empty=num_empty)


def unique_share(blanks: int, rng: random.Random, n: int) -> float:
    """The share of uniformly drawn (solution, blank cells) pairs whose puzzle has one solution."""
    grids, hits = all_grids(), 0
    for _ in range(n):
        solution, empty = rng.choice(grids), set(rng.sample(range(16), blanks))
        hits += count_solutions("".join("0" if i in empty else c for i, c in enumerate(solution))) == 1
    return hits / n


def test_a_spread_of_blanks_comes_out_in_proportion_to_each_levels_unique_share():
    """A try draws its blanks k uniformly from the spread and is kept when its puzzle is unique (probability u_k), so
    P(k) = u_k / sum_j u_j. Checked against u_k estimated from independent draws (fixed seeds, 5 sigma of both)."""
    levels = range(4, 13)
    examples = Sudoku4(num_empty=4, num_empty_max=12).generate(1500, seed=3)
    counts = {k: sum(e.id.count("0") == k for e in examples) for k in levels}
    assert set(counts) == set(levels) and sum(counts.values()) == 1500
    assert all(count_solutions(e.id) == 1 for e in examples)
    rng = random.Random(11)
    share = {k: unique_share(k, rng, 600) for k in levels}
    total = sum(share.values())
    for k in levels:
        p, n = share[k] / total, 1500
        sigma = (p * (1 - p) / n + p * p * (1 - share[k]) / max(share[k], 1e-9) / 600) ** 0.5
        assert abs(counts[k] / n - p) < 5 * sigma + 2e-3, (k, counts[k] / n, p)
    assert counts[4] > counts[8] > counts[11]  # fewer givens, fewer unique puzzles


def test_without_a_spread_no_draw_is_spent_on_the_blanks():
    """num_empty_max 0 keeps the generator's draws as they were: the main job's data do not change."""
    assert Sudoku4(num_empty=8, num_empty_max=0).generate(30, seed=5) == Sudoku4(num_empty=8).generate(30, seed=5)
    assert Sudoku4(num_empty=8, num_empty_max=8).generate(30, seed=5) != Sudoku4(num_empty=8).generate(30, seed=5)


def test_with_a_spread_the_held_out_set_has_every_level_in_equal_shares():
    """However rare a level's unique puzzles are among the training draws (0.2 % at 12 blanks), the held-out set
    has n // levels of each (the first n mod levels one more): every level has items at some base model's
    frontier. Each level's items are that level's own generator's draws (a larger n keeps the smaller one's); without
    a spread the held-out set is the generator's draws, as before."""
    task = Sudoku4(num_empty=4, num_empty_max=12)
    held_out = task.held_out(50, seed=7)
    levels = [task.item_level(e.id) for e in held_out]
    assert len({e.id for e in held_out}) == 50 and all(count_solutions(e.id) == 1 for e in held_out)
    assert levels == [f"{k} blanks" for k in range(4, 13) for _ in range(6 if k < 9 else 5)]
    assert held_out == task.held_out(50, seed=7) and held_out != task.held_out(50, seed=8)
    larger = task.held_out(90, seed=7)
    assert [e for e in larger if e.id.count("0") == 4][:6] == held_out[:6]  # a level's first draws do not move
    assert Sudoku4(num_empty=8).held_out(30, seed=5) == Sudoku4(num_empty=8).generate(30, seed=5)
    assert Sudoku4.item_level("3102200002100320") == "8 blanks"


@pytest.mark.parametrize(("num_empty", "num_empty_max"), [(8, 6), (4, 13)])
def test_spread_out_of_range(num_empty, num_empty_max):
    with pytest.raises(ValueError, match="num_empty_max"):
        Sudoku4(num_empty=num_empty, num_empty_max=num_empty_max)


def test_generate_deterministic_and_disjoint(task, examples):
    assert task.generate(200, seed=0) == examples
    assert task.generate(50, seed=1) != examples[:50]
    test_ids = {e.id for e in examples}
    train = task.generate(300, seed=1, exclude=test_ids)
    assert len(train) == 300 and not test_ids & {e.id for e in train}


def test_reference_answer_scores_full_marks(task, examples):
    for ex in examples:
        assert task.reward(ex.answer, ex) == 1.0
        assert task.score(ex.answer, ex) == {"correct": True, "cells_correct": 8, "cells_empty": 8}


def test_scrambled_answer_fails(task, examples):
    relabel = str.maketrans("1234", "2341")  # changes every cell
    for ex in examples:
        scrambled = ex.answer.translate(relabel)
        assert task.reward(scrambled, ex) == 0.0
        assert task.score(scrambled, ex)["correct"] is False
        one_off = list(ex.gold["solution"])
        i = ex.gold["puzzle"].index("0")
        one_off[i] = str(int(one_off[i]) % 4 + 1)
        near = "<answer>" + "".join(one_off) + "</answer>"
        assert task.reward(near, ex) == pytest.approx(7 / 8)
        assert task.score(near, ex) == {"correct": False, "cells_correct": 7, "cells_empty": 8}


def test_accuracy_pools_cells(task):
    scores = [
        {"correct": True, "cells_correct": 8, "cells_empty": 8},
        {"correct": False, "cells_correct": 0, "cells_empty": 8},
        {"correct": False, "cells_correct": 2, "cells_empty": 4},
    ]
    assert task.accuracy(scores) == pytest.approx(100 * 10 / 20)  # not the 33% of puzzles solved
    assert task.accuracy([]) == 0.0


def test_random_guess_baseline(task, examples):
    """Filling empty cells uniformly from 1-4 scores about 25% cell accuracy: the floor to be far from."""
    rng = random.Random(0)
    scores = []
    for ex in examples:
        guess = "".join(rng.choice("1234") if c == "0" else c for c in ex.gold["puzzle"])
        scores.append(task.score(f"<answer>{guess}</answer>", ex))
    assert 15.0 < task.accuracy(scores) < 35.0


def test_registry():
    assert TASKS["sudoku4"] is Sudoku4
    assert make_task("sudoku4", num_empty=6).num_empty == 6
    assert make_task("countdown3").name == "countdown3"
    with pytest.raises(ValueError, match="unknown task 'sudoku9'; choose one of"):
        make_task("sudoku9")


def test_docstring_examples():
    for module in (sudoku4_module, ddmrl.tasks):
        assert doctest.testmod(module).failed == 0

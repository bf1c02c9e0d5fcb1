"""``sudoku4``: 4x4 Sudoku in d1's string format (16 digits row by row, ``0`` = empty), generated on the fly.

Prompt ``<sudoku>3102200002100320``, reference answer ``<answer>3142243142131324</answer>``. Reward and score
follow d1 (:mod:`ddmrl.tasks.d1_scoring`): the reward is the share of empty cells filled correctly, and the
reported accuracy is d1's pooled cell accuracy over the empty cells, not the share of solved puzzles.
"""

from __future__ import annotations

import random
from functools import cache
from typing import Any

from pydantic import Field, model_validator

from ddmrl.config._base import Int, Section, refuse, section
from ddmrl.seeding import derive_seed
from ddmrl.tasks.base import Example, Task
from ddmrl.tasks.d1_scoring import sudoku_cells, sudoku_reward

__all__ = ["Sudoku4", "all_grids", "count_solutions", "is_valid_grid"]

_UNITS: tuple[tuple[int, ...], ...] = (
    *(tuple(4 * r + c for c in range(4)) for r in range(4)),  # rows
    *(tuple(4 * r + c for r in range(4)) for c in range(4)),  # columns
    *(tuple(4 * (br + r) + bc + c for r in range(2) for c in range(2)) for br in (0, 2) for bc in (0, 2)),  # boxes
)


def is_valid_grid(grid: str) -> bool:
    """True if ``grid`` is a solved 4x4 Sudoku: every row, column and 2x2 box holds 1-4 once.

    >>> is_valid_grid("3142243142131324"), is_valid_grid("1234123412341234")
    (True, False)
    """
    return len(grid) == 16 and all(sorted(grid[i] for i in unit) == ["1", "2", "3", "4"] for unit in _UNITS)


@cache
def all_grids() -> tuple[str, ...]:
    """All 288 solved 4x4 Sudoku grids, in lexicographic order (computed once)."""
    grids: list[str] = []

    def fill(cells: list[str]) -> None:
        i = len(cells)
        if i == 16:
            grids.append("".join(cells))
            return
        seen = {cells[j] for unit in _UNITS if i in unit for j in unit if j < i}
        for digit in "1234":
            if digit not in seen:
                fill([*cells, digit])

    fill([])
    return tuple(grids)


def count_solutions(puzzle: str, limit: int = 2) -> int:
    """Number of solved grids agreeing with the given (non-``0``) cells of ``puzzle``, counted up to ``limit``."""
    given = [(i, c) for i, c in enumerate(puzzle) if c != "0"]
    found = 0
    for grid in all_grids():
        if all(grid[i] == c for i, c in given):
            found += 1
            if found >= limit:
                break
    return found


@section
class Params(Section):
    """4x4 Sudoku in d1's format (``ddmrl.tasks.sudoku4``)."""

    num_empty: Int = Field(
        8, ge=1, le=12, description="Empty cells per puzzle (d1's puzzles have 8; 4 givens at least for uniqueness)."
    )
    num_empty_max: Int = Field(
        0,
        ge=0,
        le=12,
        description="0: every puzzle has num_empty blanks; else each draw takes its blanks uniformly from "
        "num_empty..num_empty_max, so levels with fewer unique puzzles come out rarer (4..12: 18 % of puzzles have 4 "
        "blanks, 0.2 % have 12); the held-out set has every level in equal shares (the tables report each level).",
    )

    @model_validator(mode="after")
    def _check(self) -> Params:
        if self.num_empty_max and self.num_empty_max < self.num_empty:
            raise refuse("num_empty_max", self.num_empty_max, f"must be 0 or >= num_empty = {self.num_empty}")
        return self


class Sudoku4(Task):
    """4x4 Sudoku with a unique solution and ``num_empty`` blanks (d1's test set uses 8), or a spread of blanks from
    ``num_empty`` to ``num_empty_max`` (an item's blanks are the ``0`` s of its id)."""

    params = Params  # its section, task_params.<name> (ddmrl.config validates it)

    name = "sudoku4"
    special_tokens = ("<sudoku>", "<answer>", "</answer>")
    alphabet = "0123456789"
    prompt_length = 17  # <sudoku> + 16 digits
    completion_length = 20  # <answer> + 16 digits + </answer> = 18, plus room for an end token

    def __init__(self, num_empty: int = 8, num_empty_max: int = 0) -> None:
        # a 4x4 Sudoku needs at least 4 givens to have a unique solution
        if not 1 <= num_empty <= 12:
            raise ValueError(f"sudoku4: num_empty must be in [1, 12], got {num_empty}")
        if num_empty_max and not num_empty <= num_empty_max <= 12:
            raise ValueError(f"sudoku4: num_empty_max must be 0 or in [{num_empty}, 12], got {num_empty_max}")
        self.num_empty, self.num_empty_max = num_empty, num_empty_max

    def sample(self, rng: random.Random) -> Example:
        grids = all_grids()
        for _ in range(10_000):
            solution = rng.choice(grids)
            # a spread draws its blanks afresh with each try (no draw at all without one: d1's fixed 8 unchanged)
            blanks = rng.randint(self.num_empty, self.num_empty_max) if self.num_empty_max else self.num_empty
            empty = set(rng.sample(range(16), blanks))
            puzzle = "".join("0" if i in empty else c for i, c in enumerate(solution))
            if count_solutions(puzzle) == 1:
                return Example(
                    id=puzzle,
                    prompt="<sudoku>" + puzzle,
                    answer="<answer>" + solution + "</answer>",
                    gold={"puzzle": puzzle, "solution": solution},
                )
        raise RuntimeError(f"sudoku4: no unique puzzle found with {self.num_empty} empty cells")

    def held_out(self, n: int, seed: int) -> list[Example]:
        """``n`` distinct puzzles drawn with ``seed``; with a spread, every number of blanks in equal shares (the
        first ``n`` mod levels levels one more), each level drawn with its own seed, so that every level has items
        however rare its unique puzzles are among the training draws."""
        if not self.num_empty_max:
            return self.generate(n, seed)
        levels = range(self.num_empty, self.num_empty_max + 1)
        per, extra = divmod(n, len(levels))
        return [
            ex
            for i, k in enumerate(levels)
            for ex in Sudoku4(k).generate(per + (i < extra), derive_seed(seed, "blanks", k))
        ]

    @staticmethod
    def item_level(item_id: str) -> str:
        """An item's difficulty level: its number of blanks (the ``0`` s of its id, its puzzle)."""
        return f"{item_id.count('0')} blanks"

    def reward(self, completion: str, example: Example) -> float:
        """d1's training reward: fraction of the empty cells right in the last ``<answer>`` block."""
        return sudoku_reward(completion, example.gold["puzzle"], example.gold["solution"])

    def score(self, completion: str, example: Example) -> dict[str, Any]:
        """d1's eval extraction; ``correct`` means every empty cell is right."""
        right, empty = sudoku_cells(completion, example.gold["puzzle"], example.gold["solution"])
        return {"correct": right == empty, "cells_correct": right, "cells_empty": empty}

    def accuracy(self, scores: list[dict[str, Any]]) -> float:
        """d1's Sudoku metric: 100 * (correct empty cells) / (empty cells), pooled over all puzzles."""
        return 100.0 * sum(s["cells_correct"] for s in scores) / max(sum(s["cells_empty"] for s in scores), 1)

    @staticmethod
    def item_score(score: dict[str, Any]) -> tuple[float, float]:
        """A puzzle's share of d1's pooled cell accuracy: (100 * correct empty cells, empty cells)."""
        return 100.0 * score["cells_correct"], float(score["cells_empty"])

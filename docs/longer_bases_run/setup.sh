#!/usr/bin/env bash
# A workspace for RUN.md's runs: a clone of this repository, the validation workspace's data/download (its validation
# items; docs/validation_run/) with the three base models replaced by longer pre-trained ones and Sudoku's items and
# generator parameters replaced, all of data/download dated after every input, so that
# `snakemake --cores all --rerun-triggers mtime` runs SFT, GRPO and the evaluations and no download stage.
#   bash docs/longer_bases_run/setup.sh VALIDATION_WS NEW_WS 'BASE_DIR_WITH_{s}' 'SUDOKU_PARAMS' LEVEL_TASK_DIR...
# SUDOKU_PARAMS is the inside of task_params.sudoku4 (e.g. 'num_empty: 12'); each LEVEL_TASK_DIR a sudoku4 folder of
# docs/difficulty_probe/make_levels.py, whose eval.jsonl files become the Sudoku items, in the order given.
set -euo pipefail
from=$1 to=$2 bases=$3 sudoku=$4
shift 4
git clone -q "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)" "$to"
mkdir -p "$to/data" && cp -r "$from/data/download" "$to/data/download"
sed -i "0,/^  sudoku4: {num_empty: 8}$/s//  sudoku4: {$sudoku}/" "$to/params.yaml"
grep -qx "  sudoku4: {$sudoku}" "$to/params.yaml" || { echo "$to/params.yaml: no line 'sudoku4: {num_empty: 8}'" >&2; exit 1; }
for s in 0 1 2; do
    cp "${bases//\{s\}/$s}"/* "$to/data/download/s$s/base/"
    dir=$to/data/download/s$s/tasks/sudoku4
    rm -rf "$dir" && mkdir "$dir"
    python -c 'import json, sys, yaml; print(json.dumps({"name": "sudoku4", "params": yaml.safe_load("{" + sys.argv[1] + "}")}, indent=2))' \
        "$sudoku" > "$dir/task.json"
    for level in "$@"; do cat "$level/eval.jsonl"; done > "$dir/eval.jsonl"
done
find "$to/data/download" -exec touch {} +

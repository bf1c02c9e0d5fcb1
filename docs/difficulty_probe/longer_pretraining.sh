#!/usr/bin/env bash
# A base model (SEED, default 2) pre-trained for longer (issue #38: does base model 2 learn Sudoku's format past
# 1,200 steps?): params.yaml with download.packaged false, download.pretrain.max_steps STEPS (the cosine schedule
# stretched to it) and no checkpoints, the download stage with --seed SEED, then the evaluate stage on the validation
# workspace's validation items (Sudoku, chain) and on make_levels.py's 4-blank Sudoku. Prints a table row. In the
# validation workspace:
#   bash docs/difficulty_probe/longer_pretraining.sh 2400 data/levels [SEED]
set -euo pipefail
steps=$1 levels=$2 seed=${3:-2}
out=data/pretrain_s${seed}_$steps
sed -e '0,/^  packaged: true$/s//  packaged: false/' -e "0,/^    max_steps: 1200$/s//    max_steps: $steps/" \
    -e '0,/^    save_steps: 200$/s//    save_steps: 0/' params.yaml > "$out.params.yaml"
for line in "  packaged: false" "    max_steps: $steps" "    save_steps: 0"; do
    grep -qx "$line" "$out.params.yaml" || { echo "$out.params.yaml: no line '$line'" >&2; exit 1; }
done
python stages/download.py --params "$out.params.yaml" --seed "$seed" --tasks-out "$out/tasks" --model-out "$out/base" \
    --metrics "$out/metrics.json" --curve "$out/curve.csv" > /dev/null 2>&1
evaluate() {  # tasks-dir task name
    python stages/evaluate.py --params params.yaml --tasks "$1" --model "$out/base" --task "$2" --name "base_$steps" \
        --generations "$out/eval/$3.jsonl" --metrics "$out/eval/$3.json" > /dev/null 2>&1
    python -c "import json; print(f\"{json.load(open('$out/eval/$3.json'))['accuracy']:.1f}\")"
}
loss=$(tail -1 "$out/curve.csv" | cut -d, -f2)
echo "| $seed | $steps | $(printf %.3f "$loss") | $(evaluate data/download/s$seed/tasks sudoku4 sudoku4) |" \
     "$(evaluate "$levels/sudoku4_e4" sudoku4 e4) | $(evaluate data/download/s$seed/tasks chain chain) |"

#!/usr/bin/env bash
# Sampled (temperature 1) accuracy of the SFT models and of the runs of the given rows on the validation items: one
# sample per item, the evaluate stage with evaluate.sampler.temperature 1.0 (params_t1.yaml), into data/evaluate_t1/.
# Run in the validation workspace after its job:  bash docs/validation_run/sampled.sh diffu_grpo unigrpo ...
set -euo pipefail
sed 's/^    temperature: 0.0$/    temperature: 1.0/' params.yaml > params_t1.yaml  # evaluate.sampler's only
cmp -s params.yaml params_t1.yaml && { echo "params.yaml: evaluate.sampler.temperature is not 0.0" >&2; exit 1; }
for s in 0 1 2; do for t in sudoku4 chain; do
    echo "data/sft/s$s/model sft_s$s $t $s"
    for row in "$@"; do echo "data/grpo/${row}_${t}_s$s/model ${row}_${t}_s$s $t $s"; done
done; done | xargs -P 2 -L 1 bash -c '[ -f data/evaluate_t1/$1/$2.json ] || python stages/evaluate.py \
    --params params_t1.yaml --tasks data/download/s$3/tasks --model $0 --task $2 --name $1 \
    --generations data/evaluate_t1/$1/$2.jsonl --metrics data/evaluate_t1/$1/$2.json > /dev/null'

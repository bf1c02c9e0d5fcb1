#!/usr/bin/env bash
# Sampled (temperature 1) accuracy of the SFT models and of the four core methods' runs on the workspace's validation
# items (data/download/s0/tasks, which every stage reads): one sample per item, the evaluate stage with
# evaluate.sampler.temperature 1.0 (params_t1.yaml), into data/evaluate_t1/. In the workspace, after its job:
#   bash docs/longer_bases_run/sampled.sh
set -euo pipefail
sed 's/^    temperature: 0.0$/    temperature: 1.0/' params.yaml > params_t1.yaml  # evaluate.sampler's only
cmp -s params.yaml params_t1.yaml && { echo "params.yaml: evaluate.sampler.temperature is not 0.0" >&2; exit 1; }
for s in 0 1 2; do for t in sudoku4 chain; do
    echo "data/sft/s$s/model sft_s$s $t"
    for row in diffu_grpo unigrpo maskgrpo rebrl; do echo "data/grpo/${row}_${t}_s$s/model ${row}_${t}_s$s $t"; done
done; done | xargs -P 2 -L 1 bash -c '[ -f data/evaluate_t1/$1/$2.json ] || python stages/evaluate.py \
    --params params_t1.yaml --tasks data/download/s0/tasks --model $0 --task $2 --name $1 \
    --generations data/evaluate_t1/$1/$2.jsonl --metrics data/evaluate_t1/$1/$2.json > /dev/null'

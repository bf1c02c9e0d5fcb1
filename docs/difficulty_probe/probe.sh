#!/usr/bin/env bash
# Greedy accuracy (d1's protocol, the evaluate stage) of the base, SFT and UniGRPO models of a main-job workspace at
# every level of make_levels.py, into data/difficulty/<model>/<level>.json. In the workspace:
#   python docs/difficulty_probe/make_levels.py data/levels && bash docs/difficulty_probe/probe.sh data/levels
set -euo pipefail
levels=$1
for s in 0 1 2; do for dir in "$levels"/*; do
    level=$(basename "$dir"); task=${level%_*}
    for model in "data/download/s$s/base base_s$s" "data/sft/s$s/model sft_s$s" \
                 "data/grpo/unigrpo_${task}_s$s/model unigrpo_s$s"; do
        echo "$model $task $level $dir"
    done
done; done | xargs -P 2 -L 1 bash -c '[ -f data/difficulty/$1/$3.json ] || python stages/evaluate.py \
    --params params.yaml --tasks $4 --model $0 --task $2 --name $1 \
    --generations data/difficulty/$1/$3.jsonl --metrics data/difficulty/$1/$3.json > /dev/null'

"""Local lm-evaluation-harness tasks for the tests of ``ddmrl.lmeval`` and the lm_eval stage: lm-eval YAML tasks over
local JSONL, built from a ddmrl task's held-out items."""

from __future__ import annotations

import json
import textwrap

UNTIL = "</answer>"


def write_tasks(folder, arith, items) -> object:
    """A GSM8K-format generation task and a multiple-choice task over ``items``, as lm-eval YAML over local JSONL."""
    gsm = folder / "gsm.jsonl"
    gsm.write_text("".join(json.dumps({"question": ex.prompt, "answer": f"...\n#### {ex.gold['answer']}"}) + "\n"
                           for ex in items))  # fmt: skip
    mc = folder / "mc.jsonl"
    wrong = [f"{(int(ex.gold['answer']) + 1) % 100:02d}" for ex in items]
    rows = [{"question": ex.prompt, "choices": [f"<answer>{ex.gold['answer']}", f"<answer>{w}", "0"], "label": 0}
            for ex, w in zip(items, wrong, strict=True)]  # fmt: skip
    mc.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "arith_gsm8k.yaml").write_text(
        textwrap.dedent(f"""\
        task: arith_gsm8k
        dataset_path: json
        dataset_kwargs:
          data_files:
            test: {gsm}
        test_split: test
        output_type: generate_until
        doc_to_text: "{{{{question}}}}"
        doc_to_target: "{{{{answer.split('####')[-1].strip()}}}}"
        generation_kwargs:
          until: ["{UNTIL}"]
          max_gen_toks: {arith.completion_length}
          do_sample: false
        filter_list:
          - name: strict-match
            filter:
              - function: regex
                regex_pattern: "<answer>\\n(\\\\d+)"
              - function: take_first
        metric_list:
          - metric: exact_match
            aggregation: mean
            higher_is_better: true
        """)
    )
    (folder / "arith_choice.yaml").write_text(
        textwrap.dedent(f"""\
        task: arith_choice
        dataset_path: json
        dataset_kwargs:
          data_files:
            test: {mc}
        test_split: test
        output_type: multiple_choice
        doc_to_text: "{{{{question}}}}"
        doc_to_choice: "{{{{choices}}}}"
        doc_to_target: "{{{{label}}}}"
        target_delimiter: ""
        metric_list:
          - metric: acc
        """)
    )
    from lm_eval.tasks import TaskManager

    return TaskManager(include_path=str(folder), include_defaults=False)

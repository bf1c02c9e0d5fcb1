# The text-to-image branch (image.tasks, MMaDA's layout): its own base model, GRPO runs, GenEval's evaluation.
# Wildcards: {task} (image.tasks), {method} (a section of image.methods), {seed} (image.seeds, else grpo.seeds),
# {bench} (image.eval_tasks: benchmarks nothing trains on).


rule download_image:
    """Embedded: geneval-mini's prompts and its own base model, MMaDA-style; paper profile: MMaDA-8B, MAGVIT-v2."""
    input: inputs("download_image")
    output: outputs("download_image")
    params: **params("download_image")
    log: log_of("download_image")
    benchmark: benchmark_of("download_image")
    conda: CONDA
    shell: SHELL


rule grpo_image:
    """One text-to-image GRPO run, from the image base model."""
    input: inputs("grpo_image")
    output: outputs("grpo_image")
    params: **params("grpo_image")
    resources: **resources("grpo_image")
    wildcard_constraints: **constraints("grpo_image")
    log: log_of("grpo_image")
    benchmark: benchmark_of("grpo_image")
    conda: CONDA
    shell: SHELL


rule evaluate_image_base:
    """The image base model with GenEval's protocol: its folder layout and its evaluator's results."""
    input: inputs("evaluate_image_base")
    output: outputs("evaluate_image_base")
    params: **params("evaluate_image_base")
    wildcard_constraints: **constraints("evaluate_image_base")
    log: log_of("evaluate_image_base")
    benchmark: benchmark_of("evaluate_image_base")
    conda: CONDA
    shell: SHELL


rule evaluate_image:
    """A text-to-image run's policy with GenEval's protocol."""
    input: inputs("evaluate_image")
    output: outputs("evaluate_image")
    params: **params("evaluate_image")
    wildcard_constraints: **constraints("evaluate_image")
    log: log_of("evaluate_image")
    benchmark: benchmark_of("evaluate_image")
    conda: CONDA
    shell: SHELL


rule evaluate_image_bench_base:
    """The image base model on a benchmark of image.eval_tasks ({bench}: HPSv3 on HPS's prompts, DPG-Bench)."""
    input: inputs("evaluate_image_bench_base")
    output: outputs("evaluate_image_bench_base")
    params: **params("evaluate_image_bench_base")
    wildcard_constraints: **constraints("evaluate_image_bench_base")
    log: log_of("evaluate_image_bench_base")
    benchmark: benchmark_of("evaluate_image_bench_base")
    conda: CONDA
    shell: SHELL


rule evaluate_image_bench:
    """A text-to-image run's policy on a benchmark of image.eval_tasks."""
    input: inputs("evaluate_image_bench")
    output: outputs("evaluate_image_bench")
    params: **params("evaluate_image_bench")
    wildcard_constraints: **constraints("evaluate_image_bench")
    log: log_of("evaluate_image_bench")
    benchmark: benchmark_of("evaluate_image_bench")
    conda: CONDA
    shell: SHELL

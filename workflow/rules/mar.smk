# The MAR branch (mar:): a masked autoregressive image model with continuous tokens on geneval-mini, its GRPO runs
# (plain GRPO or MAR-GRPO, per section of mar.sections) and GenEval's evaluation, rows of the image table.
# Wildcards: {method} (a section of mar.methods), {seed} (mar.seeds).


rule download_mar:
    """TinyMAR pre-trained from scratch on geneval-mini's reference scenes; the image branch's held-out prompts."""
    input: inputs("download_mar")
    output: outputs("download_mar")
    params: **params("download_mar")
    log: log_of("download_mar")
    benchmark: benchmark_of("download_mar")
    conda: CONDA
    shell: SHELL


rule grpo_mar:
    """One GRPO run over the MAR head's denoising transitions, from the MAR base model."""
    input: inputs("grpo_mar")
    output: outputs("grpo_mar")
    params: **params("grpo_mar")
    wildcard_constraints: **constraints("grpo_mar")
    log: log_of("grpo_mar")
    benchmark: benchmark_of("grpo_mar")
    conda: CONDA
    shell: SHELL


rule evaluate_mar_base:
    """The MAR base model with GenEval's protocol."""
    input: inputs("evaluate_mar_base")
    output: outputs("evaluate_mar_base")
    params: **params("evaluate_mar_base")
    log: log_of("evaluate_mar_base")
    benchmark: benchmark_of("evaluate_mar_base")
    conda: CONDA
    shell: SHELL


rule evaluate_mar:
    """A MAR run's model with GenEval's protocol."""
    input: inputs("evaluate_mar")
    output: outputs("evaluate_mar")
    params: **params("evaluate_mar")
    wildcard_constraints: **constraints("evaluate_mar")
    log: log_of("evaluate_mar")
    benchmark: benchmark_of("evaluate_mar")
    conda: CONDA
    shell: SHELL

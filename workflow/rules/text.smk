# The text branch: base model, SFT, rollouts and their rewards, credit, GRPO runs, held-out evaluation.
# One rule per kind of stage; wildcards: {task} (tasks), {method} (a section of grpo.methods), {seed} (grpo.seeds).


rule download:
    """Embedded: held-out sets, tokenizer, TinyDDM pre-trained from scratch; paper profiles: pinned downloads."""
    input: inputs("download")
    output: outputs("download")
    params: **params("download")
    wildcard_constraints: **constraints("download")
    log: log_of("download")
    benchmark: benchmark_of("download")
    conda: CONDA
    shell: SHELL


rule sft:
    """Masked-diffusion fine-tuning on prompt/answer pairs, the prompt never masked: the RL starting point."""
    input: inputs("sft")
    output: outputs("sft")
    params: **params("sft")
    wildcard_constraints: **constraints("sft")
    resources: **resources("sft")
    log: log_of("sft")
    benchmark: benchmark_of("sft")
    conda: CONDA
    shell: SHELL


rule rollout:
    """G samples per training prompt from the model RL starts from, with reveal steps and seeds."""
    input: inputs("rollout")
    output: outputs("rollout")
    params: **params("rollout")
    wildcard_constraints: **constraints("rollout")
    log: log_of("rollout")
    benchmark: benchmark_of("rollout")
    conda: CONDA
    shell: SHELL


rule reward:
    """The rollouts scored with the task reward: mean reward, pass@G, groups with no reward variance."""
    input: inputs("reward")
    output: outputs("reward")
    params: **params("reward")
    wildcard_constraints: **constraints("reward")
    log: log_of("reward")
    benchmark: benchmark_of("reward")
    conda: CONDA
    shell: SHELL


rule credit:
    """Per-token gradient credit of one method by the sampler step that revealed the token (RebRL Eq. 10)."""
    input: inputs("credit")
    output: outputs("credit")
    params: **params("credit")
    wildcard_constraints: **constraints("credit")
    log: log_of("credit")
    benchmark: benchmark_of("credit")
    conda: CONDA
    shell: SHELL


rule grpo:
    """One GRPO run: a method section on a task and seed, from the start model."""
    input: inputs("grpo")
    output: outputs("grpo")
    params: **params("grpo")
    resources: **resources("grpo")
    wildcard_constraints: **constraints("grpo")
    log: log_of("grpo")
    benchmark: benchmark_of("grpo")
    conda: CONDA
    shell: SHELL


rule evaluate_base:
    """The base model on a task's held-out set, d1's protocol."""
    input: inputs("evaluate_base")
    output: outputs("evaluate_base")
    params: **params("evaluate_base")
    wildcard_constraints: **constraints("evaluate_base")
    log: log_of("evaluate_base")
    benchmark: benchmark_of("evaluate_base")
    conda: CONDA
    shell: SHELL


rule evaluate_sft:
    """The SFT model on a task's held-out set."""
    input: inputs("evaluate_sft")
    output: outputs("evaluate_sft")
    params: **params("evaluate_sft")
    wildcard_constraints: **constraints("evaluate_sft")
    log: log_of("evaluate_sft")
    benchmark: benchmark_of("evaluate_sft")
    conda: CONDA
    shell: SHELL


rule evaluate:
    """A GRPO run's policy on its own task's held-out set."""
    input: inputs("evaluate")
    output: outputs("evaluate")
    params: **params("evaluate")
    wildcard_constraints: **constraints("evaluate")
    log: log_of("evaluate")
    benchmark: benchmark_of("evaluate")
    conda: CONDA
    shell: SHELL


# lm-evaluation-harness (lm_eval.tasks; off while it is empty): lm-eval's results JSON beside each model's metrics.


rule lm_eval_base:
    """lm-evaluation-harness's tasks on the base model (ddmrl.lmeval)."""
    input: inputs("lm_eval_base")
    output: outputs("lm_eval_base")
    params: **params("lm_eval_base")
    wildcard_constraints: **constraints("lm_eval_base")
    log: log_of("lm_eval_base")
    benchmark: benchmark_of("lm_eval_base")
    conda: CONDA
    shell: SHELL


rule lm_eval_sft:
    """lm-evaluation-harness's tasks on the SFT model."""
    input: inputs("lm_eval_sft")
    output: outputs("lm_eval_sft")
    params: **params("lm_eval_sft")
    wildcard_constraints: **constraints("lm_eval_sft")
    log: log_of("lm_eval_sft")
    benchmark: benchmark_of("lm_eval_sft")
    conda: CONDA
    shell: SHELL


rule lm_eval:
    """lm-evaluation-harness's tasks on a GRPO run's policy."""
    input: inputs("lm_eval")
    output: outputs("lm_eval")
    params: **params("lm_eval")
    wildcard_constraints: **constraints("lm_eval")
    log: log_of("lm_eval")
    benchmark: benchmark_of("lm_eval")
    conda: CONDA
    shell: SHELL

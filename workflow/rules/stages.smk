# One rule per ddmrl.pipeline.dag.Stage (procedural rule definition); dvc.yaml is exported from the same list.
#
# The command travels as params.cmd, not as a `shell:` expression: Snakemake evaluates the directives when the
# rule is defined, but re-evaluates a `shell:` expression when the job runs, by which time the loop variable
# `stage` is the last stage, so every job would run the last command (while `-n -p` prints the right one).
# Resources: a stage launched with `accelerate launch` (params `launch: {launcher: accelerate, ...}`) asks for
# `gpu: <num_processes>`; the SLURM profile turns that into a GPU request (workflow/profiles/slurm/config.yaml).

for stage in STAGES:

    rule:
        name:
            stage.name
        input:
            stage_inputs(stage),
        output:
            stage_outputs(stage),
        params:
            cfg=stage_params(stage),
            cmd=stage.cmd,
        threads:
            stage.threads
        resources:
            **stage_resources(stage),
        log:
            f"logs/{stage.name}.log",
        benchmark:
            f"logs/{stage.name}.benchmark.tsv"
        conda:
            "../envs/ddmrl.yaml"
        shell:
            "{params.cmd} > {log} 2>&1"

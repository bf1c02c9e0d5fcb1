# What every rule takes from the DAG (ddmrl.pipeline.dag): params.yaml is loaded and validated once, before any
# job (a bad value stops the workflow with one line naming the key); each rule is one kind of stage, and its jobs'
# commands, inputs (artifacts, script, the library files it runs) and params come from the stage the DAG builds
# for the job's wildcards. Keep logic in the package, not here.
#
# `--config profile=smoke` (or `--configfile over.yaml` for nested keys) runs with those values on top of
# params.yaml; the stages then read them from .snakemake/ddmrl/<digest of the values>/params.yaml, one folder per
# override, so that a dry run beside a running workflow never rewrites its params (ddmrl.pipeline.engines).

import json
import os
import re
import signal
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("DVC_NO_ANALYTICS", "1")
# SIGUSR1 is a training stage's request to checkpoint and stop (ddmrl.training.preempt). SLURM's
# `sbatch --signal=USR1@<s>` sends it to every process of the job's steps: the executor plugin's srun step runs a
# Snakemake, a shell and the stage, and the first two would die of it (its default action) before the stage has
# saved. Every Snakemake process of this workflow ignores it, and so do its jobs' shells, which inherit that; a
# stage that takes it (the GRPO stage) installs its own handler, the others go on (docs/distributed.md, section 4).
signal.signal(signal.SIGUSR1, signal.SIG_IGN)

from ddmrl.config import ConfigError, load
from ddmrl.pipeline import dag, engines

try:
    PARAMS = engines.params_file(config)  # params.yaml, or with `--config` / `--configfile` values on top
    CFG = load(PARAMS)
    STAGES = dag.build(CFG, PARAMS)
    dag.check_names(STAGES)
except (ConfigError, ValueError) as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(1)

KINDS = {k.name: k for k in dag.all_kinds(CFG)}
JOBS = {(s.kind, tuple(v for _, v in s.wildcards)): s for s in STAGES}
SHELL = "{params.cmd} > {log} 2>&1"


def job(kind, wildcards):
    """The stage of ``kind`` for a job's wildcards."""
    return JOBS[kind, tuple(wildcards[d.name] for d in KINDS[kind].dims)]


def pattern(kind):
    """The stage of ``kind`` with {wildcard} in place of values: the rule's output and log patterns."""
    return dag.pattern(CFG, kind, PARAMS)


def inputs(kind):
    """Artifacts, the stage script and the library files it runs (mtime triggers see code edits). Not the profile
    overlay (DVC's dep on it): the params trigger sees the values a profile sets, so that switching profiles reruns
    only the stages whose values change."""

    def stage_inputs(wildcards):
        return [p for p in dag.inputs(job(kind, wildcards)) if p != f"profiles/{CFG.profile}.yaml"]

    return stage_inputs


def outputs(kind, reports=None):
    """Output files and directories; ``reports`` maps a file name to its report() caption and category."""
    stage, reports = pattern(kind), reports or {}

    def flag(path):
        name = os.path.basename(path)
        return report(path, **reports[name]) if name in reports else path

    return [*map(flag, stage.outs + stage.metrics), *(flag(directory(d)) for d in stage.dir_outs)]


def params(kind):
    """The command line, and the params.yaml values the stage reads (a change reruns it: the params trigger). The
    trigger sees the command with params.yaml as its params file, so that a `--config` run (which passes the
    override's copy, a profile among them) reruns only the jobs whose values it changes."""

    def cmd(wildcards, threads):  # a function of threads: Snakemake runs it but leaves it out of the params trigger
        return job(kind, wildcards).cmd

    def command(wildcards):
        return job(kind, wildcards).cmd.replace(f"--params {PARAMS} ", "--params params.yaml ")

    def values(wildcards):  # the profile's name aside (DVC's params, as it reads params.yaml alone)
        read = dag.param_values(CFG, job(kind, wildcards))
        return json.dumps({k: v for k, v in read.items() if k != "profile"}, sort_keys=True)

    return {"cmd": cmd, "command": command, "values": values}


def resources(kind):
    """Scheduler resources of training launched with accelerate (``launch:``): ``gpu``, or for a stage across nodes
    (``launch.num_machines``) ``nodes``, ``tasks``, ``mpi``, ``tasks_per_gpu`` and ``gres`` (ddmrl.pipeline.dag.launch);
    a job of the kind that lacks one gets its neutral value. Per-kind cluster resources live in the profile."""
    stages = [s for s in STAGES if s.kind == kind]
    keys = dict.fromkeys(k for s in stages for k, _ in s.resources)
    neutral = {"gpu": 0, "nodes": 1, "tasks": 1, "tasks_per_gpu": 0}  # others (mpi, gres): ""

    def value(key):
        return lambda wildcards: dict(job(kind, wildcards).resources).get(key, neutral.get(key, ""))

    return {key: value(key) for key in keys}


def constraints(kind):
    """Each wildcard matches exactly the sweep's values (``params.yaml``), so rules of one layout never collide."""
    return {
        d.name: "|".join(map(re.escape, dag.values(CFG, d))) or "(?!)" for d in KINDS[kind].dims
    }


def log_of(kind):
    return f"logs/{pattern(kind).name}.log"


def benchmark_of(kind):
    return f"logs/{pattern(kind).name}.benchmark.tsv"

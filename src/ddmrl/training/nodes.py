"""One ``accelerate launch`` per node of a SLURM job: a training stage across several nodes.

    srun --nodes 2 --ntasks 2 --ntasks-per-node 1 --kill-on-bad-exit=1 \\
        python -m ddmrl.training.nodes --config_file F --num_processes 16 --num_machines 2 stages/grpo.py ...

The DAG writes this line for a stage whose ``launch.num_machines`` is above 1 (``ddmrl.pipeline.dag.launch``); the
workflow's SLURM profile submits it as one job of that many nodes (the executor plugin's ``nodes``, ``tasks`` and
``mpi`` resources: the job's command runs srun itself). srun starts this module once per node; it reads what
accelerate's multi-node options need from SLURM's environment and replaces itself with ``accelerate launch``:

* ``--machine_rank``: ``SLURM_NODEID``, the node's index in the job;
* ``--main_process_ip``: the address SLURM has for the step's first node (``NodeAddr`` of the first name of
  ``SLURM_STEP_NODELIST``, as ``scontrol`` reports it), where machine 0 listens;
* ``--main_process_port``: ``MASTER_PORT`` where set, else one derived from ``SLURM_JOB_ID`` (two jobs sharing a
  first node do not collide unless their ids are equal modulo :data:`PORTS`).

The processes' ranks are then those of one machine with all of them (node n holds ranks n x per-node to
(n + 1) x per-node - 1), so the batch shares and seeds, hence the run's figures, equal a one-node run with the same
number of processes (docs/distributed.md, section 1). SIGUSR1 (``sbatch --signal=USR1``, the stage's request to
checkpoint and stop) is ignored here before the exec, so that the launcher survives it and its workers, which
install their own handler (``ddmrl.training.preempt``), take it.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence

#: the first port derived from a job id, and how many there are
BASE_PORT, PORTS = 20000, 20000


class NotInSlurm(RuntimeError):
    """The module was started outside an srun step of a multi-node job."""


def expand_nodelist(nodelist: str) -> list[str]:
    """The host names of a SLURM node list (``n[1-2],gpu7``), as ``scontrol show hostnames`` prints them."""
    out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, check=True)
    return out.stdout.split()


def node_address(name: str) -> str:
    """The address SLURM reaches node ``name`` at (its ``NodeAddr``; the name itself where none is set)."""
    out = subprocess.run(["scontrol", "show", "node", "-o", name], capture_output=True, text=True, check=True)
    fields = dict(kv.split("=", 1) for kv in out.stdout.split() if "=" in kv)
    return fields.get("NodeAddr") or name


def machine_options(
    env: Mapping[str, str],
    num_machines: int,
    hosts: Callable[[str], list[str]] = expand_nodelist,
    address: Callable[[str], str] = node_address,
) -> list[str]:
    """accelerate's multi-node options from an srun task's environment ``env``: machine rank, main address, port.
    Raises :class:`NotInSlurm` where ``env`` is not that of one task per node of ``num_machines`` nodes."""
    need = ("SLURM_JOB_ID", "SLURM_NODEID", "SLURM_STEP_NODELIST", "SLURM_STEP_NUM_NODES")
    missing = [k for k in need if k not in env]
    if missing:
        raise NotInSlurm(
            f"launch.num_machines = {num_machines}: {', '.join(missing)} not set; a multi-node stage runs only inside "
            "a SLURM job, one srun task per node (snakemake --profile workflow/profiles/slurm)"
        )
    nodes = int(env["SLURM_STEP_NUM_NODES"])
    if nodes != num_machines or int(env.get("SLURM_STEP_NUM_TASKS", nodes)) != nodes:
        raise NotInSlurm(
            f"launch.num_machines = {num_machines}: the srun step has {nodes} nodes and "
            f"{env.get('SLURM_STEP_NUM_TASKS', '?')} tasks; it needs one task on each of {num_machines} nodes"
        )
    first = hosts(env["SLURM_STEP_NODELIST"])[0]
    port = env.get("MASTER_PORT") or str(BASE_PORT + int(env["SLURM_JOB_ID"]) % PORTS)
    return ["--machine_rank", env["SLURM_NODEID"], "--main_process_ip", address(first), "--main_process_port", port]


def accelerate_argv(argv: Sequence[str], env: Mapping[str, str], **kw) -> list[str]:
    """The ``accelerate launch`` command line of this node: ``argv`` (this module's arguments: accelerate's own
    options, with ``--num_machines``, then the script and its arguments) with the machine's options added."""
    words = list(argv)
    try:
        num_machines = int(words[words.index("--num_machines") + 1])
    except (ValueError, IndexError):
        raise NotInSlurm("python -m ddmrl.training.nodes: needs --num_machines N before the script") from None
    return ["accelerate", "launch", *machine_options(env, num_machines, **kw), *words]


def main(argv: Sequence[str] | None = None) -> None:
    """Replace this process with the node's ``accelerate launch`` (SIGUSR1 ignored across the exec)."""
    try:
        words = accelerate_argv(sys.argv[1:] if argv is None else argv, os.environ)
    except NotInSlurm as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    node = f"node {os.environ['SLURM_NODEID']} ({socket.gethostname()})"
    print(f"{node}: {' '.join(words)}", file=sys.stderr, flush=True)
    os.execv(shutil.which(words[0]) or words[0], words)


if __name__ == "__main__":
    main()

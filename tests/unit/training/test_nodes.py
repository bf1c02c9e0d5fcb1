"""ddmrl.training.nodes: accelerate's multi-node options from an srun task's SLURM environment, and the refusal
outside one (the launch itself is tested through a two-node SLURM in tests/pipeline/test_slurm_nodes.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ddmrl.training import nodes

#: what srun sets for the task on the second node of a two-node step of job 4242 (SLURM 22.05's names)
TASK = {
    "SLURM_JOB_ID": "4242",
    "SLURM_NODEID": "1",
    "SLURM_STEP_NODELIST": "ddmrl-n[1-2]",
    "SLURM_STEP_NUM_NODES": "2",
    "SLURM_STEP_NUM_TASKS": "2",
}


def hosts(nodelist: str) -> list[str]:
    assert nodelist == "ddmrl-n[1-2]"
    return ["ddmrl-n1", "ddmrl-n2"]


def address(name: str) -> str:
    return {"ddmrl-n1": "10.77.0.11", "ddmrl-n2": "10.77.0.12"}[name]


def test_the_machine_options_come_from_slurms_environment():
    opts = nodes.machine_options(TASK, 2, hosts=hosts, address=address)
    port = str(nodes.BASE_PORT + 4242 % nodes.PORTS)
    assert opts == ["--machine_rank", "1", "--main_process_ip", "10.77.0.11", "--main_process_port", port]
    # the first node's task: rank 0, the same address and port (every node agrees on them)
    first = nodes.machine_options({**TASK, "SLURM_NODEID": "0"}, 2, hosts=hosts, address=address)
    assert first[1] == "0" and first[2:] == opts[2:]
    # a port the user sets wins
    assert nodes.machine_options({**TASK, "MASTER_PORT": "29555"}, 2, hosts=hosts, address=address)[-1] == "29555"


def test_the_accelerate_line_keeps_the_options_and_the_script():
    argv = ["--config_file", "c.yaml", "--num_processes", "4", "--num_machines", "2", "stages/grpo.py", "--run", "x"]
    words = nodes.accelerate_argv(argv, TASK, hosts=hosts, address=address)
    assert words[:2] == ["accelerate", "launch"] and words[-len(argv) :] == argv
    assert words[words.index("--machine_rank") + 1] == "1"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({}, "SLURM_JOB_ID, SLURM_NODEID, SLURM_STEP_NODELIST, SLURM_STEP_NUM_NODES not set"),
        ({**TASK, "SLURM_STEP_NUM_NODES": "1", "SLURM_STEP_NUM_TASKS": "1"}, "the srun step has 1 nodes"),
        ({**TASK, "SLURM_STEP_NUM_TASKS": "4"}, "it needs one task on each of 2 nodes"),
    ],
)
def test_outside_a_step_of_one_task_per_node_it_refuses_with_the_key(env, message):
    with pytest.raises(nodes.NotInSlurm, match="^launch.num_machines = 2: ") as e:
        nodes.machine_options(env, 2, hosts=hosts, address=address)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_run_outside_slurm_the_module_exits_with_one_line():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "MASTER_"))}
    argv = [sys.executable, "-m", "ddmrl.training.nodes", "--config_file", "c.yaml", "--num_processes", "2"]
    out = subprocess.run([*argv, "--num_machines", "2", "s.py"], capture_output=True, text=True, env=env)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "error: launch.num_machines = 2: SLURM_JOB_ID, SLURM_NODEID, SLURM_STEP_NODELIST, SLURM_STEP_NUM_NODES not "
        "set; a multi-node stage runs only inside a SLURM job, one srun task per node "
        "(snakemake --profile workflow/profiles/slurm)"
    ]

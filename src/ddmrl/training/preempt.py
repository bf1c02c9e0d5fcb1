"""Stopping a training stage before a scheduler's time limit: on SIGUSR1 the stage saves a checkpoint at its next
rollout-batch boundary and exits with :data:`EXIT_CODE`, so that a retry (Snakemake's ``retries``) or a requeue
resumes it from there instead of from its last periodic checkpoint.

On SLURM, ``sbatch --signal=USR1@600`` sends SIGUSR1 to the job's processes ten minutes before its time limit
(docs/distributed.md, "Runs longer than the time limit"). Only SIGUSR1 is taken: SIGTERM and SIGINT keep their
meaning (stop now); a run killed that way resumes from its last periodic checkpoint (``save_steps``).
"""

from __future__ import annotations

import signal

#: the exit status of a stage stopped on request with its state saved (BSD's EX_TEMPFAIL: try again)
EXIT_CODE = 75
SIGNAL = signal.SIGUSR1

_received: list[int] = []


class Preempted(Exception):
    """A stage stopped on :data:`SIGNAL` after checkpointing ``step``."""

    def __init__(self, stage: str, step: int) -> None:
        super().__init__(
            f"{stage}: stopped on {signal.Signals(SIGNAL).name} after step {step}, its state saved; "
            "run the same command again to resume"
        )


def install() -> None:
    """Take :data:`SIGNAL` from now on: remember it, stop nothing (the training loop asks :func:`requested`)."""
    signal.signal(SIGNAL, lambda signum, frame: _received.append(signum))


def requested(acc=None) -> bool:
    """Whether this process, or with ``acc`` (an ``accelerate.Accelerator``) any process of the run, has received
    :data:`SIGNAL`. Collective with ``acc``: every process calls it at the same point, so that all stop together."""
    if acc is None or acc.num_processes == 1:
        return bool(_received)
    import torch

    from ddmrl.training import distributed as dist  # a distributed training loop's; every stage imports preempt

    return bool(dist.gather(acc, torch.tensor([float(bool(_received))])).any())

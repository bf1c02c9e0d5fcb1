"""Stopping a training stage before a scheduler's time limit: on SIGUSR1 the stage saves a checkpoint at its next
rollout-batch boundary and exits with :data:`EXIT_CODE`, so that a retry (Snakemake's ``retries``) or a requeue
resumes it from there instead of from its last periodic checkpoint.

On SLURM, ``sbatch --signal=USR1@600`` sends SIGUSR1 to every process of the job's steps ten minutes (to ten and a
half) before its time limit (docs/distributed.md, section 4, "24-hour clusters"). Under Snakemake's SLURM executor
plugin the stage runs in an srun step below a Snakemake process and a shell, which would die of it (the default
action) and take the step down before the stage has saved: the workflow ignores SIGUSR1 in its Snakemake processes
(workflow/rules/common.smk), the shell and the stage inherit that, and :func:`install` replaces it with the handler.
A signal that comes before :func:`install` is lost (the run goes on to the limit). ``--signal=B:USR1@600`` signals
the batch shell alone, which dies of it; do not use it. Only SIGUSR1 is taken: SIGTERM and SIGINT keep their
meaning (stop now); a run killed that way resumes from its last periodic checkpoint (``save_steps``).
"""

from __future__ import annotations

import signal
import sys
from typing import NoReturn

import torch

from ddmrl.training import distributed as dist

#: the exit status of a stage stopped on request with its state saved (BSD's EX_TEMPFAIL: try again)
EXIT_CODE = 75
SIGNAL = signal.SIGUSR1

_received: list[int] = []


class Preempted(SystemExit):
    """A stage stopped on :data:`SIGNAL` after checkpointing ``step``: a ``SystemExit`` with :data:`EXIT_CODE`, so
    that the process ends with it wherever it is raised (``message`` says what happened; :func:`stop` prints it)."""

    def __init__(self, stage: str, step: int) -> None:
        super().__init__(EXIT_CODE)
        self.message = (
            f"{stage}: stopped on {signal.Signals(SIGNAL).name} after step {step}, its state saved; "
            "run the same command again to resume"
        )


def stop(stage: str, step: int) -> NoReturn:
    """Say on stderr that ``stage`` stopped on request after ``step``, then end it with :data:`EXIT_CODE`."""
    error = Preempted(stage, step)
    print(error.message, file=sys.stderr, flush=True)
    raise error


def install() -> None:
    """Take :data:`SIGNAL` from now on, whatever the disposition inherited (ignored under the workflow): remember it,
    stop nothing (the training loop asks :func:`requested`)."""
    signal.signal(SIGNAL, lambda signum, frame: _received.append(signum))


def requested(acc=None) -> bool:
    """Whether this process, or with ``acc`` (an ``accelerate.Accelerator``) any process of the run, has received
    :data:`SIGNAL`. Collective with ``acc``: every process calls it at the same point, so that all stop together."""
    if acc is None or acc.num_processes == 1:
        return bool(_received)
    return bool(dist.gather(acc, torch.tensor([float(bool(_received))])).any())

#!/usr/bin/env bash
# A one-node SLURM on this machine for tests/pipeline/test_slurm.py: munge, slurmctld and slurmd from Debian's
# packages, no accounting (the workflow's SLURM profile polls with squeue). Idempotent: installs what is missing,
# (re)writes the configuration, starts what is not running and waits until the node is idle. Run as root (or with
# sudo). `.ci/slurm.sh stop` ends the daemons it started.
#
# The node declares more than this machine has (SlurmdParameters=config_overrides: 64 CPUs, 500 GB, 8 GPUs as a
# GRES without devices), so that the shipped profile's per-kind requests (up to 32 CPUs, 256 GB, 8 GPUs) are
# scheduled as written; nothing is enforced (no cgroups), the jobs share the real cores. Partitions `cpu` and `gpu`.
set -euo pipefail
sudo=$([ "$(id -u)" = 0 ] || echo sudo)
node=$(hostname -s)

if [ "${1:-}" = stop ]; then
    for pid in /run/slurmd.pid /run/slurmctld.pid /run/munge/munged.pid; do
        [ -f "$pid" ] && $sudo kill "$(cat "$pid")" 2>/dev/null || true
    done
    exit 0
fi

if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null; then
    $sudo apt-get update -q
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends \
        slurmctld slurmd slurm-client munge
fi

$sudo mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/munge
$sudo chown munge:munge /run/munge
# eight empty files stand for the GPUs (a GPU GRES needs one file each)
$sudo mkdir -p /run/ddmrl-fake-gpu && $sudo touch /run/ddmrl-fake-gpu/{0..7}
$sudo tee /etc/slurm/slurm.conf >/dev/null <<EOF
ClusterName=ddmrl-ci
SlurmctldHost=${node}(127.0.0.1)
AuthType=auth/munge
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
# finished jobs stay visible to squeue/scontrol for an hour (there is no accounting database to ask)
MinJobAge=3600
KillWait=5
SchedulerParameters=sched_interval=2,bf_interval=2
GresTypes=gpu
NodeName=${node} NodeAddr=127.0.0.1 CPUs=64 RealMemory=512000 Gres=gpu:8 State=UNKNOWN
PartitionName=cpu Nodes=${node} Default=YES MaxTime=INFINITE State=UP
PartitionName=gpu Nodes=${node} MaxTime=INFINITE State=UP
EOF
$sudo tee /etc/slurm/gres.conf >/dev/null <<EOF
NodeName=${node} Name=gpu File=/run/ddmrl-fake-gpu/[0-7]
EOF

running() { [ -f "$1" ] && $sudo kill -0 "$(cat "$1")" 2>/dev/null; }
running /run/munge/munged.pid || $sudo runuser -u munge -- /usr/sbin/munged
if running /run/slurmctld.pid && running /run/slurmd.pid; then
    $sudo scontrol reconfigure
else
    running /run/slurmctld.pid || $sudo slurmctld -c  # -c: no jobs from an earlier run
    running /run/slurmd.pid || $sudo slurmd -N "$node"
fi
for _ in $(seq 60); do
    state=$(sinfo -h -n "$node" -o %t 2>/dev/null | head -n1 || true)
    case "$state" in idle | mix | alloc) echo "slurm: node $node $state" && exit 0 ;; esac
    case "$state" in down* | drain*) $sudo scontrol update NodeName="$node" State=RESUME 2>/dev/null || true ;; esac
    sleep 1
done
echo "slurm: node $node not idle after 60 s (state '${state:-none}'); see /var/log/slurm/" >&2
exit 1

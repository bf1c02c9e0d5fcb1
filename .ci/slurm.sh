#!/usr/bin/env bash
# A two-node SLURM on this machine for tests/pipeline/test_slurm.py and tests/pipeline/test_slurm_nodes.py: munge,
# one slurmctld and two slurmd from Debian's packages, no accounting (the workflow's SLURM profile polls with squeue).
# Idempotent: installs what is missing, (re)writes the configuration, starts what is not running (restarting the
# daemons where the node list changed) and waits until both nodes are idle. Run as root (or with sudo).
# `.ci/slurm.sh stop` ends the daemons it started and removes the nodes' namespaces.
#
# The nodes: each slurmd runs in a network namespace of its own (ddmrl-n1, ddmrl-n2: `ip netns`), on its own address
# (10.77.0.11, 10.77.0.12) on a veth pair whose other end is on a bridge (ddmrl-br, 10.77.0.1: slurmctld's address),
# with its own host name (a UTS namespace) and `slurmd -N` naming the node. Munge's socket is a file, shared. There is
# no route out of the namespaces and no forwarding: no traffic leaves the machine. Jobs see one file system.
#
# Each node declares more than this machine has (SlurmdParameters=config_overrides: 64 CPUs, 500 GB, 8 GPUs as a
# GRES without devices), so that the shipped profile's per-kind requests (up to 32 CPUs, 256 GB, 8 GPUs) are
# scheduled as written; nothing is enforced (no cgroups), the jobs share the real cores. Partitions `cpu` and `gpu`,
# both nodes in each.
set -euo pipefail
sudo=$([ "$(id -u)" = 0 ] || echo sudo)
ctl=$(hostname -s)
nodes=(ddmrl-n1 ddmrl-n2)
net=10.77.0

stop() {
    for pid in /run/slurmd-*.pid /run/slurmd.pid /run/slurmctld.pid; do
        [ -f "$pid" ] && $sudo kill "$(cat "$pid")" 2>/dev/null || true
    done
}

if [ "${1:-}" = stop ]; then
    stop
    [ -f /run/munge/munged.pid ] && $sudo kill "$(cat /run/munge/munged.pid)" 2>/dev/null || true
    for n in "${nodes[@]}"; do $sudo ip netns del "$n" 2>/dev/null || true; done
    $sudo ip link del ddmrl-br 2>/dev/null || true
    exit 0
fi

if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null; then
    $sudo apt-get update -q
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends \
        slurmctld slurmd slurm-client munge iproute2
fi

# the network: a bridge on the host, one namespace per node with a veth into the bridge
if ! ip link show ddmrl-br >/dev/null 2>&1; then
    $sudo ip link add ddmrl-br type bridge
    $sudo ip addr add "$net.1/24" dev ddmrl-br
fi
$sudo ip link set ddmrl-br up
for i in "${!nodes[@]}"; do
    n=${nodes[$i]} addr="$net.1$((i + 1))" veth="ddmrl-v$((i + 1))"
    ip netns list | grep -qw "^$n" || $sudo ip netns add "$n"
    if ! ip link show "$veth" >/dev/null 2>&1; then
        $sudo ip link add "$veth" type veth peer name "$veth-in"
        $sudo ip link set "$veth-in" netns "$n"
        $sudo ip netns exec "$n" ip link set "$veth-in" name eth0
        $sudo ip netns exec "$n" ip addr add "$addr/24" dev eth0
    fi
    $sudo ip link set "$veth" master ddmrl-br up
    $sudo ip netns exec "$n" ip link set lo up
    $sudo ip netns exec "$n" ip link set eth0 up
    # the node's name resolves on every node (srun and the training launchers reach the first node by it)
    grep -q "^$addr $n\$" /etc/hosts || echo "$addr $n" | $sudo tee -a /etc/hosts >/dev/null
done

$sudo mkdir -p /etc/slurm /var/spool/slurmctld /var/log/slurm /run/munge
for n in "${nodes[@]}"; do $sudo mkdir -p "/var/spool/slurmd/$n"; done
$sudo chown munge:munge /run/munge
# eight empty files stand for each node's GPUs (a GPU GRES needs one file each)
$sudo mkdir -p /run/ddmrl-fake-gpu && $sudo touch /run/ddmrl-fake-gpu/{0..7}
conf=$(mktemp)
cat >"$conf" <<EOF
ClusterName=ddmrl-ci
SlurmctldHost=${ctl}(${net}.1)
AuthType=auth/munge
# job credentials live 30 s (default 120), which is also how long a requeued job waits before it runs again
AuthInfo=cred_expire=30
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd/%n
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd-%n.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
# a job on a node that fails is not requeued by SLURM (NODE_FAIL): Snakemake's retries resubmit it; sbatch --requeue
# (the plugin's slurm-requeue) makes a job requeueable (scontrol requeue, preemption)
JobRequeue=0
SlurmdParameters=config_overrides
# finished jobs stay visible to squeue/scontrol for an hour (there is no accounting database to ask)
MinJobAge=3600
KillWait=5
# a node whose slurmd stops answering is DOWN after 20 s (its jobs end NODE_FAIL), back when its slurmd registers
SlurmdTimeout=20
SchedulerParameters=sched_interval=2,bf_interval=2
GresTypes=gpu
NodeName=ddmrl-n1 NodeAddr=${net}.11 CPUs=64 RealMemory=512000 Gres=gpu:8 State=UNKNOWN
NodeName=ddmrl-n2 NodeAddr=${net}.12 CPUs=64 RealMemory=512000 Gres=gpu:8 State=UNKNOWN
PartitionName=cpu Nodes=ddmrl-n[1-2] Default=YES MaxTime=INFINITE State=UP
PartitionName=gpu Nodes=ddmrl-n[1-2] MaxTime=INFINITE State=UP
EOF
running() { [ -f "$1" ] && $sudo kill -0 "$(cat "$1")" 2>/dev/null; }
if ! cmp -s "$conf" /etc/slurm/slurm.conf; then
    stop  # another node list (the one-node SLURM of before): start afresh
    sleep 1
    $sudo cp "$conf" /etc/slurm/slurm.conf
fi
rm -f "$conf"
$sudo tee /etc/slurm/gres.conf >/dev/null <<EOF
NodeName=ddmrl-n[1-2] Name=gpu File=/run/ddmrl-fake-gpu/[0-7]
EOF

running /run/munge/munged.pid || $sudo runuser -u munge -- /usr/sbin/munged
running /run/slurmctld.pid || $sudo slurmctld -c  # -c: no jobs from an earlier run
for n in "${nodes[@]}"; do
    # in the node's network namespace (nsenter: `ip netns exec` would remount /sys and hide the cgroup file system
    # slurmd looks at), with its own host name
    running "/run/slurmd-$n.pid" ||
        $sudo nsenter --net="/run/netns/$n" unshare --uts sh -c "hostname $n && exec slurmd -N $n"
done
for _ in $(seq 60); do
    states=$(sinfo -h -N -p cpu -o "%N %t" 2>/dev/null || true)
    if [ "$(echo "$states" | grep -cE ' (idle|mix|alloc)$')" = "${#nodes[@]}" ]; then
        echo "slurm: $(echo "$states" | tr '\n' ' ')" && exit 0
    fi
    for n in $(echo "$states" | awk '$2 ~ /^(down|drain)/ {print $1}'); do
        $sudo scontrol update NodeName="$n" State=RESUME 2>/dev/null || true
    done
    sleep 1
done
echo "slurm: nodes not idle after 60 s (${states:-no answer}); see /var/log/slurm/" >&2
exit 1

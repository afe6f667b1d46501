#!/usr/bin/env bash
# A single-node SLURM cluster on this machine, for tests/test_slurm.py and for trying the
# slurm profile by hand: munged, slurmctld and slurmd on localhost, started as root without
# systemd or cgroups (Debian packages: slurm-wlm munge).
#
#   sudo tests/slurm/start_slurm.sh     start it, or check that it already runs
#   sudo tests/slurm/stop_slurm.sh      stop what this script started (--purge: remove its files)
#
# Idempotent: what already runs is left alone; it prints "started" or "already running"
# as its last line, and exits non-zero with one line saying why when it can't.
# Writes /etc/slurm/slurm.conf (where sbatch, squeue and the srun inside each job look: the
# executor plugin's job step clears SLURM_CONF) and refuses to overwrite one it didn't write.
# State, logs and pid files go to $BYTESUP_SLURM_STATE (default /var/tmp/bytesup-slurm).
set -euo pipefail

STATE=${BYTESUP_SLURM_STATE:-/var/tmp/bytesup-slurm}
CONF=/etc/slurm/slurm.conf
MARKER="# Written by llm-bytes-up tests/slurm/start_slurm.sh"
# Memory the node keeps for itself: 10 % of the machine, at least 512 MB.
HEADROOM_PERCENT=10

die() { echo "start_slurm.sh: $*" >&2; exit "${CODE:-1}"; }

missing=()
for bin in munged munge unmunge slurmctld slurmd sbatch srun squeue scontrol sinfo; do
    command -v "$bin" >/dev/null || missing+=("$bin")
done
((${#missing[@]} == 0)) || CODE=4 die "missing ${missing[*]}: apt-get install slurm-wlm munge"

if ((EUID != 0)); then
    if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
        exec sudo -n BYTESUP_SLURM_STATE="$STATE" "$0" "$@"
    fi
    CODE=2 die "must run as root (slurmd starts each job as its user); run it with sudo"
fi

if [[ -e $CONF ]] && ! grep -qxF "$MARKER" "$CONF"; then
    CODE=3 die "$CONF exists and was not written by this script; not touching a real cluster's configuration"
fi

mkdir -p "$STATE/ctld" "$STATE/slurmd" /etc/slurm

alive() { [[ -s $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

# --- munge: the key Debian's package made, or a new one -----------------------------------
if ! munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; then
    if [[ ! -s /etc/munge/munge.key ]]; then
        mkdir -p /etc/munge
        if command -v mungekey >/dev/null; then mungekey --create --keyfile=/etc/munge/munge.key
        else dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none; fi
    fi
    mkdir -p /run/munge /var/lib/munge /var/log/munge
    if id munge >/dev/null 2>&1; then
        chown munge:munge /etc/munge /etc/munge/munge.key /run/munge /var/lib/munge /var/log/munge
        chmod 0700 /etc/munge
        chmod 0600 /etc/munge/munge.key
        chmod 0755 /run/munge
        runuser -u munge -- munged --force
    else
        chmod 0600 /etc/munge/munge.key
        munged --force
    fi
    touch "$STATE/munged.started-here"
    for _ in $(seq 50); do
        munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1 && break
        sleep 0.1
    done
    munge -n </dev/null | unmunge >/dev/null || die "munged did not start: see /var/log/munge/munged.log"
fi

# --- slurm.conf: this machine's CPUs and memory, one partition `debug` --------------------
host=$(hostname -s)
cpus=$(nproc)
# slurmd's view of the hardware; keep its topology only when it agrees with the CPUs this
# process may use (a container can be given fewer CPUs than the host has).
hw=$(slurmd -C | head -1)
hw_cpus=$(sed -n 's/.* CPUs=\([0-9]*\).*/\1/p' <<<"$hw")
if [[ $hw_cpus == "$cpus" ]]; then
    topology=$(grep -o 'Boards=[0-9]* SocketsPerBoard=[0-9]* CoresPerSocket=[0-9]* ThreadsPerCore=[0-9]*' <<<"$hw" || true)
else
    topology=""
fi
mem_mb=$(sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' <<<"$hw")
limit=$(cat /sys/fs/cgroup/memory.max 2>/dev/null || echo max)
if [[ $limit =~ ^[0-9]+$ ]] && ((limit / 1048576 < mem_mb)); then mem_mb=$((limit / 1048576)); fi
headroom=$((mem_mb * HEADROOM_PERCENT / 100))
((headroom >= 512)) || headroom=512
node_mem=$((mem_mb - headroom))

new_conf=$(cat <<EOF
$MARKER
# A single-node cluster on localhost for the tests: no systemd, no cgroups, no slurmdbd.
ClusterName=bytesup
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/slurmd
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/slurmctld.log
SlurmdLogFile=$STATE/slurmd.log
# No cgroups in a container: track job processes by /proc, bind nothing.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
# No accounting database: the executor plugin asks squeue (--slurm-status-command squeue),
# which lists finished jobs for MinJobAge seconds; finished jobs are also appended to JobCompLoc.
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$STATE/jobcomp.log
MinJobAge=3600
SchedulerType=sched/backfill
# A job the node can never hold (more CPUs or memory than it has) is refused at sbatch
# instead of pending for ever.
EnforcePartLimits=ALL
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1000
ReturnToService=2
InactiveLimit=0
KillWait=10
Waittime=0
SlurmctldTimeout=30
SlurmdTimeout=60
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus ${topology:+$topology }RealMemory=$node_mem State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
)

changed=0
if [[ ! -e $CONF ]] || [[ "$(cat "$CONF")" != "$new_conf" ]]; then
    changed=1
    # A new configuration (other CPUs, memory, host name): restart what runs with the old one.
    for daemon in slurmd slurmctld; do
        if alive "$STATE/$daemon.pid"; then
            kill "$(cat "$STATE/$daemon.pid")"
            for _ in $(seq 50); do alive "$STATE/$daemon.pid" || break; sleep 0.2; done
        fi
    done
    printf '%s\n' "$new_conf" >"$CONF"
fi

started=0
if ! alive "$STATE/slurmctld.pid"; then
    slurmctld || die "slurmctld did not start: see $STATE/slurmctld.log"
    started=1
fi
for _ in $(seq 100); do scontrol ping 2>/dev/null | grep -q 'is UP' && break; sleep 0.2; done
scontrol ping | grep -q 'is UP' || die "slurmctld does not answer: see $STATE/slurmctld.log"

if ! alive "$STATE/slurmd.pid"; then
    slurmd -N "$host" || die "slurmd did not start: see $STATE/slurmd.log"
    started=1
fi

# The node must be idle (or busy) before jobs go in; a node left down by an earlier run
# is resumed once.
resumed=0
state=""
for _ in $(seq 150); do
    state=$(sinfo -h -N -n "$host" -o %t 2>/dev/null | head -1)
    case $state in
        idle|mix|alloc|comp) break ;;
        down*|drain*|drng*)
            if ((resumed == 0)); then scontrol update NodeName="$host" State=RESUME || true; resumed=1; fi ;;
    esac
    sleep 0.2
done
case $state in
    idle|mix|alloc|comp) ;;
    *) die "node $host is '$state', not idle: see $STATE/slurmd.log and $STATE/slurmctld.log" ;;
esac

if ((started || changed)); then
    echo "node $host: CPUs=$cpus RealMemory=$node_mem MB, partition debug; state and logs in $STATE"
    echo started
else
    echo "already running"
fi

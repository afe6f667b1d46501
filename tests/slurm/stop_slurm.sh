#!/usr/bin/env bash
# Stop the single-node cluster tests/slurm/start_slurm.sh started: slurmd, slurmctld, and
# munged when that script started it. Only processes named by its pid files are signalled.
#
#   sudo tests/slurm/stop_slurm.sh           stop the daemons
#   sudo tests/slurm/stop_slurm.sh --purge   also remove /etc/slurm/slurm.conf (when the start
#                                            script wrote it) and $BYTESUP_SLURM_STATE
set -euo pipefail

STATE=${BYTESUP_SLURM_STATE:-/var/tmp/bytesup-slurm}
CONF=/etc/slurm/slurm.conf
MARKER="# Written by llm-bytes-up tests/slurm/start_slurm.sh"
purge=0
[[ ${1:-} == --purge ]] && purge=1

if ((EUID != 0)); then
    if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
        exec sudo -n BYTESUP_SLURM_STATE="$STATE" "$0" "$@"
    fi
    echo "stop_slurm.sh: must run as root; run it with sudo" >&2
    exit 2
fi

stop() {  # stop NAME PIDFILE: SIGTERM, wait up to 10 s, then SIGKILL
    local name=$1 pidfile=$2 pid
    [[ -s $pidfile ]] || return 0
    pid=$(cat "$pidfile")
    if kill -0 "$pid" 2>/dev/null; then
        kill "$pid"
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
        if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid"; fi
        echo "stopped $name ($pid)"
    fi
    rm -f "$pidfile"
}

stop slurmd "$STATE/slurmd.pid"
stop slurmctld "$STATE/slurmctld.pid"
if [[ -e $STATE/munged.started-here ]]; then
    stop munged /run/munge/munged.pid
    rm -f "$STATE/munged.started-here"
fi

if ((purge)); then
    if [[ -e $CONF ]] && grep -qxF "$MARKER" "$CONF"; then rm -f "$CONF"; fi
    rm -rf "$STATE"
    echo "removed $STATE"
fi

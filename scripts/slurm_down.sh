#!/usr/bin/env bash
# Stop the single-node SLURM that scripts/slurm_up.sh started (`make slurm-down`): each daemon by the pid it wrote
# under $OSCREPRO_SLURM_DIR, in reverse start order, waiting for each to exit. Nothing else is stopped (a munged
# this script did not start has no pid file there). The state dir stays (logs); slurm-up starts from a fresh one.
set -uo pipefail

STATE=${OSCREPRO_SLURM_DIR:-/tmp/oscrepro-slurm}
status=0
for pidfile in "$STATE"/{slurmd,slurmctld,slurmdbd,mariadbd,munge/munged}.pid; do
    name=$(basename "$pidfile" .pid)
    [ -s "$pidfile" ] || continue
    pid=$(cat "$pidfile")
    if kill "$pid" 2>/dev/null; then
        for _ in $(seq 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        if kill -0 "$pid" 2>/dev/null; then
            echo "[slurm-down] $name (pid $pid) still running after 15 s" >&2
            status=1
            continue
        fi
        echo "[slurm-down] stopped $name (pid $pid)"
    fi
    rm -f "$pidfile"
done
exit $status

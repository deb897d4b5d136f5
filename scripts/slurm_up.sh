#!/usr/bin/env bash
# A single-node SLURM on this host, for the SLURM tests (tests/slurm, `make test-slurm`) and for trying the
# cluster launchers without a cluster: `make slurm-up` (this script), `make slurm-down` (scripts/slurm_down.sh).
#
# Installs Debian's slurm-wlm, slurmdbd and mariadb-server where missing (apt, as root), writes
# /etc/slurm/slurm.conf and slurmdbd.conf for this host (refusing to replace ones this script did not write),
# starts munged, mariadbd (a fresh datadir: a half-deleted one breaks slurmdbd), slurmdbd, slurmctld and slurmd,
# and waits until the node is idle. Accounting (slurmdbd) is not optional: without it `sacct` fails, and submitit
# cannot tell a cancelled job from a running one. State, logs and pid files: $OSCREPRO_SLURM_DIR
# (/tmp/oscrepro-slurm); the daemons are stopped by the pids written there.
#
# Fast turnaround for tests: AuthInfo=cred_expire=5 (a requeued job may start again 6 s after its requeue instead
# of the default 121 s) and sched_interval=2 (the scheduler pass that starts it runs every 2 s, not 60 s), so a
# requeue takes seconds; KillWait=5: a cancelled or timed-out job is killed 5 s after SIGTERM.
set -euo pipefail

STATE=${OSCREPRO_SLURM_DIR:-/tmp/oscrepro-slurm}
CONF_DIR=/etc/slurm
MARKER="# written by oscrepro scripts/slurm_up.sh"
HOST=$(hostname -s)
DB_PASS=oscrepro-local
t0=$(date +%s.%N)

say() { echo "[slurm-up] $*"; }
die() { echo "[slurm-up] $*" >&2; exit 1; }
elapsed() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$1" "$(date +%s.%N)"; }

[ "$(id -u)" = 0 ] || die "needs root (it installs packages and starts the SLURM daemons)"
if [ -f "$STATE/slurmctld.pid" ] && kill -0 "$(cat "$STATE/slurmctld.pid")" 2>/dev/null; then
    die "already up (slurmctld pid $(cat "$STATE/slurmctld.pid")); \`make slurm-down\` first"
fi

# --- packages --------------------------------------------------------------------------------------------------
missing=()
command -v slurmctld >/dev/null || missing+=(slurm-wlm)
command -v slurmdbd >/dev/null || missing+=(slurmdbd)
command -v mariadbd >/dev/null || missing+=(mariadb-server)
if [ ${#missing[@]} -gt 0 ]; then
    say "installing ${missing[*]} (apt)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
    say "installed in $(elapsed "$t0") s"
fi
t_pkg=$(date +%s.%N)

# --- config ----------------------------------------------------------------------------------------------------
for f in "$CONF_DIR/slurm.conf" "$CONF_DIR/slurmdbd.conf"; do
    if [ -e "$f" ] && ! grep -qF "$MARKER" "$f"; then
        die "$f exists and was not written by this script (a real cluster's?): not replacing it"
    fi
done
rm -rf "$STATE"
mkdir -p "$STATE"/{log,ctld,slurmd,mysql,mysql-run,munge} "$CONF_DIR" /run/munge /run/mysqld
CPUS=$(nproc)
MEM_MB=$(awk '/MemTotal/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)  # slurmd refuses a node that claims more

cat >"$CONF_DIR/slurm.conf" <<EOF
$MARKER: a single-node cluster for tests ($STATE)
ClusterName=oscrepro
SlurmctldHost=$HOST
SlurmUser=root
AuthType=auth/munge
AuthInfo=cred_expire=5
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/slurmd
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=2
ReturnToService=2
MpiDefault=none
MailProg=/bin/true
KillWait=5
MinJobAge=600
InactiveLimit=0
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=task=2
JobAcctGatherParams=OverMemoryKill
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
JobCompType=jobcomp/none
NodeName=$HOST CPUs=$CPUS RealMemory=$MEM_MB State=UNKNOWN
# a job in "urgent" preempts (requeues) the "debug" jobs it needs the CPUs of: SLURM's own preemption, for tests
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP DefMemPerCPU=$((MEM_MB / CPUS)) PriorityTier=1
PartitionName=urgent Nodes=ALL MaxTime=INFINITE State=UP DefMemPerCPU=$((MEM_MB / CPUS)) PriorityTier=2
EOF

cat >"$CONF_DIR/slurmdbd.conf" <<EOF
$MARKER
AuthType=auth/munge
DbdHost=localhost
DbdPort=6819
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=$DB_PASS
StorageLoc=slurm_acct_db
PidFile=$STATE/slurmdbd.pid
LogFile=$STATE/log/slurmdbd.log
EOF
chmod 600 "$CONF_DIR/slurmdbd.conf"  # slurmdbd refuses a config others can read (it holds the DB password)

wait_for() {  # wait_for <seconds> <what> <command...>: poll every 0.1 s
    local limit=$1 what=$2
    shift 2
    for _ in $(seq $((limit * 10))); do
        if "$@" >/dev/null 2>&1; then return 0; fi
        sleep 0.1
    done
    die "$what not up after ${limit} s; logs: $STATE/log/"
}

# --- daemons ---------------------------------------------------------------------------------------------------
if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    say "munged already running: using it (not ours to stop)"
else
    [ -s /etc/munge/munge.key ] || { mungekey --create >/dev/null 2>&1 || /usr/sbin/create-munge-key -f; }
    chown munge:munge /run/munge /etc/munge/munge.key "$STATE/munge"
    runuser -u munge -- /usr/sbin/munged --pid-file="$STATE/munge/munged.pid" --log-file="$STATE/munge/munged.log"
    wait_for 10 munged bash -c 'munge -n | unmunge'
fi

if mariadb -uroot -e "SELECT 1" >/dev/null 2>&1; then
    die "a MariaDB server already answers on /run/mysqld/mysqld.sock: stop it first"
fi
rm -f /run/mysqld/mysqld.sock  # a stale socket of a server that is gone
chown mysql:mysql "$STATE/mysql" "$STATE/mysql-run" /run/mysqld
mariadb-install-db --user=mysql --datadir="$STATE/mysql" --skip-test-db >"$STATE/log/mariadb-install.log" 2>&1
# no networking: slurmdbd reaches it through the default socket ("localhost")
mariadbd --user=mysql --datadir="$STATE/mysql" --socket=/run/mysqld/mysqld.sock --skip-networking \
    --pid-file="$STATE/mysql-run/mariadbd.pid" --log-error="$STATE/mysql-run/mariadbd.log" >/dev/null 2>&1 &
echo $! >"$STATE/mariadbd.pid"  # mariadbd does not fork: this is its pid
wait_for 30 mariadbd mariadb -uroot -e "SELECT 1"
mariadb -uroot -e "CREATE USER 'slurm'@'localhost' IDENTIFIED BY '$DB_PASS';
                   GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';"

slurmdbd
wait_for 30 slurmdbd bash -c 'exec 3<>/dev/tcp/127.0.0.1/6819'
slurmctld
wait_for 30 slurmctld scontrol ping
slurmd
wait_for 60 "an idle node" bash -c "sinfo -h -N -o %T | grep -qx idle"
say "up in $(elapsed "$t_pkg") s (packages: $(python3 -c "print(f'{$t_pkg - $t0:.1f}')") s): $(sinfo -h -N -o '%N %T %c CPUs %m MB' | sort -u)"

# Shared by the atropos_*.sbatch scripts (sourced, not run). See SLURM.md.
#
# atropos_setup                     repository, run directory, logs, the layout printed to the job log
# atropos_step NAME NODES N CMD...  start CMD as job step NAME on NODES (comma list) with N tasks per node,
#                                   output in $LOG_DIR/NAME_<node>.log (NAME_<node>_<task>.log when N > 1)
# atropos_wait_for NAME             wait until step NAME ends; its exit status
# atropos_stop NAME...              SIGTERM to the steps, in this order, each waited for (then SIGKILL
#                                   after $STOP_TIMEOUT seconds)
#
# SIGTERM/SIGINT to the batch script (scancel --batch --signal=TERM JOB, or #SBATCH --signal=B:TERM@N before
# the time limit) stops the roles in $STOP_ORDER, one after the other. A plain `scancel JOB` signals every
# step at once; the script then only waits for them (each role shuts down cleanly on its own).

: "${PYTHON:=python}"
: "${STOP_TIMEOUT:=120}"
: "${STOP_ORDER:=env trainer watcher inference api}"

declare -A ATROPOS_STEP_PID=()

atropos_log() { echo "[atropos $(date '+%F %T')] $*"; }

atropos_roles() { "$PYTHON" -m atroposlib.cli.slurm_roles "$@"; }

atropos_setup() {
    : "${ATROPOS_REPO:=${SLURM_SUBMIT_DIR:-$PWD}}"
    cd "$ATROPOS_REPO" || { echo "ATROPOS_REPO=$ATROPOS_REPO is not a directory" >&2; exit 2; }
    : "${RUN_DIR:=$ATROPOS_REPO/atropos_runs/${RUN_NAME:-$SLURM_JOB_ID}}"
    LOG_DIR="$RUN_DIR/logs"
    mkdir -p "$LOG_DIR"
    export ATROPOS_REPO RUN_DIR LOG_DIR PYTHON
    export HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-0}" TOKENIZERS_PARALLELISM="${TOKENIZERS_PARALLELISM:-false}"
    atropos_log "job $SLURM_JOB_ID, run directory $RUN_DIR"
    trap atropos_on_signal TERM INT
}

atropos_step() {
    local name=$1 nodes=$2 per_node=$3
    shift 3
    local count pattern="$LOG_DIR/${name}_%N.log"
    count=$(tr ',' '\n' <<<"$nodes" | grep -c .)
    ((per_node > 1)) && pattern="$LOG_DIR/${name}_%N_%t.log"
    srun --overlap --job-name="$name" --nodes="$count" --nodelist="$nodes" \
        --ntasks=$((count * per_node)) --ntasks-per-node="$per_node" \
        --overcommit --kill-on-bad-exit=0 --output="$pattern" "$@" &
    ATROPOS_STEP_PID[$name]=$!
    atropos_log "started $name on $nodes (srun pid $!): $*"
}

atropos_wait_for() {
    local pid=${ATROPOS_STEP_PID[$1]} rc=0
    [[ -n $pid ]] || return 0
    # `wait` returns early when a trapped signal arrives; the trap then takes over.
    wait "$pid" || rc=$?
    return $rc
}

_atropos_step_ids() {
    squeue --noheader --steps --jobs="$SLURM_JOB_ID" --format="%i %j" 2>/dev/null | awk -v n="$1" '$2 == n {print $1}'
}

atropos_stop() {
    local name pid ids waited
    for name in "$@"; do
        pid=${ATROPOS_STEP_PID[$name]}
        [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null || continue
        ids=$(_atropos_step_ids "$name")
        atropos_log "stopping $name (step ${ids:-?})"
        # Signal the step's tasks through slurmd: SIGTERM sent to srun itself would kill the step.
        [[ -n $ids ]] && scancel --signal=TERM $ids
        waited=0
        while kill -0 "$pid" 2>/dev/null && ((waited < STOP_TIMEOUT)); do
            sleep 1
            waited=$((waited + 1))
        done
        if kill -0 "$pid" 2>/dev/null; then
            atropos_log "$name still running after ${STOP_TIMEOUT}s: SIGKILL"
            [[ -n $ids ]] && scancel --signal=KILL $ids
        fi
        wait "$pid" 2>/dev/null
        atropos_log "$name stopped"
    done
}

atropos_on_signal() {
    trap '' TERM INT
    local state
    state=$(scontrol show job "$SLURM_JOB_ID" 2>/dev/null | grep -o 'JobState=[A-Z_]*')
    if [[ $state == "JobState=RUNNING" ]]; then
        atropos_log "signal received: stopping the roles in order ($STOP_ORDER)"
        # shellcheck disable=SC2086
        atropos_stop $STOP_ORDER
    else
        atropos_log "job cancelled ($state): every role got SIGTERM; waiting for them"
        wait
    fi
    atropos_log "all roles stopped"
    exit 0
}

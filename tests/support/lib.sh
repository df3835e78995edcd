# Sourced by the shell tests (tests/deploy, tests/monitoring): where they
# work and what they run, and the tiny model every one of them trains.
#
#   source "$(dirname "$0")/../support/lib.sh" NAME SOURCE_DIR BUILD_DIR
#
# Sets src, build, a fresh work directory ($build/test-scratch/NAME), py
# (Debian's python3: numpy, anndata, grpcio), ctl (scdinoctl) and
# TINY_HYPERPARAMETERS (a YAML flow mapping for train_scDINO.hyperparameters).
src=$2
build=$3
work="$build/test-scratch/$1"
rm -rf "$work"
mkdir -p "$work" "$work/textfile"
# Where scdino-preflight writes its node_exporter textfile: not the system's.
export SCDINO_TEXTFILE_DIR="$work/textfile"
py=/usr/bin/python3
ctl="$build/services/ctl/scdinoctl"
TINY_HYPERPARAMETERS="{arch: vit_tiny, embed_dim: 32, depth: 2, num_heads: 2, patch_size: 8, global_crops_size: 16,
                    local_crops_size: 8, local_crops_number: 2, out_dim: 64, head_hidden_dim: 32,
                    head_bottleneck_dim: 16, warmup_epochs: 1, drop_path_rate: 0.0}"

# submit_train NAME EXPORTS [TRAINER_FLAGS...]: sbatch deploy/slurm/train.sbatch
# with $work/NAME.yaml on 2 tasks (EXPORTS: more VAR=VALUE,... for the job,
# or ""), then waits for it (300 s at most); its output file in $out, its
# exit code in $code.
submit_train() {
  local name=$1 exports=$2 job waited=0
  shift 2
  job=$(sbatch --parsable --ntasks=2 --cpus-per-task=1 --chdir="$work" --output="$work/$name-%j.out" \
    --export=ALL,SCDINO_BIN="$build/services/trainer"${exports:+,$exports} \
    "$src/deploy/slurm/train.sbatch" "$work/$name.yaml" "$@")
  while squeue -h -j "$job" 2>/dev/null | grep -q .; do
    [ "$waited" -lt 300 ] || { echo "FAIL: job $job of $name still runs after 300 s"; scancel "$job"; exit 1; }
    sleep 1
    waited=$((waited + 1))
  done
  out="$work/$name-$job.out"
  code=$(scontrol show job "$job" 2>/dev/null | sed -n 's/.* ExitCode=\([0-9]*\):.*/\1/p')
  [ -n "$code" ] || { echo "FAIL: Slurm no longer knows job $job's exit code"; exit 1; }
}

# wait_gone JOB SECONDS: until Slurm no longer holds JOB. A requeued job is
# held for two minutes by Slurm (its begin time; the previous run's revoked
# credential must be older than the next one's): lifted to 3 s, so that a
# test of requeueing does not wait out the hold. Only a hold still more
# than 5 s away is lifted: lifting the lifted one again would push it on for
# ever (the test Slurm schedules every second, and shows BeginTime until then).
wait_gone() {
  local state begin
  for _ in $(seq 1 $(($2 * 2))); do
    state=$(squeue -h -j "$1" -o '%T %r' 2>/dev/null) || state=""
    [ -n "$state" ] || return 0
    case $state in
      *BeginTime*)
        begin=$(scontrol show job -o "$1" 2>/dev/null | sed -n 's/.* StartTime=\([0-9T:-]*\) .*/\1/p')
        if [ -n "$begin" ] && [ "$(date -d "$begin" +%s 2>/dev/null || echo 0)" -gt $(($(date +%s) + 5)) ]; then
          scontrol update JobId="$1" StartTime=now+3 >/dev/null 2>&1 || true
        fi ;;
    esac
    sleep 0.5
  done
  echo "FAIL: job $1 still in the queue after $2 s"; squeue; exit 1
}

# dependent_ended_after_failure TRAIN EVALUATION LOG: TRAIN ends FAILED (its
# output LOG shown if not), and EVALUATION, submitted after it with
# --kill-on-invalid-dep=yes, leaves the queue within 30 s instead of
# pending for ever. Prints the seconds it took.
dependent_ended_after_failure() {
  local waited=0 state
  wait_gone "$1" 300
  while squeue -h -j "$2" 2>/dev/null | grep -q .; do
    [ "$waited" -lt 30 ] || { echo "FAIL: the evaluation $2 still queued 30 s after its training failed: $(squeue -h -j "$2" -o '%T %r')"; scancel "$2"; exit 1; }
    sleep 1
    waited=$((waited + 1))
  done
  state=$(scontrol show job -o "$1" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | head -1)
  [ "$state" = JobState=FAILED ] || { cat "$3"; echo "FAIL: the training $1 ended ${state:-unknown}, not FAILED"; exit 1; }
  echo "$waited"
}

# path_without TOOL...: a PATH with every command of this one except the
# named tools (a directory of links to the rest), to test a machine that
# lacks them whether or not this one has them.
path_without() {
  local dir d f skip
  dir=$(mktemp -d "$work/path-without.XXXXXX")
  IFS=: read -r -a dirs <<<"$PATH"
  for d in "${dirs[@]}"; do
    [ -d "$d" ] || continue
    for f in "$d"/*; do
      [ -x "$f" ] && [ ! -d "$f" ] || continue
      skip=0
      for t in "$@"; do [ "${f##*/}" = "$t" ] && skip=1; done
      [ "$skip" = 1 ] || [ -e "$dir/${f##*/}" ] || ln -s "$f" "$dir/${f##*/}"
    done
  done
  echo "$dir"
}

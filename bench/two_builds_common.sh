# Shared by bench/bitwise_layouts.sh and bench/ckpt_across_builds.sh (sourced after C is set):
# `run BINARY DIR RANKS KEY=VALUE...` trains C and the keys with BINARY on RANKS ranks (one thread each, MPI
# oversubscribed beyond the cores) into DIR, its log beside it as DIR.log; returns the run's exit status.
run() {
  local bin=$1 dir=$2 n=$3
  shift 3
  if [ "$n" = 1 ]; then
    "$bin" train $C "$@" train.out_dir="$dir" > "$dir.log" 2>&1
  else
    mpirun -np "$n" --oversubscribe --bind-to none "$bin" train $C comm.backend=mpi "$@" train.out_dir="$dir" \
      > "$dir.log" 2>&1
  fi
}

#!/usr/bin/env bash
# A process whose environment says it is one of several launched tasks, but
# which was started alone (srun without a PMI, a copied job script, a
# backend that runs one rank), must stop with an error naming the variables
# it saw and a non-zero exit code, and never train alone.
# Usage: alone_task.sh PARALLM INPUT_TEXT
# shellcheck source-path=SCRIPTDIR source=../lib.sh
. "$(dirname "$0")/../lib.sh"
parallm=$1
input=$2
"$parallm" prepare char --input "$input" --out "$work/data" >/dev/null || fail "prepare"
tiny=(model.n_layer=1 model.n_head=2 model.n_embd=16 model.block_size=16 model.batch_size=2 train.eval_iters=1
  train.progress=false train.sample_tokens=0 train.max_iters=3 "data.dir=$work/data" "train.out_dir=$work/run")
expect() {  # "VAR=value ...", extra train argument, the error's text
  local vars=$1 arg=$2 text=$3 out rc
  # Only the variables given: none inherited from a launcher this test may itself run under.
  local clean=() v
  for v in $(env | sed -n 's/^\(SLURM_[A-Z_]*\|OMPI_[A-Z_]*\|PMIX_[A-Z_]*\|PMI_[A-Z_]*\|PALS_[A-Z_]*\|MPI_LOCAL[A-Z_]*\)=.*/\1/p'); do
    case $v in OMPI_ALLOW_RUN_AS_ROOT*|OMPI_MCA_*) ;; *) clean+=(-u "$v") ;; esac
  done
  out=$(env "${clean[@]}" $vars "$parallm" train "${tiny[@]}" $arg 2>&1)
  rc=$?
  [ $rc != 0 ] || fail "$vars $arg: exit code 0"
  echo "$out" | grep -Fq "$text" || { echo "$out" | tail -5; fail "$vars $arg: no error saying \"$text\""; }
  ! echo "$out" | grep -q '^iter ' || fail "$vars $arg: it trained"
  [ ! -e "$work/run/metrics.jsonl" ] || fail "$vars $arg: it wrote a run"
  echo "alone_task: $vars $arg: exit code $rc: $(echo "$out" | grep -F "$text" | cut -c1-140)..."
}
expect "SLURM_NTASKS=2 SLURM_PROCID=1" "" "task 1 of 2 of a launched job (SLURM_PROCID=1, SLURM_NTASKS=2), but the mpi backend started a world of 1 rank"
expect "PMI_SIZE=2 PMI_RANK=1" "" "task 1 of 2 of a launched job (PMI_RANK=1, PMI_SIZE=2), but the mpi backend started a world of 1 rank"
expect "SLURM_STEP_ID=0 SLURM_PROCID=0 SLURM_STEP_NUM_TASKS=2" "" "srun gave it no PMI"
expect "SLURM_NTASKS=2 SLURM_PROCID=1" comm.backend=self "backend self runs one rank alone, but this process is task 1 of 2 of a launched job (SLURM_PROCID=1, SLURM_NTASKS=2)"
echo "alone_task: PASS"

#!/bin/bash
# Issue 45 ("checkpoints written before the change load after it, at any layout"): the OLD build trains a small
# GPT (dropout on) at each source layout and saves; each checkpoint is then resumed at each destination layout
# (the layout changed on resume: resharding) once by the OLD build and once by the NEW one, for RESUME more steps.
# Per pair, the two resumed runs' train and eval records (results, not timings) must be equal as JSON values: the
# new build reads the old files as the old build does, at any layout.
# usage: bench/ckpt_across_builds.sh OLD_PARALLM NEW_PARALLM [steps before the save (20)] [steps after (10)]
# Prints one line per (source, destination) pair (SAME or DIFFERS with the first difference); exits 1 if any
# differs or fails. Runs are serial, one thread a rank; OUT (default out/ckpt_across) keeps every run.
set -u
OLD=$(realpath "$1") NEW=$(realpath "$2")
STEPS=${3:-20}
RESUME=${4:-10}
OUT=$(realpath -m "${OUT:-out/ckpt_across}")
DATA=$OUT/data
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
rm -rf "$OUT"
mkdir -p "$OUT"
INPUT=${INPUT:-$(dirname "$0")/../../shared/data/tinyshakespeare/input.txt}
"$NEW" prepare shakespeare_char --input "$INPUT" --out "$DATA" > /dev/null || { echo "prepare failed"; exit 1; }
C="data.dir=$DATA model.n_layer=4 model.n_head=4 model.n_embd=64 model.block_size=64 model.dropout=0.1 model.bias=true
   model.batch_size=4 optimizer.gas=4 train.eval_interval=5 train.eval_iters=2 train.log_interval=1000
   train.sample_tokens=0 train.progress=false train.threads=1 train.keep_checkpoints=1 train.checkpoint_interval=0
   train.seed=1337"
# name ranks keys... (every layout key given, so a resume at another layout says so)
LAYOUTS=(
  "one 1 parallel.tp=1 parallel.sequence_parallel=false parallel.pp=1 parallel.cp=1 zero.stage=0"
  "zero3 2 parallel.tp=1 parallel.sequence_parallel=false parallel.pp=1 parallel.cp=1 zero.stage=3"
  "tp2sp 2 parallel.tp=2 parallel.sequence_parallel=true parallel.pp=1 parallel.cp=1 zero.stage=0"
  "pp2 2 parallel.tp=1 parallel.sequence_parallel=false parallel.pp=2 parallel.pp_schedule=1f1b parallel.cp=1 zero.stage=0"
  "cp2 2 parallel.tp=1 parallel.sequence_parallel=false parallel.pp=1 parallel.cp=2 parallel.cp_kind=ring zero.stage=0"
  "dp2tp2pp2 8 parallel.tp=2 parallel.sequence_parallel=false parallel.pp=2 parallel.cp=1 zero.stage=0"
)
# shellcheck source=two_builds_common.sh
. "$(dirname "$0")/two_builds_common.sh"
COMPARE='import json, sys, os
RESULTS = {"kind", "step", "batch", "loss", "lr", "grad_norm", "train_loss", "val_loss", "loss_scale", "skipped"}
def records(d):
    return [{k: v for k, v in json.loads(l).items() if k in RESULTS}
            for l in open(os.path.join(d, "metrics.jsonl")) if json.loads(l).get("kind") in ("train", "eval")]
a, b = records(sys.argv[1]), records(sys.argv[2])
d = ""
if len(a) != len(b): d = f"{len(a)} records, {len(b)} by the new build"
elif not any(r["kind"] == "train" and r["step"] >= int(sys.argv[3]) for r in a): d = "no step after the resume"
else:
    for x, y in zip(a, b):
        if x != y:
            k = next(k for k in sorted(set(x) | set(y)) if x.get(k) != y.get(k))
            d = "%s step %s: %s %r vs %r" % (x.get("kind"), x.get("step"), k, x.get(k), y.get(k)); break
print("DIFFERS: " + d if d else "SAME")
sys.exit(1 if d else 0)'
bad=0
for src in "${LAYOUTS[@]}"; do
  read -r sname sn skeys <<< "$src"
  # shellcheck disable=SC2086
  run "$OLD" "$OUT/src_$sname" "$sn" $skeys train.max_iters=$((STEPS - 1)) ||
    { echo "$sname: the old build's run failed (see $OUT/src_$sname.log)"; bad=1; continue; }
  for dst in "${LAYOUTS[@]}"; do
    read -r dname dn dkeys <<< "$dst"
    for who in old new; do
      dir=$OUT/${sname}_to_${dname}_$who
      cp -r "$OUT/src_$sname" "$dir"
      bin=$([ $who = old ] && echo "$OLD" || echo "$NEW")
      # shellcheck disable=SC2086
      run "$bin" "$dir" "$dn" $dkeys train.init_from=resume train.max_iters=$((STEPS + RESUME - 1)) ||
        { echo "$sname -> $dname: the $who build's resume failed (see $dir.log)"; bad=1; continue 2; }
    done
    verdict=$(python3 -c "$COMPARE" "$OUT/${sname}_to_${dname}_old" "$OUT/${sname}_to_${dname}_new" "$STEPS") || bad=1
    printf '%-10s -> %-10s %s\n' "$sname" "$dname" "$verdict"
  done
done
exit $bad

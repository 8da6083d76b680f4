#!/bin/bash
# Issue 45 ("results unchanged, bitwise"): the same runs by two parallm builds, compared bit for bit. Each layout of
# the issue's list trains a small GPT (dropout on) for STEPS steps with the OLD and the NEW binary; then, per layout:
#   - every train and eval record of metrics.jsonl: its results (step, batch, loss, lr, grad_norm, train_loss,
#     val_loss; not the timings and communication figures) equal, as JSON values;
#   - the last step checkpoint and ckpt/: every data file byte for byte (whatever the layout wrote); state.json equal but for its
#     "format", "state_crc32", train.out_dir and config keys one of the builds does not have.
# usage: bench/bitwise_layouts.sh OLD_PARALLM NEW_PARALLM [steps (200)] [layout name regex (all)]
#   git worktree add /tmp/before <commit> && (cd /tmp/before && cmake -S . -B build -G Ninja && cmake --build build)
#   bench/bitwise_layouts.sh /tmp/before/build/parallm build/parallm
# Prints one line per layout (BITWISE or DIFFERS with the first difference) and exits 1 if any differs or fails.
# Runs are serial, one thread a rank (up to 8 ranks, oversubscribed); OUT (default out/bitwise) keeps every run.
set -u
OLD=$(realpath "$1") NEW=$(realpath "$2")
STEPS=${3:-200}
ONLY=${4:-.}
OUT=$(realpath -m "${OUT:-out/bitwise}")
DATA=$OUT/data
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
rm -rf "$OUT"
mkdir -p "$OUT/old" "$OUT/new"
INPUT=${INPUT:-$(dirname "$0")/../../shared/data/tinyshakespeare/input.txt}
"$NEW" prepare shakespeare_char --input "$INPUT" --out "$DATA" > /dev/null || { echo "prepare failed"; exit 1; }
# Vocabulary 65 (no degree divides it), 4 layers, 4 heads, dropout 0.1, gas 4 (interleaved pp 2 needs a multiple).
C="data.dir=$DATA model.n_layer=4 model.n_head=4 model.n_embd=64 model.block_size=64 model.dropout=0.1 model.bias=true
   model.batch_size=4 optimizer.gas=4 train.max_iters=$((STEPS - 1)) train.eval_interval=50 train.eval_iters=2
   train.log_interval=1000 train.sample_tokens=0 train.progress=false train.threads=1 train.keep_checkpoints=1
   train.checkpoint_interval=0 train.seed=1337"
# name ranks keys...
LAYOUTS=(
  "one 1"
  "ddp2 2"
  "det2 2 ddp.deterministic=true"
  "det1x2shards 1 ddp.deterministic=true ddp.shards=2"
  "zero1 2 zero.stage=1"
  "zero2 2 zero.stage=2"
  "zero3 2 zero.stage=3"
  "zero2_offload 2 zero.stage=2 zero.offload=optimizer"
  "zero3_offload 2 zero.stage=3 zero.offload=params"
  "tp2 2 parallel.tp=2"
  "tp2sp 2 parallel.tp=2 parallel.sequence_parallel=true"
  "tp4 4 parallel.tp=4"
  "pp2_gpipe 2 parallel.pp=2 parallel.pp_schedule=gpipe"
  "pp2_1f1b 2 parallel.pp=2 parallel.pp_schedule=1f1b"
  "pp2_interleaved 2 parallel.pp=2 parallel.pp_schedule=interleaved parallel.pp_virtual=2"
  "pp2_zbh1 2 parallel.pp=2 parallel.pp_schedule=zb-h1"
  "cp2_ring 2 parallel.cp=2 parallel.cp_kind=ring"
  "cp2_ulysses 2 parallel.cp=2 parallel.cp_kind=ulysses"
  "dp2tp2pp2 8 parallel.tp=2 parallel.pp=2"
  "recompute_full 1 model.recompute=full"
  "zero1tp2 4 zero.stage=1 parallel.tp=2"
  "zero3tp2 4 zero.stage=3 parallel.tp=2"
  "zero1pp2 4 zero.stage=1 parallel.pp=2"
)
# shellcheck source=two_builds_common.sh
. "$(dirname "$0")/two_builds_common.sh"
COMPARE='import json, sys, filecmp, os
old, new = sys.argv[1], sys.argv[2]
RESULTS = {"kind", "step", "batch", "loss", "lr", "grad_norm", "train_loss", "val_loss", "loss_scale", "skipped"}
def records(d):
    out = []
    for line in open(os.path.join(d, "metrics.jsonl")):
        j = json.loads(line)
        if j.get("kind") in ("train", "eval"):
            out.append({k: v for k, v in j.items() if k in RESULTS})
    return out
def first_difference():
    a, b = records(old), records(new)
    if len(a) != len(b): return f"metrics: {len(a)} records, {len(b)} after"
    for x, y in zip(a, b):
        if x != y:
            k = next(k for k in sorted(set(x) | set(y)) if x.get(k) != y.get(k))
            kind, step = x.get("kind"), x.get("step")
            return f"metrics: {kind} step {step}: {k} {x.get(k)!r} vs {y.get(k)!r}"
    steps = sorted(d for d in os.listdir(old) if d.startswith("ckpt-"))
    for c in [steps[-1] if steps else None, "ckpt"]:
        if c is None: return "no step checkpoint"
        files, after = (sorted(f for f in os.listdir(os.path.join(d, c)) if f != "state.json") for d in (old, new))
        if files != after: return f"{c}: files {files}, after {after}"
        for f in files:
            if not filecmp.cmp(os.path.join(old, c, f), os.path.join(new, c, f), shallow=False):
                return f"{c}/{f} differs"
        s, t = (json.load(open(os.path.join(d, c, "state.json"))) for d in (old, new))
        for j in (s, t):
            j.pop("format", None); j.pop("state_crc32", None)
        shared = (set(s["config"]) & set(t["config"])) - {"train.out_dir"}
        s["config"] = {k: s["config"][k] for k in shared}; t["config"] = {k: t["config"][k] for k in shared}
        if s != t:
            k = next(k for k in sorted(set(s) | set(t)) if s.get(k) != t.get(k))
            return f"{c}/state.json: {k} differs"
    return ""
d = first_difference()
print("DIFFERS: " + d if d else "BITWISE")
sys.exit(1 if d else 0)'
bad=0
for l in "${LAYOUTS[@]}"; do
  read -r name n keys <<< "$l"
  [[ $name =~ $ONLY ]] || continue
  # shellcheck disable=SC2086
  if ! run "$OLD" "$OUT/old/$name" "$n" $keys; then echo "$name: the old build failed (see $OUT/old/$name.log)"; bad=1; continue; fi
  # shellcheck disable=SC2086
  if ! run "$NEW" "$OUT/new/$name" "$n" $keys; then echo "$name: the new build failed (see $OUT/new/$name.log)"; bad=1; continue; fi
  verdict=$(python3 -c "$COMPARE" "$OUT/old/$name" "$OUT/new/$name") || bad=1
  printf '%-16s %d rank(s) %-60s %s\n' "$name" "$n" "$keys" "$verdict"
done
exit $bad

#!/bin/bash
# Issue 34 item 7: the numeric detector's cost (train.detect_anomaly=true against false) on one CPU process with
# the machine's threads, as a user runs it. Two configs: (a) nanoGPT's CPU config (the README's main job: 4 layers,
# 4 heads, 128 wide, block 64, batch 12) and (b) baby GPT's model (6 layers, 6 heads, 384 wide, block 256) at batch
# 8 (the checks scale with the tokens as the compute does, so the batch barely moves the ratio; 64 would take ~10 s
# a step here). Runs alternate off and on, R rounds each; a run's step time is the median dt_ms of its steps from
# the third on; printed per config: the median step time off and on over the rounds, their ratio, the median of the
# rounds' ratios and the ratio of the fastest runs.
# usage: bench/detect_cost.sh [parallm] [out dir] [data dir] [rounds]   (about 1.5 minutes a round on 2 cores)
set -u
B=${1:-build/parallm}; O=${2:-out/detect_cost}; DATA=${3:-data/shakespeare_char}; R=${4:-3}
rm -rf $O; mkdir -p $O
[ -d $DATA ] || $B prepare shakespeare_char --input ../shared/data/tinyshakespeare/input.txt --out $DATA >/dev/null
COMMON="train.eval_interval=100000 train.eval_iters=1 train.final_eval=false train.sample_tokens=0 train.progress=false train.peak_flops=1e11 data.dir=$DATA"
A="model.n_layer=4 model.n_head=4 model.n_embd=128 model.block_size=64 model.batch_size=12 train.max_iters=60"
BB="model.n_layer=6 model.n_head=6 model.n_embd=384 model.block_size=256 model.batch_size=8 train.max_iters=12"
for r in $(seq 1 $R); do
  for cfg in a b; do
    keys=$A; [ $cfg = b ] && keys=$BB
    for on in false true; do
      $B train $keys $COMMON train.detect_anomaly=$on train.out_dir=$O/${cfg}_${on}_$r >$O/${cfg}_${on}_$r.log 2>&1 ||
        { echo "FAILED ${cfg}_${on}_$r"; tail -3 $O/${cfg}_${on}_$r.log; }
    done
  done
done
python3 - $O $R <<'PY'
import json, statistics, sys
O, R = sys.argv[1], int(sys.argv[2])
def step_ms(run):
    recs = [json.loads(l) for l in open(f"{O}/{run}/metrics.jsonl")]
    return statistics.median(r["dt_ms"] for r in recs if r.get("kind") == "train" and r["step"] >= 2)
print(f"{'config':34s} {'off ms/step':>11s} {'on ms/step':>11s} {'on/off':>7s} {'median':>7s} {'best':>7s}   per round on/off")
for cfg, name in [("a", "(a) 4/4/128, block 64, batch 12"), ("b", "(b) 6/6/384, block 256, batch 8")]:
    off = [step_ms(f"{cfg}_false_{r}") for r in range(1, R + 1)]
    on = [step_ms(f"{cfg}_true_{r}") for r in range(1, R + 1)]
    ratios = [b / a for a, b in zip(off, on)]
    rounds = " ".join(f"{x:.3f}" for x in ratios)
    print(f"{name:34s} {statistics.median(off):11.2f} {statistics.median(on):11.2f} "
          f"{statistics.median(on) / statistics.median(off):7.3f} {statistics.median(ratios):7.3f} "
          f"{min(on) / min(off):7.3f}   {rounds}")
print("on/off: ratio of the medians; median: of the rounds' ratios; best: of the fastest runs (this shared machine "
      "runs whole processes at two speeds, ~35 and ~60 ms a step on (a), so a round can compare one speed with the other)")
PY

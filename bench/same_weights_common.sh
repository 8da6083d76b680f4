# Shared by bench/moe_norm_same_weights.sh and bench/lowp_same_weights.sh (sourced after
# equivalence_common.sh, with a one-rank run in $O/$1 that saved a checkpoint after every step):
#   same_weights ONE "STEPS" "LAYOUTS"
# For each step s of STEPS and each layout NAME:RANKS:KEY=VALUE,KEY=VALUE of LAYOUTS, a run directory
# $O/NAME_at<s> holding ONE's settings and its checkpoint from before step s, resumed in the layout for step s
# alone (its checkpoints removed after: its records are what is read); then a table per quantity (train loss,
# gradient norm) of each layout's relative difference from ONE at each step, and the worst of each (a step
# both skipped for an overflow counts as equal; a record missing on one side as infinitely far).
same_weights() {
  local one=$1 steps=$2 layouts=$3 s l name n keys d
  for s in $steps; do
    for l in $layouts; do
      IFS=: read -r name n keys <<< "$l"
      d=$O/${name}_at$s
      mkdir -p $d && cp $O/$one/config.json $O/$one/meta.json $d/ && cp -r $O/$one/ckpt-$(printf %08d $s) $d/
      run $n ${name}_at$s ${keys//,/ } train.init_from=resume train.max_iters=$s
      rm -rf $d/ckpt-*
    done
  done
  same_weights_table "$one" "$steps" "$layouts"
}
# The tables alone, from the runs same_weights made.
same_weights_table() {
  python3 - $O "$1" "$2" "$3" <<'PY'
import json, sys
O, one, steps = sys.argv[1], sys.argv[2], [int(s) for s in sys.argv[3].split()]
layouts = [l.split(":")[0] for l in sys.argv[4].split()]
def rec(d, s):
    r = None
    try:
        for l in open(f"{O}/{d}/metrics.jsonl"):
            j = json.loads(l)
            if j.get("kind") == "train" and j["step"] == s: r = j
    except OSError:
        pass
    return r
rel = lambda a, b: abs(a - b) / abs(b)
wide = len(steps) > 12  # every step: each layout's worst and where, not a column per step
for key, what in (("loss", "train loss"), ("grad_norm", "gradient norm")):
    print(f"{what}: relative difference from {one}'s weights at each step ({len(steps)} steps)")
    if not wide: print(f"  {'layout':14s} " + " ".join(f"{s:>8d}" for s in steps))
    worst = 0.0
    for name in layouts:
        ds = []
        for s in steps:
            a, b = rec(f"{name}_at{s}", s), rec(one, s)
            if a is not None and b is not None and key not in a and key not in b and a["skipped"] and b["skipped"]:
                ds.append(0.0)  # an overflow both skipped (fp16's dynamic scale): no norm written, alike
                continue
            ds.append(float("inf") if a is None or b is None or key not in a or key not in b else rel(a[key], b[key]))
        worst = max(worst, max(ds))
        if wide:
            k = max(range(len(ds)), key=lambda i: ds[i])
            print(f"  {name:14s} max {ds[k]:.3g} (step {steps[k]}), median {sorted(ds)[len(ds) // 2]:.3g}, "
                  f"over 1e-6 at {sum(d > 1e-6 for d in ds)} steps")
        else:
            print(f"  {name:14s} " + " ".join(f"{d:8.2g}" for d in ds))
    print(f"  worst {worst:.3g}")
PY
}

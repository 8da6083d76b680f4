#!/bin/bash
# Issue 47 acceptance (a comparison, not a timed test): 100 steps of a small MoE Llama (8 experts top-2, SwiGLU
# experts 32 wide, aux loss 0.01, z-loss 0.001, vocabulary 65, dropout 0.1) in each expert-parallel layout against
# one rank with the same global batch: ep 2 and ep 4, ep 2 with dp 4 (DDP, ZeRO 1, ZeRO 3), tp 2, pp 2 and cp 2;
# per run the max relative train-loss difference (first 50 steps, bar 1e-5; all 100, bar 1e-4), the gradient
# norm's, whether every token's choices (the records' moe_choices: every MoE layer, the global batch) equal one
# rank's at steps 0 and 99 and the first step where they differ, and the same for the tokens per expert.
# usage: bench/moe_equivalence.sh [parallm] [out dir] [data dir]   (about a minute on 2 cores)
set -u
B=${1:-build/parallm}; O=${2:-out/moe_equivalence}; DATA=${3:-data/shakespeare_char}
C="model.arch=llama model.n_layer=3 model.n_head=4 model.n_kv_head=2 model.n_embd=64 model.head_dim=16
   model.intermediate_size=96 model.moe_experts=8 model.moe_top_k=2 model.moe_intermediate_size=32
   model.moe_aux_coef=0.01 model.moe_z_coef=0.001 model.block_size=64 model.dropout=0.1 train.eval_interval=50
   train.eval_iters=5 train.peak_flops=1e11 train.sample_tokens=0 data.dir=$DATA train.progress=false
   train.log_interval=50 train.max_iters=99"
. "$(dirname "$0")/equivalence_common.sh"
run 1 one model.batch_size=8
run 2 ep2 model.batch_size=4 parallel.ep=2
run 4 ep4 model.batch_size=2 parallel.ep=4
run 4 ep2_dp4 model.batch_size=2 parallel.ep=2
run 4 ep2_dp4_zero1 model.batch_size=2 parallel.ep=2 zero.stage=1
run 4 ep2_dp4_zero3 model.batch_size=2 parallel.ep=2 zero.stage=3
run 4 ep2_tp2 model.batch_size=4 parallel.ep=2 parallel.tp=2
run 4 ep2_pp2 model.batch_size=4 parallel.ep=2 parallel.pp=2
run 4 ep2_cp2 model.batch_size=4 parallel.ep=2 parallel.cp=2
python3 - $O <<PY
$LOSSES
def field(d, k):
    r={}
    for l in open(f"{O}/{d}/metrics.jsonl"):
        j=json.loads(l)
        if j.get("kind")=="train": r[j["step"]]=j[k]
    return r
runs=["ep2","ep4","ep2_dp4","ep2_dp4_zero1","ep2_dp4_zero3","ep2_tp2","ep2_pp2","ep2_cp2"]
vs_one(runs, 100, 8)
g1=field("one","grad_norm"); t1=field("one","moe_tokens"); c1=field("one","moe_choices")
def same(a, b, what):
    diff=[s for s in sorted(b) if a[s]!=b[s]]
    last=max(b)
    return (f"{what} at steps 0/{last} {'same' if a[0]==b[0] else 'DIFFER'}/{'same' if a[last]==b[last] else 'differ'}, "
            + ("every step" if not diff else f"first differ at step {diff[0]} ({len(diff)} of {len(b)})"))
for d in runs:
    g=field(d,"grad_norm")
    over=[s for s in sorted(g1) if rel(g[s],g1[s])>1e-6]
    print(f"{d:14s} grad norm: max rel diff {max(rel(g[s],g1[s]) for s in g1):.3g} (step 0: {rel(g[0],g1[0]):.3g}, "
          f"step {max(g1)}: {rel(g[max(g1)],g1[max(g1)]):.3g}, over 1e-6 at steps {over}); "
          + same(field(d,"moe_choices"), c1, "choices") + "; " + same(field(d,"moe_tokens"), t1, "tokens per expert"))
PY

# Shared by bench/tp_equivalence.sh and bench/pp_equivalence.sh (sourced after B, O, DATA and C are set):
# the dataset, the launcher, `run N NAME KEY=VALUE...` (a run of C and the keys on N ranks into $O/NAME, its log
# beside it; a failure is reported, not fatal) and LOSSES, Python defining losses(run) = {step: train loss},
# vs_one(runs, steps, width) (each run's max relative train-loss difference against the run "one": over the first
# 50 steps, bar 1e-5, and all `steps`, bar 1e-4) and vs_full(runs, first, width) (resumed runs against the
# uninterrupted run "full" from step `first`, bar 1e-5).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
rm -rf $O; mkdir -p $O
[ -d $DATA ] || $B prepare shakespeare_char --input ../shared/data/tinyshakespeare/input.txt --out $DATA >/dev/null
M="mpirun --oversubscribe --bind-to none"
LOSSES='import json,sys
O=sys.argv[1]
def losses(d):
    r={}
    for l in open(f"{O}/{d}/metrics.jsonl"):
        j=json.loads(l)
        if j.get("kind")=="train": r[j["step"]]=j["loss"]
    return r
rel=lambda a,b: abs(a-b)/abs(b)
def vs_one(runs, steps, width):
    one=losses("one")
    for d in runs:
        x=losses(d)
        m50=max(rel(x[s],one[s]) for s in one if s<50); m=max(rel(x[s],one[s]) for s in one)
        print(f"{d:{width}s} steps {len(x)}: max rel train-loss diff vs 1 rank: first 50 {m50:.3g} (<=1e-5: {m50<=1e-5}), all {steps} {m:.3g} (<=1e-4: {m<=1e-4})")
def vs_full(runs, first, width):
    full=losses("full")
    for d in runs:
        x=losses(d); steps=sorted(s for s in x if s>=first)
        m=max(rel(x[s],full[s]) for s in steps)
        print(f"{d:{width}s} steps {steps[0]}..{steps[-1]} ({len(steps)}): max rel diff vs uninterrupted {m:.3g} (<=1e-5: {m<=1e-5})")'
run() { local n=$1; shift; local name=$1; shift; if [ $n = 1 ]; then $B train $C "$@" train.out_dir=$O/$name > $O/$name.log 2>&1; else $M -np $n $B train $C comm.backend=mpi "$@" train.out_dir=$O/$name > $O/$name.log 2>&1; fi || { echo "FAILED $name"; tail -3 $O/$name.log; }; }

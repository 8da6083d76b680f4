# Shared by bench/tp_equivalence.sh and bench/pp_equivalence.sh (sourced after B, O, DATA and C are set):
# the dataset, the launcher, `run N NAME KEY=VALUE...` (a run of C and the keys on N ranks into $O/NAME, its log
# beside it; a failure is reported, not fatal) and LOSSES, Python defining losses(run) = {step: train loss}.
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
    return r'
run() { local n=$1; shift; local name=$1; shift; if [ $n = 1 ]; then $B train $C "$@" train.out_dir=$O/$name > $O/$name.log 2>&1; else $M -np $n $B train $C comm.backend=mpi "$@" train.out_dir=$O/$name > $O/$name.log 2>&1; fi || { echo "FAILED $name"; tail -3 $O/$name.log; }; }

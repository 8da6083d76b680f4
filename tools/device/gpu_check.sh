#!/usr/bin/env bash
# Runs on a lent GPU machine from the repository root (see pack.sh):
# the CUDA kernel tests, the GPU golden tests, baby GPT training on the GPU,
# GPT-2 124M throughput, and PyTorch nanoGPT peers. Logs go to $OUT.
# Arguments pick the parts (default: health tests gpt2 peer; health: parallm
# doctor's GPU checks (NVML, memory, GEMM); also ops, baby, det,
# trace: a CUPTI timeline of 124M steps, summarized; peerprof: the PyTorch
# peer's kernels by torch.profiler; probe: which GELU cuBLASLt's epilogue
# computes; nccl: the NCCL communicator's tests, and DDP when the machine has
# two GPUs; hf: an untied export loaded by transformers; llama: the Llama-3.2-1B
# shape's MFU against PyTorch compiled with SDPA flash, and a Llama and a Qwen3
# export loaded by transformers' LlamaForCausalLM / Qwen3ForCausalLM, logits
# against parallm's; moe: bench_moe bf16, a tiny MoE model trained in fp32
# and bf16, and transformers' Qwen3MoeForCausalLM / MixtralForCausalLM loading
# parallm's MoE exports, logits against parallm's; dropout: baby GPT bf16
# step time with dropout 0.2 against dropout 0 (attention dropout inside the
# flash kernels) and against PyTorch compiled with SDPA flash at both;
# ranks: 2 and 4 ranks sharing the one GPU through MPI (device buffers staged
# through pinned host memory), tp, pp, cp, DDP and ZeRO 1-3 (and offload)
# against the one-rank GPU run, fp32, 50 steps, each layout run twice, a ZeRO 3
# run resumed from its step-25 checkpoint, ddp.deterministic at 2 and 3 ranks
# against one rank's shards (bitwise), and one rank's ZeRO 3 in bf16 against
# the same run without ZeRO; lowp: train.dtype=fp16 and fp8 (rowwise and
# tensorwise scaling) on the GPU against the same on the CPU (a tiny model, 6
# steps), then GPT-2
# 124M on GPT-2 BPE Shakespeare (data/shakespeare, packed where prepared)
# 500 steps in bf16 and fp8, final losses compared); fp8speed: tokens/s at
# the Llama-3.2-1B shape in bf16, fp8 rowwise, fp8 tensorwise (FP8 tensor
# cores) and fp8 with bf16 activations (fp8b), the ratios to bf16; graphs: the CUDA graph tests, then baby GPT
# (dropout 0) and GPT-2 124M in bf16 with train.cuda_graphs off and on, step
# times and losses in one table (GRAPHS_DEVICE=cpu runs the table's machinery
# here, graphs unused); each part has a time
# limit so one call stays inside the device tool's 10 minutes. DTYPES picks
# the precisions of baby and gpt2 (default "fp32 bf16"); DET_DTYPE and
# DET_DROPOUT (default 0.2; 0 takes bf16 attention through the flash kernels)
# those of det; GPT2_TAG suffixes the gpt2 logs, and PARALLM_ATTENTION (own,
# cudnn, cudnn-fast) picks the attention kernels:
#   DTYPES=bf16 bash .devcarry/gpu_check.sh tests baby
set -uo pipefail
OUT=${OUT:-/tmp/out}
# The tests' golden files and fixtures in this copy of the repository (the binaries were built elsewhere).
[ -d tests/golden ] && export PARALLM_TEST_DIR=${PARALLM_TEST_DIR:-$PWD/tests}
W=/tmp/pl && mkdir -p $W && tar -C $W -xzf .devcarry/bundle.tar.gz
# Libraries the binaries need that this machine lacks (pack.sh's extlib/), and only those.
for f in "$W"/extlib/*; do
  [ -e "$f" ] || continue
  ldconfig -p | awk '{print $1}' | grep -qxF "$(basename "$f")" || { cp -P "$f" "$W/lib/" && echo "carried: $(basename "$f")"; }
done
CUBLAS_DIR=$(dirname "$(find / -name 'libcublas.so.13' -not -path '/proc/*' 2>/dev/null | head -1)")
# cuDNN: PyTorch's (the peer's own), else the system's; NVRTC for its runtime-compiled engines.
CUDNN_DIR=$(dirname "$(find / -path '*nvidia/cudnn/lib/libcudnn.so.9' -not -path '/proc/*' 2>/dev/null | head -1)")
NVRTC_DIR=$(dirname "$(find / -name 'libnvrtc.so.13' -not -path '/proc/*' -not -path '*stubs*' 2>/dev/null | head -1)")
# NCCL (218 MB, not carried): the toolkit's if there is one, else PyTorch's.
NCCL_LIB=$(find /usr/local -name 'libnccl.so.2' 2>/dev/null | head -1)
[ -z "$NCCL_LIB" ] && NCCL_LIB=$(find / -path '*nvidia/nccl/lib/libnccl.so.2' -not -path '/proc/*' 2>/dev/null | head -1)
NCCL_DIR=$(dirname "${NCCL_LIB:-/none/x}")
export LD_LIBRARY_PATH="$W/lib:$CUBLAS_DIR:$CUDNN_DIR:$NVRTC_DIR:$NCCL_DIR:${LD_LIBRARY_PATH:-}"
echo "cuDNN from $CUDNN_DIR, NVRTC from $NVRTC_DIR, NCCL from $NCCL_DIR"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
ldd $W/bin/parallm | grep "not found" && exit 1
step() { echo "=== $*"; }
# transformers loads an exported directory ($1) and its logits of "ROMEO: what light" are parallm's ($2, from
# `parallm sample --logits`; $3: the dataset's meta.json) within 1e-5; the log goes to $4.
hf_logits_check() {
  timeout 120 python3 - "$1" "$2" "$3" <<'PY' 2>&1 | tee "$4" | tail -3
import json, sys, numpy as np, torch
from transformers import AutoModelForCausalLM
d, logits_file, meta = sys.argv[1:4]
itos = json.load(open(meta))["itos"]
ids = [itos.index(c) for c in "ROMEO: what light"]
m = AutoModelForCausalLM.from_pretrained(d, torch_dtype=torch.float32).eval()
with torch.no_grad():
    ref = m(torch.tensor([ids])).logits[0].numpy()
ours = np.fromfile(logits_file, dtype=np.float32).reshape(len(ids), -1)[:, : ref.shape[1]]
rel = float(np.abs(ours - ref).max() / np.abs(ref).max())
print(f"{type(m).__name__} from {d}: logits within {rel:.2e} of parallm's (max |logit| {np.abs(ref).max():.3f})")
assert rel <= 1e-5, rel
PY
}
: "${GPT2_B:=16}" "${GPT2_ITERS:=12}" "${BABY_ITERS:=2000}" "${DTYPES:=fp32 bf16}"
PARTS=" ${*:-health tests gpt2 peer} "
want() { [[ "$PARTS" == *" $1 "* ]]; }
if want health; then
  step "doctor: the GPU's health from NVML (ECC, retired pages or remapped rows), its memory check and GEMM"
  timeout 120 $W/bin/parallm doctor --gpus "$(nvidia-smi -L | grep -c '^GPU')" 2>&1 | tee $OUT/doctor.log | grep -v "^dist:"
fi
if want tests; then
  step "CUDA kernel tests (the ones never run on a GPU yet in a process of their own: a sticky CUDA error there"
  step "  would fail every test after it)"
  NEW='*FlashAttentionDropout*:CudaLowp.*'
  CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG=$W/cudnn_dbg.log $W/bin/test_cuda_kernels --gtest_filter="-$NEW" 2>&1 |
    tee $OUT/kernels.log | grep -E -A3 "PASSED|FAILED|SKIPPED|Failure" | head -60
  timeout 120 $W/bin/test_cuda_kernels --gtest_filter="$NEW" 2>&1 | tee $OUT/kernels_new.log |
    grep -E -A3 "PASSED|FAILED|SKIPPED|Failure" | head -40
  step "CUDA graphs of the training passes against eager ones, and the allocator's graph blocks"
  timeout 90 $W/bin/test_model --gtest_filter='CudaGraphs.*:PassGraphs.*' 2>&1 | tee $OUT/graphs_tests.log |
    grep -E -A3 "PASSED|FAILED|SKIPPED|Failure" | head -20
  step "ZeRO's device buffers against the host's (one rank, stages 1-3, offload)"
  timeout 60 $W/bin/test_zero_cuda 2>&1 | tee $OUT/zero_cuda.log | grep -E -A3 "PASSED|FAILED|SKIPPED|Failure" | head -20
  step "golden GPT tests (CPU; GPU fp32 and bf16)"
  $W/bin/test_model --gtest_filter='*Golden*:*Gpu*' 2>&1 | tee $OUT/golden.log | grep -E "PASSED|FAILED|Failure|OK \]" | head -20
  [ -s $W/cudnn_dbg.log ] && head -c 400000 $W/cudnn_dbg.log | gzip > $OUT/cudnn_dbg.log.gz
fi
if want nccl; then
  step "NCCL communicator: device tensors, then the collective suite on host tensors (one rank)"
  timeout 120 $W/bin/test_nccl 2>&1 | tee $OUT/nccl.log | grep -E "PASSED|FAILED|Failure|OK \]|skipped" | head -20
  timeout 120 $W/bin/test_collectives nccl 2>&1 | tee -a $OUT/nccl.log | grep -E "PASSED|FAILED|Failure|OK \]|skipped" | head -20
  NGPU=$(nvidia-smi -L | wc -l)
  if [ "$NGPU" -ge 2 ] && command -v mpirun > /dev/null; then
    timeout 180 mpirun --allow-run-as-root -np 2 $W/bin/test_nccl 2>&1 | tee -a $OUT/nccl.log | grep -E "PASSED|FAILED|Failure" | head
    step "DDP on 2 GPUs: baby GPT bf16, 200 iters"
    timeout 240 mpirun --allow-run-as-root -np 2 $W/bin/parallm train configs/baby_gpt.yaml train.device=cuda \
      train.dtype=bf16 train.max_iters=200 train.eval_interval=100 train.out_dir=$W/ddp2 train.overwrite=true data.dir=$W/data/shakespeare_char 2>&1 | tail -8
  fi
fi
if want probe; then
  step "cuBLASLt's GELU epilogue: exact or tanh form?"
  $W/bin/gelu_epilogue_probe
fi
if want ops; then
  for dt in $DTYPES; do
    step "where a GPT-2 124M step goes, $dt (bench_gpu_ops)"
    timeout 120 $W/bin/bench_gpu_ops --dtype $dt -B $GPT2_B 2>&1 | tee $OUT/ops_$dt.log
  done
fi
cd $W
for dt in $DTYPES; do
  want baby || break
  step "baby GPT, $dt on the GPU: $BABY_ITERS iterations"
  timeout 400 ./bin/parallm train "${OLDPWD}/configs/baby_gpt.yaml" train.device=cuda train.dtype=$dt \
    train.max_iters=$BABY_ITERS train.eval_interval=${BABY_EVAL:-500} train.eval_iters=100 train.log_interval=100 \
    train.sample_tokens=200 train.out_dir=$W/out/baby_$dt train.overwrite=true data.dir=$W/data/shakespeare_char train.progress=false \
    2>&1 | tee $OUT/baby_$dt.log | grep -E "step|iter.*(500|1000|1500|2000):|error" | tail -8
  cp $W/out/baby_$dt/metrics.jsonl $OUT/baby_${dt}_metrics.jsonl 2>/dev/null
done
if want dropout; then
  step "baby GPT bf16: dropout 0.2 against 0 (fused attention dropout), and the PyTorch peer at both"
  for p in 0.2 0; do
    timeout 150 ./bin/parallm train "${OLDPWD}/configs/baby_gpt.yaml" train.device=cuda train.dtype=bf16 model.dropout=$p \
      train.max_iters=${DROP_ITERS:-300} train.eval_interval=100000 train.eval_iters=1 train.log_interval=100 \
      train.sample_tokens=0 train.final_eval=false train.out_dir=$W/out/drop_$p train.overwrite=true \
      data.dir=$W/data/shakespeare_char train.progress=false > $OUT/dropout_$p.log 2>&1 || tail -3 $OUT/dropout_$p.log
    cp $W/out/drop_$p/metrics.jsonl $OUT/dropout_${p}_metrics.jsonl 2>/dev/null
    (cd "$OLDPWD" && PYTHONUNBUFFERED=1 timeout 200 python3 tools/torch_ref/bench_peer.py --device cuda --n_layer 6 \
      --n_head 6 --n_embd 384 --block_size 256 --batch_size 64 --vocab_size 65 --dropout $p --iters 50 --warmup 5 \
      --dtype bf16 --compile 1 --flash 1 2>>$OUT/dropout_peer.err | tee -a $OUT/dropout_peer.jsonl)
  done
  python3 - "$OUT" <<'PY'
import json, statistics, sys
out = sys.argv[1]
def parallm_ms(p):  # the median step time after the first 20 steps (compile-free, but allocations settle)
    rows = [json.loads(l) for l in open(f"{out}/dropout_{p}_metrics.jsonl")]
    return statistics.median(r["dt_ms"] for r in rows if r.get("kind") == "train" and r["step"] >= 20)
peer = {r["dropout"]: r["s_per_iter"] * 1e3 for r in map(json.loads, open(f"{out}/dropout_peer.jsonl"))}
a, b = parallm_ms("0.2"), parallm_ms("0")
print(f"parallm bf16: dropout 0.2 {a:.2f} ms, dropout 0 {b:.2f} ms: {a / b:.2f}x (bar 1.3x)")
for p, ms in sorted(peer.items()):
    mine = a if p > 0 else b
    print(f"PyTorch compiled + SDPA flash, dropout {p}: {ms:.2f} ms; parallm {ms / mine:.2f}x the peer's speed")
PY
fi
if want graphs; then
  step "CUDA graphs (train.cuda_graphs): the tests in their own process, then on and off in one table"
  timeout 120 $W/bin/test_model --gtest_filter='CudaGraphs.*:PassGraphs.*' 2>&1 | tee $OUT/graphs_tests.log |
    grep -E -A3 "PASSED|FAILED|SKIPPED|Failure" | head -30
  BABY0="${OLDPWD}/configs/baby_gpt.yaml model.dropout=0 train.max_iters=${GRAPH_BABY_ITERS:-300} train.log_interval=1"
  G124="model.n_layer=12 model.n_head=12 model.n_embd=768 model.block_size=1024 model.vocab_size=50304
        model.batch_size=$GPT2_B model.dropout=0 train.max_iters=${GRAPH_GPT2_ITERS:-30} train.log_interval=1"
  for run in "baby $BABY0" "gpt2 $G124"; do
    set -- $run
    tag=$1 && shift
    for g in false true; do
      timeout 150 ./bin/parallm train "$@" train.device=${GRAPHS_DEVICE:-cuda} train.dtype=bf16 train.cuda_graphs=$g \
        train.eval_interval=100000 train.eval_iters=1 train.sample_tokens=0 train.final_eval=false \
        train.out_dir=$W/out/graphs_${tag}_$g train.overwrite=true data.dir=$W/data/shakespeare_char \
        train.progress=false > $OUT/graphs_${tag}_$g.log 2>&1 || tail -3 $OUT/graphs_${tag}_$g.log
      grep -E "CUDA graphs|cuda_graphs" $OUT/graphs_${tag}_$g.log | head -3
      cp $W/out/graphs_${tag}_$g/metrics.jsonl $OUT/graphs_${tag}_$g.jsonl 2>/dev/null
    done
  done
  python3 - "$OUT" <<'PY'
import json, statistics, sys
out = sys.argv[1]
def rows(tag, g):
    try:
        return [r for r in map(json.loads, open(f"{out}/graphs_{tag}_{g}.jsonl")) if r.get("kind") == "train"]
    except OSError:
        return []
print("| run (bf16) | eager ms/step | graphs ms/step | speedup | eager tok/s | graphs tok/s | losses |")
print("|---|---|---|---|---|---|---|")
for tag in ("baby", "gpt2"):
    e, g = rows(tag, "false"), rows(tag, "true")
    if len(e) < 6 or len(g) < 6:
        print(f"| {tag} | missing ({len(e)} and {len(g)} steps) |"); continue
    me = statistics.median(r["dt_ms"] for r in e[5:]); mg = statistics.median(r["dt_ms"] for r in g[5:])
    te = statistics.median(r["tokens_per_s"] for r in e[5:]); tg = statistics.median(r["tokens_per_s"] for r in g[5:])
    same = sum(a["loss"] == b["loss"] for a, b in zip(e, g))
    print(f"| {tag} | {me:.2f} | {mg:.2f} | {me / mg:.2f}x | {te:,.0f} | {tg:,.0f} | {same}/{min(len(e), len(g))} "
          f"steps bitwise equal |")
PY
fi
if want ranks; then
  step "several ranks on one GPU through MPI (fp32, 50 steps, dropout 0.1, vocab 65): against one rank, each twice"
  R="model.n_layer=4 model.n_head=4 model.n_embd=128 model.block_size=64 model.batch_size=8 model.dropout=0.1
     train.device=${RANKS_DEVICE:-cuda} train.dtype=fp32 train.max_iters=50 train.eval_interval=25 train.eval_iters=2
     train.log_interval=10 train.sample_tokens=0 data.dir=$W/data/shakespeare_char train.progress=false
     train.overwrite=true"
  timeout 60 ./bin/parallm train $R train.out_dir=$W/out/r1 > $OUT/ranks_1.log 2>&1 || tail -3 $OUT/ranks_1.log
  # Data parallelism splits the one rank's batch of 8 (model.batch_size is per rank).
  for lay in "tp2 2 parallel.tp=2" "pp2 2 parallel.pp=2" "cp2 2 parallel.cp=2" "dp2 2 model.batch_size=4" \
    "tp4 4 parallel.tp=4" "pp4 4 parallel.pp=4" "cp4 4 parallel.cp=4" "dp4 4 model.batch_size=2" \
    "tp2cp2 4 parallel.tp=2 parallel.cp=2" "zero1dp2 2 model.batch_size=4 zero.stage=1" \
    "zero3dp2 2 model.batch_size=4 zero.stage=3" "zero2dp4 4 model.batch_size=2 zero.stage=2" \
    "zero3dp4 4 model.batch_size=2 zero.stage=3" \
    "zero3off 2 model.batch_size=4 zero.stage=3 zero.offload=optimizer" \
    "zero3tp2 4 model.batch_size=4 parallel.tp=2 zero.stage=3"; do
    set -- $lay
    tag=$1 n=$2 && shift 2
    for t in a b; do
      timeout 90 mpirun --allow-run-as-root --oversubscribe -np "$n" ./bin/parallm train $R comm.backend=mpi "$@" \
        train.out_dir=$W/out/$tag$t > $OUT/ranks_$tag$t.log 2>&1 || tail -3 $OUT/ranks_$tag$t.log
    done
    grep -m1 "device" $OUT/ranks_${tag}a.log
    echo "$tag against one rank (bar 1e-5): $(python3 "${OLDPWD}/bench/compare_runs.py" --quiet $W/out/${tag}a \
      $W/out/r1 | sed -n '2p;3p' | tr '\n' ' '); twice: $(python3 "${OLDPWD}/bench/compare_runs.py" --quiet \
      $W/out/${tag}a $W/out/${tag}b | tail -1)"
  done
  # ZeRO on the GPU saved at step 25 and resumed to 50: the uninterrupted run's losses (stage 1: the model's
  # parameters through the host; stage 3 x tp 2: the shard's host copy gathered over the tp group).
  for lay in "zero1dp2 2 model.batch_size=4 zero.stage=1" "zero3dp2 2 model.batch_size=4 zero.stage=3" \
    "zero3tp2 4 model.batch_size=4 parallel.tp=2 zero.stage=3"; do
    set -- $lay
    tag=$1 n=$2 && shift 2
    Z="comm.backend=mpi train.out_dir=$W/out/res_$tag"
    timeout 90 mpirun --allow-run-as-root --oversubscribe -np "$n" ./bin/parallm train $R $Z "$@" \
      train.max_iters=25 > $OUT/ranks_res1_$tag.log 2>&1 || tail -3 $OUT/ranks_res1_$tag.log
    timeout 90 mpirun --allow-run-as-root --oversubscribe -np "$n" ./bin/parallm train $R $Z "$@" \
      train.init_from=auto train.overwrite=false > $OUT/ranks_res2_$tag.log 2>&1 || tail -3 $OUT/ranks_res2_$tag.log
    echo "$tag resumed at 25 against uninterrupted: $(grep -c "resuming" $OUT/ranks_res2_$tag.log) resume(s); \
$(python3 "${OLDPWD}/bench/compare_runs.py" --quiet $W/out/res_$tag $W/out/${tag}a | tail -1)"
  done
  # The deterministic reduction: 2 and 3 ranks against one rank cut into as many shards, bitwise.
  for n in 2 3; do
    timeout 60 ./bin/parallm train $R ddp.deterministic=true model.batch_size=12 ddp.shards=$n \
      train.out_dir=$W/out/det1_$n > $OUT/ranks_det1_$n.log 2>&1 || tail -3 $OUT/ranks_det1_$n.log
    timeout 90 mpirun --allow-run-as-root --oversubscribe -np $n ./bin/parallm train $R ddp.deterministic=true \
      model.batch_size=$((12 / n)) comm.backend=mpi \
      train.out_dir=$W/out/det$n > $OUT/ranks_det$n.log 2>&1 || tail -3 $OUT/ranks_det$n.log
    echo "ddp.deterministic $n ranks against 1 rank x $n shards (bitwise): $(python3 "${OLDPWD}/bench/compare_runs.py" \
      --quiet $W/out/det$n $W/out/det1_$n | tail -1)"
  done
  # One rank, bf16: ZeRO 3 (each gathered group drawn into its part of the bf16 copy) against no ZeRO.
  for z in 0 3; do
    timeout 60 ./bin/parallm train $R train.dtype=bf16 zero.stage=$z train.out_dir=$W/out/bf16z$z \
      > $OUT/ranks_bf16z$z.log 2>&1 || tail -3 $OUT/ranks_bf16z$z.log
  done
  echo "bf16 zero3 against zero0, one rank (bitwise): $(python3 "${OLDPWD}/bench/compare_runs.py" --quiet \
    $W/out/bf16z3 $W/out/bf16z0 | tail -1)"
  (cd $OUT && tar -czf ranks.tar.gz ranks_*.log && rm -f ranks_*.log)
fi
if want fp8speed; then
  step "FP8 at the Llama-3.2-1B shape, batch ${F8_B:=4} x 2048: tokens/s of bf16, fp8 rowwise, fp8 tensorwise (FP8"
  step "  cores, fp32 activations) and fp8b (FP8 cores, bf16 activations: train.fp8_activations=bf16)"
  F8="model.arch=llama model.n_layer=16 model.n_head=32 model.n_kv_head=8 model.n_embd=2048 model.head_dim=64
      model.intermediate_size=8192 model.vocab_size=128256 model.block_size=2048 model.tie_embeddings=true
      model.dropout=0 model.batch_size=$F8_B train.device=cuda train.max_iters=${F8_ITERS:-12} train.eval_interval=100000
      train.eval_iters=1 train.log_interval=1 train.sample_tokens=0 train.overwrite=true train.final_eval=false
      data.dir=$W/data/shakespeare_char train.progress=false"
  for v in "bf16 train.dtype=bf16" "fp8row train.dtype=fp8 train.fp8_bf16_ends=false" \
    "fp8tw train.dtype=fp8 train.fp8_bf16_ends=false train.fp8_scaling=tensorwise" \
    "fp8b train.dtype=fp8 train.fp8_bf16_ends=false train.fp8_scaling=tensorwise train.fp8_activations=bf16"; do
    set -- $v
    tag=$1 && shift
    timeout 150 ./bin/parallm train $F8 "$@" train.out_dir=$W/out/f8_$tag > $OUT/fp8speed_$tag.log 2>&1 ||
      tail -3 $OUT/fp8speed_$tag.log
    grep -m1 "device:" $OUT/fp8speed_$tag.log
  done
  python3 - $W/out <<'PY'
import json, statistics, sys
def tps(tag):
    try:
        r = [json.loads(l) for l in open(f"{sys.argv[1]}/f8_{tag}/metrics.jsonl") if '"train"' in l]
    except OSError:
        r = []  # the run did not start (its log says why)
    return statistics.median(x["tokens_per_s"] for x in r[3:]) if len(r) > 3 else float("nan")
b = tps("bf16")
for tag in ("fp8row", "fp8tw", "fp8b"):
    t = tps(tag)
    print(f"{tag}: {t:,.0f} tokens/s, {t / b:.2f}x bf16's {b:,.0f} (bar for FP8: 1.25x)")
PY
fi
if want lowp; then
  step "fp16 and FP8 products on the GPU against the CPU's (tiny model, 6 steps, tp 1)"
  T="model.n_layer=2 model.n_head=2 model.n_embd=64 model.block_size=32 model.batch_size=4 model.dropout=0
     train.max_iters=6 train.eval_interval=100 train.eval_iters=1 train.log_interval=1 train.sample_tokens=0
     train.final_eval=false data.dir=$W/data/shakespeare_char train.progress=false train.overwrite=true"
  for dt in fp16 fp8 fp8tw; do
    K="train.dtype=${dt%tw}" && [ $dt = fp8tw ] && K="train.dtype=fp8 train.fp8_scaling=tensorwise"
    for dev in cuda cpu; do
      timeout 60 ./bin/parallm train $T $K train.device=$dev train.out_dir=$W/out/lowp_${dt}_$dev \
        > $OUT/lowp_${dt}_$dev.log 2>&1 || tail -3 $OUT/lowp_${dt}_$dev.log
    done
    grep -m1 "device:" $OUT/lowp_${dt}_cuda.log
    echo "$dt GPU against CPU: $(python3 "${OLDPWD}/bench/compare_runs.py" --quiet $W/out/lowp_${dt}_cuda \
      $W/out/lowp_${dt}_cpu | sed -n '2p' | tr '\n' ' ')"
  done
  if [ -f $W/data/shakespeare/train.bin ]; then
    step "GPT-2 124M on GPT-2 BPE Shakespeare, 500 steps, 8 x 1024: bf16, fp8 and fp8 with bf16 activations"
    step "  (final loss within 0.01 of bf16's)"
    for dt in bf16 fp8 fp8b; do
      K="train.dtype=$dt"
      [ $dt = fp8b ] && K="train.dtype=fp8 train.fp8_scaling=tensorwise train.fp8_activations=bf16"
      timeout 240 ./bin/parallm train model.n_layer=12 model.n_head=12 model.n_embd=768 model.block_size=1024 \
        model.vocab_size=50304 model.batch_size=8 model.dropout=0 train.device=cuda $K \
        train.max_iters=${LOWP_ITERS:-500} train.eval_interval=250 train.eval_iters=20 train.log_interval=50 \
        optimizer.learning_rate=6e-4 optimizer.warmup_iters=50 optimizer.lr_decay_iters=${LOWP_ITERS:-500} \
        train.sample_tokens=0 train.out_dir=$W/out/bpe_$dt train.overwrite=true data.dir=$W/data/shakespeare \
        train.progress=false > $OUT/bpe_$dt.log 2>&1 || tail -3 $OUT/bpe_$dt.log
      grep -E "^iter .*: loss|val loss" $OUT/bpe_$dt.log | tail -2
    done
  else
    echo "lowp: data/shakespeare was not packed (prepare it here first): the GPT-2 BPE comparison skipped"
  fi
fi
if want det; then
  step "determinism and resume on the GPU (baby GPT, ${DET_DTYPE:-fp32}, 40 iterations, dropout ${DET_DROPOUT:-0.2})"
  D="${OLDPWD}/configs/baby_gpt.yaml train.device=cuda train.dtype=${DET_DTYPE:-fp32} model.dropout=${DET_DROPOUT:-0.2}
     train.eval_interval=20 train.eval_iters=5 train.sample_tokens=0
     train.log_interval=20 train.always_save_checkpoint=true data.dir=$W/data/shakespeare_char train.progress=false"
  ./bin/parallm train $D train.max_iters=40 train.out_dir=$W/out/detA train.overwrite=true > $OUT/detA.log 2>&1
  ./bin/parallm train $D train.max_iters=40 train.out_dir=$W/out/detB train.overwrite=true > $OUT/detB.log 2>&1
  ./bin/parallm train $D train.max_iters=20 train.out_dir=$W/out/detC train.overwrite=true > $OUT/detC.log 2>&1
  ./bin/parallm train $D train.max_iters=40 train.out_dir=$W/out/detC train.init_from=resume >> $OUT/detC.log 2>&1
  for r in detA detB detC; do cp $W/out/$r/metrics.jsonl $OUT/$r.jsonl; done
  python3 "${OLDPWD}/bench/compare_runs.py" $W/out/detA $W/out/detB | tail -3
  python3 "${OLDPWD}/bench/compare_runs.py" $W/out/detA $W/out/detC | tail -3
  (cd $OUT && tar -czf det.tar.gz det*.log det*.jsonl && rm -f det*.log det*.jsonl)  # few files come back
fi
for dt in $DTYPES; do
  want gpt2 || break
  step "GPT-2 124M shape, $dt on the GPU, batch $GPT2_B x 1024"
  timeout 150 ./bin/parallm train model.n_layer=12 model.n_head=12 model.n_embd=768 model.block_size=1024 \
    model.vocab_size=50304 model.batch_size=$GPT2_B model.dropout=0 train.device=cuda train.dtype=$dt \
    train.max_iters=$GPT2_ITERS train.eval_interval=100000 train.eval_iters=1 train.log_interval=1 \
    train.sample_tokens=0 train.out_dir=$W/out/gpt2_$dt train.overwrite=true train.final_eval=false data.dir=$W/data/shakespeare_char train.progress=false \
    2>&1 | tee $OUT/gpt2_$dt${GPT2_TAG:-}.log | tail -5
done
if want trace; then
  for dt in $DTYPES; do
    step "GPU timeline of GPT-2 124M, $dt, batch $GPT2_B x 1024 (CUPTI, tools/device/trace_summary.py)"
    CUDA_INJECTION64_PATH=$W/lib/libcupti_trace.so PARALLM_TRACE=$OUT/trace_$dt.tsv timeout 150 ./bin/parallm train \
      model.n_layer=12 model.n_head=12 model.n_embd=768 model.block_size=1024 model.vocab_size=50304 \
      model.batch_size=$GPT2_B model.dropout=0 train.device=cuda train.dtype=$dt train.max_iters=8 \
      train.eval_interval=100000 train.eval_iters=1 train.log_interval=1 train.sample_tokens=0 \
      train.out_dir=$W/out/trace_$dt train.overwrite=true train.final_eval=false data.dir=$W/data/shakespeare_char train.progress=false 2>&1 | tail -3
    python3 "${OLDPWD}/tools/device/trace_summary.py" $OUT/trace_$dt.tsv --skip 3 | tee $OUT/trace_$dt.txt | head -70
    gzip -f $OUT/trace_$dt.tsv
  done
fi
if want peerprof; then
  step "PyTorch peer's kernels (bf16 autocast, torch.compile, flash; torch.profiler over 3 steps)"
  (cd "$OLDPWD" && PYTHONUNBUFFERED=1 timeout 200 python3 tools/torch_ref/bench_peer.py --device cuda --n_layer 12 \
    --n_head 12 --n_embd 768 --block_size 1024 --vocab_size 50304 --batch_size $GPT2_B --iters 5 --warmup 3 \
    --dtype bf16 --compile 1 --flash 1 --profile 3 2>$OUT/peer_profile.txt)
  grep -v "^\[" $OUT/peer_profile.txt | cut -c1-200 | head -45
fi
if want hf; then
  step "Hugging Face: an untied parallm export (model.tie_embeddings=false) loaded by transformers"
  timeout 120 ./bin/parallm train model.n_layer=2 model.n_head=2 model.n_embd=32 model.block_size=32 model.batch_size=4 \
    model.tie_embeddings=false train.max_iters=5 train.eval_interval=5 train.eval_iters=1 train.sample_tokens=0 \
    train.progress=false train.out_dir=$W/out/untied train.overwrite=true data.dir=$W/data/shakespeare_char | tail -1
  ./bin/parallm export --ckpt $W/out/untied --out $W/out/untied_hf --overwrite | tail -1
  timeout 120 python3 - "$W/out/untied_hf" <<'PY' 2>&1 | tee $OUT/hf_untied.log | tail -4
import sys, torch
from safetensors.torch import load_file
from transformers import GPT2LMHeadModel
d = sys.argv[1]
m = GPT2LMHeadModel.from_pretrained(d)
f = load_file(d + "/model.safetensors")
assert not m.config.tie_word_embeddings
assert m.lm_head.weight.data_ptr() != m.transformer.wte.weight.data_ptr(), "tied after loading"
assert torch.equal(m.lm_head.weight, f["lm_head.weight"]) and torch.equal(m.transformer.wte.weight, f["transformer.wte.weight"])
logits = m(torch.tensor([[1, 2, 3, 4]])).logits
assert torch.isfinite(logits).all()
print("untied export loads in transformers: lm_head.weight bitwise the file's, not wte; logits", tuple(logits.shape))
PY
fi
if want moe; then
  step "MoE: the experts' grouped product vs dense bf16 (64 experts top-8, width 2048; issue 47's bar 70%)"
  timeout 120 $W/bin/bench_moe --device cuda -E 64 -K 8 -C 2048 -F 1408 -N 8192 2>&1 | tee $OUT/bench_moe.log
  timeout 60 $W/bin/bench_moe --device cuda -E 8 -K 2 -C 2048 -F 4096 -N 8192 2>&1 | tee -a $OUT/bench_moe.log
  for dt in fp32 bf16; do
    step "MoE: a tiny Mixtral-like model trains on the GPU ($dt)"
    timeout 120 $W/bin/parallm train model.arch=llama model.n_layer=2 model.n_head=4 model.n_kv_head=2 model.n_embd=64 \
      model.head_dim=16 model.intermediate_size=96 model.block_size=64 model.batch_size=8 model.moe_experts=8 \
      model.moe_top_k=2 model.moe_intermediate_size=32 model.moe_aux_coef=0.01 model.moe_z_coef=0.001 \
      train.device=cuda train.dtype=$dt train.max_iters=50 train.eval_interval=50 train.eval_iters=2 train.sample_tokens=0 \
      train.progress=false train.out_dir=$W/out/moe_$dt train.overwrite=true data.dir=$W/data/shakespeare_char \
      2>&1 | tee $OUT/moe_$dt.log | tail -2
  done
  for arch in qwen3 llama; do  # Qwen3MoeForCausalLM and MixtralForCausalLM
    step "transformers loads parallm's MoE export ($arch), logits against parallm's"
    M=$W/out/moe_hf_$arch
    timeout 120 $W/bin/parallm train model.arch=$arch model.n_layer=2 model.n_head=4 model.n_kv_head=2 \
      model.n_embd=64 model.head_dim=16 model.intermediate_size=32 model.block_size=64 model.batch_size=4 \
      model.moe_experts=4 model.moe_top_k=2 model.moe_intermediate_size=32 model.tie_embeddings=false \
      train.max_iters=20 train.eval_interval=20 train.eval_iters=1 train.sample_tokens=0 train.progress=false \
      train.out_dir=$M train.overwrite=true data.dir=$W/data/shakespeare_char | tail -1
    $W/bin/parallm export --ckpt $M --out ${M}_hf --overwrite | tail -1
    $W/bin/parallm sample --ckpt hf:${M}_hf --data $W/data/shakespeare_char --prompt "ROMEO: what light" \
      --logits $M/logits.bin
    hf_logits_check "${M}_hf" "$M/logits.bin" "$W/data/shakespeare_char/meta.json" $OUT/hf_moe_$arch.log
  done
fi
if want llama; then
  L1B="model.arch=llama model.n_layer=16 model.n_head=32 model.n_kv_head=8 model.n_embd=2048 model.head_dim=64
       model.intermediate_size=8192 model.vocab_size=128256 model.block_size=2048 model.tie_embeddings=true
       model.rope_theta=500000 model.rope_scaling=llama3 model.rope_factor=32
       model.rope_original_max_position_embeddings=8192 model.dropout=0"
  step "Llama-3.2-1B shape, bf16 on the GPU, batch ${L1B_B:=4} x 2048"
  timeout 200 ./bin/parallm train $L1B model.batch_size=$L1B_B train.device=cuda train.dtype=bf16 \
    train.max_iters=${L1B_ITERS:-10} train.eval_interval=100000 train.eval_iters=1 train.log_interval=1 \
    train.sample_tokens=0 train.out_dir=$W/out/llama1b train.overwrite=true train.final_eval=false \
    data.dir=$W/data/shakespeare_char train.progress=false 2>&1 | tee $OUT/llama1b.log | tail -4
  step "PyTorch peer, the same shape: bf16 autocast, torch.compile, SDPA flash"
  (cd "$OLDPWD" && PYTHONUNBUFFERED=1 timeout 240 python3 tools/torch_ref/bench_peer.py --device cuda --arch llama \
    --n_layer 16 --n_head 32 --n_kv_head 8 --n_embd 2048 --head_dim 64 --intermediate_size 8192 --vocab_size 128256 \
    --block_size 2048 --rope_theta 500000 --batch_size $L1B_B --iters ${PEER_ITERS:-10} --warmup 3 --dtype bf16 \
    --compile 1 --flash 1 2>>$OUT/peer_llama.err | tee -a $OUT/peer_llama.jsonl)
  tail -2 $OUT/peer_llama.err
  for arch in llama qwen3; do
    step "transformers loads parallm's $arch export (sharded safetensors), logits against parallm's"
    timeout 120 ./bin/parallm train model.arch=$arch model.n_layer=2 model.n_head=4 model.n_kv_head=2 model.n_embd=64 \
      model.head_dim=16 model.intermediate_size=96 model.block_size=64 model.batch_size=4 model.tie_embeddings=false \
      model.rope_scaling=llama3 model.rope_original_max_position_embeddings=32 train.max_iters=20 \
      train.eval_interval=20 train.eval_iters=1 train.sample_tokens=0 train.progress=false \
      train.out_dir=$W/out/$arch train.overwrite=true data.dir=$W/data/shakespeare_char | tail -1
    ./bin/parallm export --ckpt $W/out/$arch --out $W/out/${arch}_hf --overwrite --max-shard-size 1 | tail -1
    ./bin/parallm sample --ckpt hf:$W/out/${arch}_hf --data $W/data/shakespeare_char --prompt "ROMEO: what light" \
      --logits $W/out/${arch}_logits.bin
    hf_logits_check "$W/out/${arch}_hf" "$W/out/${arch}_logits.bin" "$W/data/shakespeare_char/meta.json" \
      $OUT/hf_$arch.log
  done
fi
cd "$OLDPWD"
want peer && step "PyTorch nanoGPT peer, GPT-2 124M, batch $GPT2_B x 1024 (fp32 = TF32 matmuls, as nanoGPT)"
IFS=, read -ra MODES <<< "${PEER_MODES:-fp32 0 0,bf16 1 1}"  # "dtype compile flash", comma-separated
want peer && for mode in "${MODES[@]}"; do
  set -- $mode
  PYTHONUNBUFFERED=1 timeout 200 python3 tools/torch_ref/bench_peer.py --device cuda --n_layer 12 --n_head 12 \
    --n_embd 768 --block_size 1024 --vocab_size 50304 --batch_size $GPT2_B --iters ${PEER_ITERS:-10} --warmup 3 \
    --dtype $1 --compile $2 --flash $3 2>>$OUT/peer.err | tee -a $OUT/peer.jsonl
done
want peer && tail -3 $OUT/peer.err
exit 0

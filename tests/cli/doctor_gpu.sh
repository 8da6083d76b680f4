#!/usr/bin/env bash
# `parallm doctor`'s GPU health (issue 49 item 5) without a GPU:
#  1. on this machine: "no GPU found" and why (no CUDA in the build, no NVML library), exit 0; with --gpus 1 the
#     rank is BROKEN naming the expectation;
#  2. through a stand-in NVML library (libfake_nvml.so, PARALLM_NVML_LIBRARY): the GPUs it reports, with ECC state,
#     retired pages and remapped rows; a sick GPU (uncorrected ECC errors, a remap pending) makes the node BROKEN
#     naming the GPU, and so does one NVML cannot reach; fewer GPUs than SLURM_GPUS_ON_NODE says are named; NVML
#     failing to start is said;
#  3. two ranks on one node: the node's GPUs are listed once (by local rank 0).
# Usage: doctor_gpu.sh <parallm> <libfake_nvml.so>
# shellcheck source-path=SCRIPTDIR source=../lib.sh
. "$(dirname "$0")/../lib.sh"
parallm=$1
fake=$2
FAIL_LOG=$work/plain.txt
PARALLM_NVML_LIBRARY=$work/none.so "$parallm" doctor >"$FAIL_LOG" 2>&1 || fail "doctor without GPUs failed"
grep -q "no GPU found: .*$work/none.so cannot be loaded" "$FAIL_LOG" || fail "no 'no GPU found' with the reason"
grep -q "is OK" "$FAIL_LOG" || fail "the rank is not OK"
FAIL_LOG=$work/expect.txt
PARALLM_NVML_LIBRARY=$work/none.so "$parallm" doctor --gpus 1 >"$FAIL_LOG" 2>&1 && fail "a missing GPU passed"
grep -q "is BROKEN.*1 GPU expected on this node, 0 usable" "$FAIL_LOG" || fail "the missing GPU is not named"

export PARALLM_NVML_LIBRARY=$fake
FAIL_LOG=$work/two.txt
FAKE_NVML_OLD=1 "$parallm" doctor --gpus 2 >"$FAIL_LOG" 2>&1 || fail "two healthy GPUs failed"
grep -q "2 GPUs seen by NVML (driver 999.1), 0 visible to CUDA, 2 expected" "$FAIL_LOG" || fail "the GPU count line"
grep -q "gpu 0: Fake GPU 0 (GPU-fake-0), memory 0.5/80.0 GiB used; ECC on, volatile errors 0 uncorrected 0 corrected, 0 uncorrected over its life; remapped rows 0 correctable 0 uncorrectable" "$FAIL_LOG" ||
  fail "gpu 0's health line"
grep -q "gpu 1: .*; retired pages 2 single-bit 0 double-bit$" "$FAIL_LOG" || fail "gpu 1's retired pages"
FAIL_LOG=$work/sick.txt
FAKE_NVML_GPUS=4 FAKE_NVML_BAD=2 FAKE_NVML_NOECC=3 "$parallm" doctor >"$FAIL_LOG" 2>&1 && fail "a sick GPU passed"
grep -q "is BROKEN.*gpu 2: 3 uncorrected ECC errors since the driver loaded; a row remap waits for a GPU reset" \
  "$FAIL_LOG" || fail "the sick GPU is not named"
grep -q "gpu 2: .*remapped rows 1 correctable 0 uncorrectable, a remap pending" "$FAIL_LOG" || fail "gpu 2's remap"
grep -q "gpu 3: .*; ECC not supported" "$FAIL_LOG" || fail "gpu 3 without ECC"
FAIL_LOG=$work/lost.txt
FAKE_NVML_LOST=1 "$parallm" doctor >"$FAIL_LOG" 2>&1 && fail "a lost GPU passed"
grep -q "is BROKEN.*gpu 1: NVML cannot reach it: GPU is lost" "$FAIL_LOG" || fail "the lost GPU is not named"
FAIL_LOG=$work/slurm.txt
SLURM_GPUS_ON_NODE=4 "$parallm" doctor >"$FAIL_LOG" 2>&1 && fail "2 of 4 GPUs passed"
grep -q "is BROKEN.*4 GPUs expected on this node, 2 usable (CUDA 0, NVML 2)" "$FAIL_LOG" || fail "the missing GPUs"
FAIL_LOG=$work/init.txt
FAKE_NVML_INIT=9 "$parallm" doctor >"$FAIL_LOG" 2>&1 || fail "doctor with NVML not starting failed"
grep -q "no GPU found: .*NVML did not start: Driver Not Loaded" "$FAIL_LOG" || fail "NVML's failure is not said"
if command -v mpirun >/dev/null; then
  FAIL_LOG=$work/np2.txt
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 \
    mpirun -n 2 -x PARALLM_NVML_LIBRARY "$parallm" doctor --gpus 2 >"$FAIL_LOG" 2>&1 || fail "doctor on 2 ranks"
  [ "$(grep -c "GPUs seen by NVML" "$FAIL_LOG")" -eq 1 ] || fail "the node's GPUs are not listed exactly once"
  grep -q "doctor: all 2 ranks OK" "$FAIL_LOG" || fail "2 ranks not OK"
fi
grep -h "gpu 2:\|no GPU found" "$work/sick.txt" "$work/plain.txt" | cut -c1-160
echo "doctor_gpu: PASS"

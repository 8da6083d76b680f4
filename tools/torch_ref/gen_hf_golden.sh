#!/usr/bin/env bash
# Makes tests/golden/hf_tiny_logits.bin: the PyTorch reference model's logits
# (hf_logits.py) of the tiny GPT-2 directory HfTest.ExportedModelGivesTheReferenceModelsLogits
# exports (deterministic: parallm's init with seed 7), on that test's prompt.
# Needs a build (build/tests/test_train) and Debian's python3-torch.
# Usage: tools/torch_ref/gen_hf_golden.sh [build dir]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
PARALLM_HF_GOLDEN_DIR=$work/hf "$build/tests/test_train" --gtest_filter='HfTest.ExportedModelGivesTheReferenceModelsLogits' \
  >/dev/null || true  # fails until the golden file exists; the directory is what is wanted
/usr/bin/python3 "$root/tools/torch_ref/hf_logits.py" "$work/hf" --ids 3,14,15,9,26,53,58,9,7,9,69 \
  --out "$root/tests/golden/hf_tiny_logits.bin"
echo "wrote $root/tests/golden/hf_tiny_logits.bin"

#!/usr/bin/env bash
# `parallm report` on two short runs (one with TensorBoard-free defaults, one
# with loss scaling), overlaid: tests/cli/report_check.py maps every plotted
# point back to the runs' metrics.jsonl and memory.json; then headless
# Chromium (Debian's package) opens the file: no console error, and the
# screenshot shows both runs' colours (tests/cli/png_colors.py). Without
# Chromium that half is skipped, saying so (the checker still runs); a
# directory without metrics is refused by name, a last line still being
# written is skipped with a warning, and --out naming a directory is refused.
# Usage: report.sh <parallm> <tiny shakespeare input.txt>
# shellcheck source-path=SCRIPTDIR source=../lib.sh
. "$(dirname "$0")/../lib.sh"
parallm=$1
input=$2
here=$(dirname "$0")
"$parallm" prepare char --input "$input" --out "$work/data" >/dev/null 2>&1 || fail "prepare"
for run in small wide; do
  extra=()
  [ $run = wide ] && extra=(model.n_embd=48 train.loss_scale=dynamic optimizer.learning_rate=2e-3)
  OMP_NUM_THREADS=2 "$parallm" train data.dir="$work/data" train.out_dir="$work/$run" model.n_layer=2 model.n_head=2 \
    model.n_embd=32 model.block_size=32 model.batch_size=4 train.max_iters=30 train.eval_interval=10 \
    train.eval_iters=2 train.log_interval=10 train.sample_tokens=0 train.progress=false "${extra[@]}" \
    >"$work/$run.log" 2>&1 || { tail "$work/$run.log"; fail "train $run"; }
done
"$parallm" report "$work/small" "$work/wide" --out "$work/report.html" || fail "report"
python3 "$here/report_check.py" "$work/report.html" "$work/small" "$work/wide" || fail "the plotted points"
grep -q "<script" "$work/report.html" && fail "the report has a script"
# Issue 44 U10: a run still writing its last metrics line (no newline yet) is reported, the line skipped with a warning.
cp -r "$work/small" "$work/writing"
printf '{"kind":"train","step":31,"lo' >>"$work/writing/metrics.jsonl"
"$parallm" report "$work/writing" --out "$work/writing.html" >"$work/writing.txt" 2>&1 ||
  { cat "$work/writing.txt"; fail "a run still writing its metrics was refused"; }
lines=$(wc -l <"$work/writing/metrics.jsonl")
grep -q "metrics.jsonl line $((lines + 1)) is partly written (the run is still writing it?): skipped" \
  "$work/writing.txt" || { cat "$work/writing.txt"; fail "no warning for the partly written line"; }
# Issue 44 U11: --out naming a directory is refused by name, not with "cannot rename ... Is a directory".
"$parallm" report "$work/small" --out "$work" >"$work/outdir.txt" 2>&1 && fail "--out naming a directory was accepted"
grep -q -- "--out $work: is a directory; give the HTML file to write, e.g. --out $work/report.html" \
  "$work/outdir.txt" || { cat "$work/outdir.txt"; fail "the refusal of --out DIR does not say why"; }
mkdir "$work/empty"
"$parallm" report "$work/empty" --out "$work/x.html" >"$work/err.txt" 2>&1 && fail "a directory without metrics was accepted"
grep -q "has no metrics.jsonl" "$work/err.txt" || { cat "$work/err.txt"; fail "the refusal does not say why"; }
browser=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$browser" ]; then
  echo "report: SKIP (the browser half): no chromium (apt-get install chromium)"
  echo "report: PASS (without the browser)"
  exit 0
fi
timeout 120 "$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1400,2600 \
  --enable-logging=stderr --v=0 --screenshot="$work/shot.png" "file://$work/report.html" >"$work/browser.log" 2>&1 ||
  { tail "$work/browser.log"; fail "chromium"; }
grep -E "Uncaught|CONSOLE\([0-9]+\)\].*(rror|arn)" "$work/browser.log" && fail "console errors"
[ -s "$work/shot.png" ] || fail "no screenshot"
counts=$(python3 "$here/png_colors.py" "$work/shot.png" '#1f77b4' '#d62728') || fail "reading the screenshot"
echo "screenshot $counts"
blue=$(echo "$counts" | sed -E 's/.*#1f77b4=([0-9]+).*/\1/')
red=$(echo "$counts" | sed -E 's/.*#d62728=([0-9]+).*/\1/')
[ "$blue" -gt 500 ] && [ "$red" -gt 500 ] || fail "the screenshot does not show both runs' curves ($counts)"
echo "report: PASS"

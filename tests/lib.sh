# Shared by the shell tests (sourced first thing: . "$(dirname "$0")/../lib.sh"):
#   - set -u;
#   - fail MESSAGE: prints "<test>: FAIL[ (FAIL_CONTEXT)]: MESSAGE" (the test is the script's name;
#     FAIL_CONTEXT, e.g. the case a script runs, when set), then the last 20 lines of FAIL_LOG when
#     that file exists, and exits 1;
#   - $work: a new temporary directory, removed at exit;
#   - at_exit COMMAND: a command run at exit before $work is removed (processes to stop, mounts);
#   - step_records DIR: the train and eval records of run DIR, one line each ("kind step loss grad_norm
#     val_loss", the values' exact reprs), the last of each step (a resumed run records the steps after its
#     checkpoint again), ordered by kind and step: two runs' lines compare bitwise.
# shellcheck shell=bash
set -u
TEST_NAME=$(basename "$0" .sh)
FAIL_CONTEXT=""
FAIL_LOG=""
fail() {
  echo "$TEST_NAME: FAIL${FAIL_CONTEXT:+ ($FAIL_CONTEXT)}: $*"
  if [ -n "$FAIL_LOG" ] && [ -f "$FAIL_LOG" ]; then tail -n 20 "$FAIL_LOG"; fi
  exit 1
}
work=$(mktemp -d)
_at_exit=()
at_exit() { _at_exit+=("$1"); }
_run_at_exit() {
  local c
  for c in "${_at_exit[@]}"; do eval "$c"; done
  rm -rf "$work"
}
trap _run_at_exit EXIT
step_records() {
  python3 -c '
import json, sys
last = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r.get("kind") in ("train", "eval"):
        last[(r["kind"], r["step"])] = (r.get("loss"), r.get("grad_norm"), r.get("val_loss"))
for (kind, step), v in sorted(last.items()):
    print(kind, step, *map(repr, v))' "$1/metrics.jsonl"
}

#!/usr/bin/env bash
# A whole host lost mid-step, over two emulated hosts (hosts.sh) x 2 ranks, dp 2 x tp 2, comm.timeout_s=5:
# bench/host_cut.sh cuts host1's link after 5 steps, twice; in each trial every rank of both hosts must end within
# comm.timeout_s + 10 s with an error naming host1. Then the hang records (comm/hang_record.h) the ranks wrote in
# the run's directory: every rank's (host1's too: the directory is shared) names each rank's host, and host0's
# say a rank of host1 did not answer while the others' last completed collective is listed. Then one trial with
# every rank of host1 SIGKILLed instead: the same bar, the host named (by Open MPI here).
# Exits 77 (said) where namespaces cannot be made.
# Usage: host_cut.sh <parallm> <text file>
# shellcheck source-path=SCRIPTDIR source=../lib.sh
. "$(dirname "$0")/../lib.sh"
parallm=$1
input=$2
FAIL_LOG=$work/bench.txt
HOST_CUT_KEEP=$work/keep "$(dirname "$0")/../../bench/host_cut.sh" "$parallm" "$input" 2 >"$FAIL_LOG" 2>&1
rc=$?
if [ "$rc" -eq 77 ]; then
  cat "$FAIL_LOG"
  exit 77
fi
[ "$rc" -eq 0 ] || fail "bench/host_cut.sh ended $rc"
grep -q "host_cut: 2 of 2 trials ended every rank" "$FAIL_LOG" || fail "the trials' summary"
for t in 1 2; do
  d=$work/keep/cut$t
  FAIL_LOG=$d/cut$t.txt
  ls "$d"/hang-host0-*.json >/dev/null 2>&1 || fail "trial $t: no hang record from host0's ranks"
  python3 - "$d" <<'PY' || fail "trial $t: the hang records"
import glob, json, sys
records = sorted(glob.glob(sys.argv[1] + "/hang-host0-*.json"))
for path in records:
    r = json.load(open(path))
    ranks = r["ranks"]
    assert len(ranks) == r["size"], path
    assert all(p["host"] in ("host0", "host1") for p in ranks), path
    silent = [p for p in ranks if not p["answered"]]
    assert silent and all(p["host"] == "host1" for p in silent), (path, silent)
    me = [p for p in ranks if p["rank"] == r["rank"]][0]
    assert me["answered"] and me["last_completed"] != "none" and me["in_progress"] != "none", (path, me)
    assert "host1" in r["error"] and r["operation"] in r["error"], path
    print(path.rsplit("/", 1)[1], r["operation"], "silent:", [(p["rank"], p["host"]) for p in silent])
PY
done
# The other way to lose a host: every rank of host1 SIGKILLed (Open MPI names the host, its ranks end at once).
FAIL_LOG=$work/bench_kill.txt
HOST_CUT_HOW="kill" "$(dirname "$0")/../../bench/host_cut.sh" "$parallm" "$input" 1 >"$FAIL_LOG" 2>&1 ||
  fail "bench/host_cut.sh with host1's ranks killed ended $?"
grep "^trial 1:" "$FAIL_LOG"
echo "host_cut: PASS"

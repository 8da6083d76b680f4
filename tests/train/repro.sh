#!/usr/bin/env bash
# repro.json of a 2-rank run holds what it takes to run it again: the config
# (equal to config.json's), the command line as given, the binary's git
# revision (the source tree's, when it is a git checkout) and build flags,
# both ranks' hosts and mesh coordinates, the library versions, allowed
# environment variables and no secret. A resume keeps the first attempt's
# record as repro-1.json and writes attempt 2 as repro-2.json and repro.json.
# Usage: repro.sh <parallm> <text file> <python3> <source dir> <launcher for 2 ranks with its flags>...
# shellcheck source-path=SCRIPTDIR source=../lib.sh
. "$(dirname "$0")/../lib.sh"
parallm=$1
input=$2
python=$3
src=$4
shift 4
"$parallm" prepare char --input "$input" --out "$work/data" >/dev/null || fail "prepare"
run=(model.n_layer=1 model.n_head=2 model.n_embd=32 model.block_size=32 model.batch_size=2 train.eval_interval=2
  train.eval_iters=1 train.sample_tokens=0 train.progress=false train.peak_flops=1e11 "data.dir=$work/data"
  "train.out_dir=$work/run")
export OMP_NUM_THREADS=1 NCCL_DEBUG=WARN MY_API_TOKEN=hunter2 PARALLM_TEST_SECRET_KEY=hunter2
timeout 120 "$@" "$parallm" train "${run[@]}" train.max_iters=2 >"$work/first.txt" 2>&1 ||
  { cat "$work/first.txt"; fail "the first run"; }
timeout 120 "$@" "$parallm" train "${run[@]}" train.max_iters=4 train.init_from=resume >"$work/second.txt" 2>&1 ||
  { cat "$work/second.txt"; fail "the resumed run"; }
want_rev=$(git -C "$src" rev-parse HEAD 2>/dev/null || echo unknown)
"$python" - "$work/run" "$want_rev" "$(hostname)" <<'PY' || fail "repro.json"
import json, os, sys
run, want_rev, host = sys.argv[1], sys.argv[2], sys.argv[3]
def load(name):
    with open(os.path.join(run, name)) as f:
        return json.load(f)
def check(ok, what):
    if not ok:
        print("repro: FAIL:", what)
        sys.exit(1)
r, first, second = load("repro.json"), load("repro-1.json"), load("repro-2.json")
check(r == second, "repro.json is not the latest attempt's record (repro-2.json)")
check(first["attempt"] == 1 and second["attempt"] == 2, "attempts numbered %s, %s" % (first["attempt"], second["attempt"]))
check(not os.path.exists(os.path.join(run, "repro-3.json")), "a third attempt's record")
check(r["config"] == load("config.json"), "config differs from config.json")
check(first["config"]["train.max_iters"] == 2 and r["config"]["train.max_iters"] == 4, "the attempts' configs")
check(r["argv"][1:3] == ["train", "model.n_layer=1"] and "train.init_from=resume" in r["argv"], "argv %s" % r["argv"])
check(os.path.basename(r["argv"][0]) == "parallm", "argv[0] %s" % r["argv"][0])
check("train.init_from=resume" not in first["argv"], "the first attempt's argv")
b = r["build"]
check(b["git_revision"] and b["git_revision"] == want_rev, "git revision %r, the source's is %r" % (b["git_revision"], want_rev))
check(isinstance(b["git_dirty"], bool) and b["build_type"] and b["compiler"] and "-Wall" in b["cxx_flags"], "build %s" % b)
lay = r["layout"]
check(lay["world_size"] == 2 and lay["mesh"] == {"dp": 2, "tp": 1, "pp": 1, "cp": 1, "ep": 1}, "layout %s" % lay)
check([x["rank"] for x in lay["ranks"]] == [0, 1] and [x["dp"] for x in lay["ranks"]] == [0, 1], "ranks %s" % lay["ranks"])
check([x["host"] for x in lay["ranks"]] == [host, host] and [x["local_rank"] for x in lay["ranks"]] == [0, 1],
      "hosts %s (this host %s)" % (lay["ranks"], host))
check(lay["backend"] == "mpi", "backend %s" % lay["backend"])
lib = r["libraries"]
check(lib["mpi"] and lib["onednn"].startswith("oneDNN ") and "nccl" in lib and "cuda" in lib, "libraries %s" % lib)
env = r["environment"]
check(env.get("OMP_NUM_THREADS") == "1" and env.get("NCCL_DEBUG") == "WARN", "environment %s" % env)
check("MY_API_TOKEN" not in env and "PARALLM_TEST_SECRET_KEY" not in env and "hunter2" not in json.dumps(r),
      "a secret was recorded")
check(any(k.startswith("OMPI_COMM_WORLD_") or k.startswith("PMI_") for k in env), "no launcher variable %s" % env)
check(r["time_utc"].endswith("Z") and r["cwd"], "time or cwd")
print("repro: record of attempt 2: world %d on %s, revision %s%s, %s" % (lay["world_size"], host, b["git_revision"][:12],
      " (dirty)" if b["git_dirty"] else "", ", ".join(v for v in lib.values() if v)))
PY
echo "repro: PASS"

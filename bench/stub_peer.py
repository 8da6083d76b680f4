"""A stand-in for tools/torch_ref/bench_peer.py in bench_train's test: no
torch, no work; its tokens/s follow the settings it runs under, so exactly
one of bench_train's peer settings is the fastest (system BLAS, intra-op
threads > 1, OMP_WAIT_POLICY=PASSIVE: 131), and a setting leaked from the
caller's environment changes the numbers."""
import json
import os
import sys

args = sys.argv[1:]
intra = int(args[args.index("--intra_threads") + 1])
tps = 100.0
tps += 20 if os.environ.get("OMP_WAIT_POLICY") == "PASSIVE" else 0
tps += 10 if intra > 1 else 0
tps += 0 if "openblas" in os.environ.get("LD_LIBRARY_PATH", "") else 1
tps -= 5 if "OPENBLAS_CORETYPE" in os.environ else 0
print(json.dumps({"peer": "stub", "tokens_per_s": tps, "s_per_iter": 768 / tps}))

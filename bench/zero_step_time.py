#!/usr/bin/env python3
"""ZeRO step time against DDP, measured in the same run.

For each round it trains the same config through `parallm launch -n N` (1 thread per rank) once with
zero.stage=0 (DDP) and once with each stage given, in alternating order, and reads the per-iteration
metrics rank 0 writes. It prints, per round and as medians over rounds, the median step time of each
run, the ratio to DDP, the bytes each step moved per collective kind, and the peak per-rank memory
the run reported. Rounds alternate so drifts in machine speed hit every stage alike.

  bench/zero_step_time.py [--parallm build/parallm] [--ranks 2] [--rounds 2] [--iters 8] [--stages 3]
                          [config.yaml] [key=value ...]
Standard library only.
"""
import argparse, json, os, shutil, statistics, subprocess, sys, tempfile


def train(parallm, ranks, stage, args, out):
    cmd = [parallm, "launch", "-n", str(ranks), "--", parallm, "train", *args, f"zero.stage={stage}",
           f"train.out_dir={out}"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout[-3000:]}")
    rows = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))]
    train_rows = [r for r in rows if r.get("kind") == "train"][2:]  # skip warm-up steps
    mem_path = os.path.join(out, "memory.json")
    mem = json.load(open(mem_path)) if os.path.exists(mem_path) else {}
    dt = statistics.median(r["dt_ms"] for r in train_rows)
    kinds = {k: train_rows[-1].get(k, 0) for k in ("comm_bytes_all_reduce", "comm_bytes_reduce_scatter",
                                                     "comm_bytes_all_gather")}
    return dt, kinds, mem.get("total_peak_bytes", 0)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parallm", default="build/parallm")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--iters", type=int, default=8)
    ap.add_argument("--stages", default="3", help="comma-separated ZeRO stages to compare with DDP")
    ap.add_argument("args", nargs="*", help="[config.yaml] key=value ...")
    a = ap.parse_args()
    parallm = os.path.abspath(a.parallm)
    stages = [int(s) for s in a.stages.split(",")]
    base = [*a.args, f"train.max_iters={a.iters}", f"train.eval_interval={a.iters + 1000}", "train.final_eval=false",
            "train.eval_iters=1", "train.sample_tokens=0", "train.log_interval=1000", "train.progress=false"]
    tmp = tempfile.mkdtemp(prefix="parallm_zero_bench_")
    ratios = {s: [] for s in stages}
    try:
        for rnd in range(a.rounds):
            order = [0, *stages] if rnd % 2 == 0 else [*reversed(stages), 0]
            res = {s: train(parallm, a.ranks, s, base, os.path.join(tmp, f"r{rnd}s{s}")) for s in order}
            for s in [0, *stages]:
                dt, kinds, peak = res[s]
                moved = ", ".join(f"{k.split('comm_bytes_')[1]} {v / 2**20:.1f} MiB" for k, v in kinds.items() if v)
                line = f"round {rnd}: stage {s}: {dt:8.1f} ms/step"
                if s:
                    ratios[s].append(dt / res[0][0])
                    line += f" ({dt / res[0][0]:.3f}x DDP)"
                print(f"{line}; per step {moved}; peak per-rank memory {peak / 2**20:.1f} MiB", flush=True)
        for s in stages:
            print(f"stage {s} / DDP step time on {a.ranks} ranks: median {statistics.median(ratios[s]):.3f}x "
                  f"over {a.rounds} rounds ({', '.join(f'{r:.3f}' for r in ratios[s])})")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

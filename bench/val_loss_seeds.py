#!/usr/bin/env python3
"""Final val loss of nanoGPT's CPU config over several seeds: parallm and PyTorch.

    bench/val_loss_seeds.py [--seeds 1337,1,2,3] [--eval_iters 200] [--jobs 2] [--peer torch|none]

Trains config (a) (configs/shakespeare_char_cpu.yaml: 4 layers, 4 heads, 128
embd, block 64, batch 12, 2000 iterations, lr 1e-3 -> 1e-4, warmup 100, beta2
0.99) once per seed with parallm and with the PyTorch reference
(tools/torch_ref/train_ref.py, the same recipe as nanoGPT's train.py, run by
Debian's /usr/bin/python3), one thread per run and --jobs runs at a time,
then prints each seed's val loss after 2000 steps, the mean, standard
deviation and standard error of each side, how many seeds reach the bar
(--bar, 1.90), and the difference of the means with its 95% interval.

A single seed's val loss is a noisy number: the two implementations draw
different initial weights and batches from their own RNGs, and an eval over
20 batches (the config's eval_iters) adds its own noise. --eval_iters (200 by
default) sets the number of eval batches on both sides; training does not
depend on it. Needs data/shakespeare_char (parallm prepare shakespeare_char).
Standard library only.
"""
import argparse
import concurrent.futures as cf
import json
import math
import os
import statistics
import subprocess
import sys

import compare_runs  # this directory: the metrics.jsonl reader

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_parallm(a, seed):
    out = os.path.join(a.out, f"parallm_{seed}")
    cmd = [a.parallm, "train", a.config, f"train.seed={seed}", f"train.eval_iters={a.eval_iters}",
           f"train.out_dir={out}", f"data.dir={a.data}", "train.overwrite=true"]
    p = subprocess.run(cmd, cwd=ROOT, env=dict(os.environ, OMP_NUM_THREADS="1"), capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"parallm seed {seed} failed (exit {p.returncode}): {p.stderr.strip()[-400:]}")
    _, _, evals = compare_runs.load(out)
    if not evals:
        raise RuntimeError(f"parallm seed {seed}: no eval record in {out}/metrics.jsonl")
    step = max(evals)
    return step, evals[step][1]


def run_torch(a, seed):
    cmd = ["/usr/bin/python3", os.path.join(ROOT, "tools", "torch_ref", "train_ref.py"), "--data", a.data,
           "--eval_iters", str(a.eval_iters), "--seed", str(seed), "--threads", "1"]
    env = dict(os.environ, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="PASSIVE")
    env.pop("OPENBLAS_CORETYPE", None)
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"PyTorch seed {seed} failed (exit {p.returncode}): {p.stderr.strip()[-400:]}")
    rec = json.loads(p.stdout.strip().splitlines()[-1])
    return rec["max_iters"], rec["val_loss"]


def summary(name, vals, bar):
    m = statistics.mean(vals)
    sd = statistics.stdev(vals) if len(vals) > 1 else float("nan")
    se = sd / math.sqrt(len(vals))
    hit = sum(v <= bar for v in vals)
    print(f"{name:8s} n={len(vals):2d}  mean {m:.4f}  sd {sd:.4f}  se {se:.4f}  min {min(vals):.4f}  "
          f"max {max(vals):.4f}  <= {bar}: {hit}/{len(vals)}")
    return m, se


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default="1337,1,2,3,4,5,6,7")
    ap.add_argument("--eval_iters", type=int, default=200)
    ap.add_argument("--jobs", type=int, default=2, help="runs at a time, one thread each")
    ap.add_argument("--peer", choices=["torch", "none"], default="torch")
    ap.add_argument("--bar", type=float, default=1.90)
    ap.add_argument("--parallm", default=os.path.join(ROOT, "build", "parallm"))
    ap.add_argument("--config", default=os.path.join(ROOT, "configs", "shakespeare_char_cpu.yaml"))
    ap.add_argument("--data", default=os.path.join(ROOT, "data", "shakespeare_char"))
    ap.add_argument("--out", default="/tmp/parallm_val_loss_seeds")
    a = ap.parse_args()
    try:
        seeds = [int(s) for s in a.seeds.split(",") if s.strip()]
    except ValueError:
        sys.exit(f"val_loss_seeds: --seeds must be comma-separated integers, got {a.seeds!r}")
    if not seeds or a.jobs < 1 or a.eval_iters < 1:
        sys.exit("val_loss_seeds: need at least one seed, --jobs >= 1 and --eval_iters >= 1")
    for path, what in ((a.parallm, "parallm binary (build it first)"), (os.path.join(a.data, "train.bin"),
                                                                        "prepared data (parallm prepare)")):
        if not os.path.exists(path):
            sys.exit(f"val_loss_seeds: no {what} at {path}")
    os.makedirs(a.out, exist_ok=True)

    sides = [("parallm", run_parallm)] + ([("pytorch", run_torch)] if a.peer == "torch" else [])
    results = {name: {} for name, _ in sides}
    with cf.ThreadPoolExecutor(max_workers=a.jobs) as pool:
        futs = {pool.submit(fn, a, s): (name, s) for s in seeds for name, fn in sides}
        for f in cf.as_completed(futs):
            name, s = futs[f]
            try:
                step, val = f.result()
            except Exception as e:  # report every failure, keep the others' results
                print(f"val_loss_seeds: {e}", file=sys.stderr)
                continue
            results[name][s] = val
            print(f"  {name} seed {s}: val loss {val:.4f} after {step} steps", file=sys.stderr, flush=True)

    print(f"\nval loss after 2000 steps, {a.eval_iters} eval batches of 12 x 64 tokens")
    print("seed     " + "  ".join(f"{n:>8s}" for n, _ in sides))
    for s in seeds:
        print(f"{s:<8d} " + "  ".join(f"{results[n][s]:8.4f}" if s in results[n] else f"{'-':>8s}" for n, _ in sides))
    stats = {n: summary(n, list(v.values()), a.bar) for n, v in results.items() if v}
    if "pytorch" in stats and "parallm" in stats:
        (m1, s1), (m2, s2) = stats["parallm"], stats["pytorch"]
        d, sd = m1 - m2, math.sqrt(s1 * s1 + s2 * s2)
        print(f"parallm - pytorch: {d:+.4f} (95% interval {d - 1.96 * sd:+.4f} .. {d + 1.96 * sd:+.4f})")
    return 0 if all(len(v) == len(seeds) for v in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Compare the loss trajectories of two parallm runs (their metrics.jsonl).

    bench/compare_runs.py out/two_ranks out/one_rank [--tol 1e-5]

Prints, per step present in both, the train losses, then the maximum relative
difference of train and eval losses and whether the two runs are bitwise equal
(every logged loss identical as written). Exit code 1 when the maximum relative
difference exceeds --tol (default: no limit), 2 on unusable input.
Standard library only.
"""
import argparse
import json
import os
import sys


def load(run):
    path = run if run.endswith(".jsonl") else os.path.join(run, "metrics.jsonl")
    train, evals = {}, {}
    try:
        with open(path) as f:
            for n, line in enumerate(f, 1):
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as e:
                    sys.exit(f"compare_runs: {path}:{n}: not JSON ({e})")
                if rec.get("kind") == "train":
                    train[rec["step"]] = rec["loss"]
                elif rec.get("kind") == "eval":
                    evals[rec["step"]] = (rec["train_loss"], rec["val_loss"])
    except OSError as e:
        print(f"compare_runs: cannot read {path}: {e.strerror}", file=sys.stderr)
        sys.exit(2)
    return path, train, evals


def rel(a, b):
    return abs(a - b) / abs(b) if b != 0 else abs(a - b)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--tol", type=float, default=None, help="fail when the max relative difference exceeds this")
    ap.add_argument("--quiet", action="store_true", help="only the summary")
    args = ap.parse_args()
    pa, ta, ea = load(args.a)
    pb, tb, eb = load(args.b)
    steps = sorted(set(ta) & set(tb))
    if not steps:
        print(f"compare_runs: no train step in common between {pa} and {pb}", file=sys.stderr)
        sys.exit(2)
    worst, worst_step, equal = 0.0, steps[0], True
    for s in steps:
        d = rel(ta[s], tb[s])
        equal = equal and ta[s] == tb[s]
        if d > worst:
            worst, worst_step = d, s
        if not args.quiet:
            print(f"step {s:6d}  {ta[s]:.7f}  {tb[s]:.7f}  rel diff {d:.3g}")
    eval_steps = sorted(set(ea) & set(eb))
    eval_worst = 0.0
    for s in eval_steps:
        for x, y in zip(ea[s], eb[s]):
            eval_worst = max(eval_worst, rel(x, y))
            equal = equal and x == y
    print(f"{len(steps)} train steps, {len(eval_steps)} evals in common")
    print(f"max relative train loss difference: {worst:.3g} (step {worst_step})")
    print(f"max relative eval loss difference:  {eval_worst:.3g}")
    print("bitwise equal: " + ("yes" if equal else "no"))
    if args.tol is not None and max(worst, eval_worst) > args.tol:
        sys.exit(1)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Weak scaling and overlap of data parallel training, measured against one rank in the same run.

For each round it trains the same config on 1 rank (1 thread, pinned to core 0) and then on N ranks
through `parallm launch -n N` (1 thread each, each rank bound to its own core), at the same micro batch,
and reads the per-iteration metrics that rank 0 writes. Rounds alternate the two so drifts in machine
speed hit both. It prints, per round and as medians:
  - efficiency = tokens/s of N ranks / (N x tokens/s of 1 rank), from the median iteration of each run;
  - exposed = share of all-reduce time not hidden behind backward (comm_exposed_ms / comm_ms, summed);
  - ceiling = the same efficiency for N independent 1-rank runs started together, each on its own core
    (no communication at all): what sharing the machine's memory system and clocks leaves, so
    efficiency / ceiling is the part data parallelism itself costs. --no-ceiling skips it.

  bench/ddp_scaling.py [--parallm build/parallm] [--ranks 2] [--rounds 3] [--iters 40] [--batch 8] [key=value ...]
"""
import argparse, json, os, shutil, statistics, subprocess, sys, tempfile


def run(cmd, env):
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout[-3000:]}")


def run_together(cmds, env):
    procs = [subprocess.Popen(c, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for c in cmds]
    for c, p in zip(cmds, procs):
        out, _ = p.communicate()
        if p.returncode != 0:
            sys.exit(f"failed ({p.returncode}): {' '.join(c)}\n{out[-3000:]}")


def metrics(out_dir, skip):
    rows = [json.loads(l) for l in open(os.path.join(out_dir, "metrics.jsonl"))]
    rows = [r for r in rows if r.get("kind") == "train"][skip:]
    tok = statistics.median(r["tokens_per_s"] for r in rows)
    comm = sum(r.get("comm_ms", 0) for r in rows)
    exposed = sum(r.get("comm_exposed_ms", 0) for r in rows)
    return tok, (exposed / comm if comm else 0.0), statistics.median(r["dt_ms"] for r in rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parallm", default="build/parallm")
    ap.add_argument("--config", default="configs/baby_gpt.yaml")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=40)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--no-ceiling", action="store_true", help="skip the N independent runs")
    ap.add_argument("overrides", nargs="*")
    a = ap.parse_args()
    exe = os.path.abspath(a.parallm)
    tmp = tempfile.mkdtemp(prefix="parallm_ddp_scaling_")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    common = [a.config, f"model.batch_size={a.batch}", f"train.max_iters={a.iters}", "train.eval_interval=1000000",
              "train.final_eval=false", "train.eval_iters=1", "train.log_interval=1000000", "train.progress=false"] + a.overrides
    skip = max(3, a.iters // 5)  # warm-up iterations left out
    print(f"# ddp scaling: {a.config}, micro batch {a.batch}, {a.iters} iters (first {skip} skipped), "
          f"1 rank vs {a.ranks} ranks, 1 thread per rank, {a.rounds} rounds")
    print(f"# {'round':>5} {'1 rank tok/s':>13} {f'{a.ranks} ranks tok/s':>14} {'efficiency':>11} {'exposed':>8}"
          f" {'ceiling':>8} {'of ceiling':>11}")
    effs, exps, ceils = [], [], []
    for r in range(a.rounds):
        one = os.path.join(tmp, f"one{r}")
        run(["taskset", "-c", "0", exe, "train"] + common + [f"train.out_dir={one}", "comm.backend=self"], env)
        many = os.path.join(tmp, f"many{r}")
        run([exe, "launch", "-n", str(a.ranks), "--", exe, "train"] + common + [f"train.out_dir={many}"], env)
        t1, _, _ = metrics(one, skip)
        tn, exposed, _ = metrics(many, skip)
        eff = tn / (a.ranks * t1)
        effs.append(eff)
        exps.append(exposed)
        ceil_text = ""
        if not a.no_ceiling:
            alone = [os.path.join(tmp, f"alone{r}_{i}") for i in range(a.ranks)]
            run_together([["taskset", "-c", str(i % os.cpu_count()), exe, "train"] + common +
                          [f"train.out_dir={d}", "comm.backend=self"] for i, d in enumerate(alone)], env)
            ceil = sum(metrics(d, skip)[0] for d in alone) / (a.ranks * t1)
            ceils.append(ceil)
            ceil_text = f" {ceil:>8.1%} {eff / ceil:>11.1%}"
        print(f"  {r:>5} {t1:>13.0f} {tn:>14.0f} {eff:>10.1%} {exposed:>8.1%}{ceil_text}", flush=True)
    line = f"# median: efficiency {statistics.median(effs):.1%}, exposed all-reduce time {statistics.median(exps):.1%}"
    if ceils:
        line += (f", ceiling {statistics.median(ceils):.1%}, "
                 f"efficiency / ceiling {statistics.median(e / c for e, c in zip(effs, ceils)):.1%}")
    print(line)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

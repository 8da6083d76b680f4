#!/usr/bin/env python3
"""Tensor parallelism on one host: tp=N ranks of 1 thread against one process of N threads.

Trains the same model on the same global batch two ways, interleaved round by round so drifts in the
machine's speed hit both alike (round r runs A then B when r is even, B then A when odd):

  A: mpirun -np N <mpirun args> parallm train ... parallel.tp=N comm.backend=mpi   (OMP_NUM_THREADS=1)
  B: parallm train ...                                                             (OMP_NUM_THREADS=N)

and reads each run's metrics.jsonl (rank 0 writes it; tokens_per_s counts the global batch). Per run
it takes the median tokens/s of the train steps from --skip on (the first steps warm up); per side the
median over rounds; and prints the ratio A / B. With --allreduce (default on) it also times one
all-reduce of the activation size B*T*C floats under the same mpirun (`parallm bench comm`), and
estimates the share of A's step the 4*n_layer + 2 such all-reduces of a step would take
(2 per layer forward, 2 backward, the embedding's and the head's).

Default model: baby GPT (configs/baby_gpt.yaml: 6 layers, 6 heads, 384 wide, block 256) at batch 8
and dropout 0.0 (bench/README.md, "Tensor parallelism on one host").

  bench/tp_one_host.py [--parallm build/parallm] [--tp 2] [--rounds 3] [--iters 30] [--skip 5]
                       [--batch 8] [--dropout 0.0] [--data data/shakespeare_char] [--input input.txt]
                       [--mpirun "mpirun --oversubscribe --bind-to none"] [--no-allreduce] [--profile]
                       [key=value ...]
Run it from the source tree's root; under root, Open MPI needs OMPI_ALLOW_RUN_AS_ROOT=1 and
OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 in the environment. Standard library only.
"""
import argparse, json, os, re, shlex, shutil, statistics, subprocess, sys, tempfile


def run(cmd, env, log):
    with open(log, "w") as f:
        p = subprocess.run(cmd, env=env, stdout=f, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {shlex.join(cmd)}\n{open(log).read()[-3000:]}")


def train(a, parallm, side, base, out):
    env = dict(os.environ)
    if side == "A":
        env["OMP_NUM_THREADS"] = "1"
        cmd = [*shlex.split(a.mpirun), "-np", str(a.tp), parallm, "train", *base, f"parallel.tp={a.tp}",
               "comm.backend=mpi", f"train.out_dir={out}"]
    else:
        env["OMP_NUM_THREADS"] = str(a.tp)
        cmd = [parallm, "train", *base, f"train.out_dir={out}"]
    if a.profile:
        env["PARALLM_PROFILE"] = "1"
    log = out + ".log"
    run(cmd, env, log)
    rows = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))]
    steps = [r for r in rows if r.get("kind") == "train" and r["step"] >= a.skip]
    med = lambda k: statistics.median(r[k] for r in steps)
    return {"tok": med("tokens_per_s"), "dt": med("dt_ms"), "dtf": med("dtf_ms"), "dtb": med("dtb_ms"),
            "steps": len(steps), "cmd": cmd, "log": log, "timed_ms": sum(r["dt_ms"] for r in rows),
            "train_steps": sum(r.get("kind") == "train" for r in rows)}


def allreduce_us(a, parallm, nbytes, log):
    """Time (bench comm: the best round) of one fp32 all-reduce of nbytes (parallm's mpi backend), from bench comm."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = [*shlex.split(a.mpirun), "-np", str(a.tp), parallm, "bench", "comm", "-b", str(nbytes), "-e", str(nbytes),
           "--rounds", "3"]
    run(cmd, env, log)
    for line in open(log):
        f = line.split()
        if len(f) >= 4 and not line.startswith("#") and f[1] == str(nbytes // 4):
            return float(f[2]), (float(f[6]) if len(f) >= 7 and f[5] == "|" else None), cmd
    sys.exit(f"no result line in {log}")


def profile_table(log):
    """The PARALLM_PROFILE=1 table at the end of a run's output (rank 0's) and the sum of its ms column."""
    lines = open(log).read().splitlines()
    for i, l in enumerate(lines):
        if "profile (PARALLM_PROFILE=1)" in l:
            rows = [x for x in lines[i + 1:] if re.match(r"^\S+\s+\d+\s+[\d.]+\s+[\d.]+%$", x.strip())]
            return "\n".join([lines[i + 1], *rows]), sum(float(x.split()[2]) for x in rows)
    return "(no profile table)", 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parallm", default="build/parallm")
    ap.add_argument("--config", default="configs/baby_gpt.yaml")
    ap.add_argument("--tp", type=int, default=2, help="ranks of A, threads of B")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=30, help="train.max_iters of each run")
    ap.add_argument("--skip", type=int, default=5, help="steps below this are warm-up, not counted")
    ap.add_argument("--batch", type=int, default=8, help="global batch, the same for both sides")
    ap.add_argument("--dropout", type=float, default=0.0)
    ap.add_argument("--data", default="data/shakespeare_char")
    ap.add_argument("--input", help="tiny Shakespeare's input.txt: prepared into --data when that lacks train.bin")
    ap.add_argument("--mpirun", default="mpirun --oversubscribe --bind-to none", help="A's launcher, before -np N")
    ap.add_argument("--no-allreduce", action="store_true", help="skip timing one B*T*C all-reduce")
    ap.add_argument("--profile", action="store_true", help="PARALLM_PROFILE=1 in every run; print the last ones' tables")
    ap.add_argument("args", nargs="*", help="more key=value overrides for both sides")
    a = ap.parse_args()
    parallm = os.path.abspath(a.parallm)
    if not os.path.exists(os.path.join(a.data, "train.bin")):
        if not a.input:
            sys.exit(f"{a.data}/train.bin missing: pass --input .../tinyshakespeare/input.txt to prepare it")
        subprocess.run([parallm, "prepare", "shakespeare_char", "--input", a.input, "--out", a.data], check=True)
    if a.skip >= a.iters:
        sys.exit("--skip must be below --iters")
    base = [a.config, f"model.batch_size={a.batch}", f"model.dropout={a.dropout}", f"data.dir={a.data}",
            f"train.max_iters={a.iters}", f"train.eval_interval={a.iters + 1000}", "train.final_eval=false",
            "train.eval_iters=1", "train.sample_tokens=0", "train.log_interval=1000", "train.progress=false",
            *a.args]
    tmp = tempfile.mkdtemp(prefix="parallm_tp_bench_")
    res = {"A": [], "B": []}
    try:
        for rnd in range(a.rounds):
            for side in ("A", "B") if rnd % 2 == 0 else ("B", "A"):
                r = train(a, parallm, side, base, os.path.join(tmp, f"r{rnd}{side}"))
                res[side].append(r)
                print(f"round {rnd}: {side}: {r['tok']:8.1f} tokens/s (median of {r['steps']} steps), "
                      f"step {r['dt']:.1f} ms = fwd {r['dtf']:.1f} + bwd {r['dtb']:.1f}", flush=True)
        print(f"A: {shlex.join(res['A'][0]['cmd'])}  (OMP_NUM_THREADS=1)")
        print(f"B: {shlex.join(res['B'][0]['cmd'])}  (OMP_NUM_THREADS={a.tp})")
        med = {s: {k: statistics.median(r[k] for r in res[s]) for k in ("tok", "dt", "dtf", "dtb")} for s in res}
        for s in ("A", "B"):
            print(f"{s}: median {med[s]['tok']:.1f} tokens/s over {a.rounds} runs "
                  f"({', '.join(str(round(r['tok'])) for r in res[s])}); step {med[s]['dt']:.1f} ms = fwd "
                  f"{med[s]['dtf']:.1f} + bwd {med[s]['dtb']:.1f}")
        rounds = [ra["tok"] / rb["tok"] for ra, rb in zip(res["A"], res["B"])]
        print(f"ratio A / B (tp={a.tp} x 1 thread / 1 rank x {a.tp} threads): {med['A']['tok'] / med['B']['tok']:.3f} "
              f"(per round {', '.join(f'{x:.3f}' for x in rounds)})")
        if not a.no_allreduce:
            cfg = json.load(open(os.path.join(tmp, "r0A", "config.json")))
            L, T, C = (int(cfg[f"model.{k}"]) for k in ("n_layer", "block_size", "n_embd"))
            nbytes = 4 * a.batch * T * C
            us, peer_us, cmd = allreduce_us(a, parallm, nbytes, os.path.join(tmp, "allreduce.log"))
            n = 4 * L + 2
            share = n * us / 1000 / med["A"]["dt"]
            print(f"all-reduce of B*T*C = {nbytes // 4} floats ({nbytes / 2**20:.1f} MiB): {us:.1f} us"
                  + (f" (MPI_Allreduce {peer_us:.1f} us)" if peer_us else "")
                  + f"; {n} a step = {n * us / 1000:.1f} ms, {100 * share:.1f}% of A's step "
                  f"(A - B step: {med['A']['dt'] - med['B']['dt']:.1f} ms)\n  {shlex.join(cmd)}")
        if a.profile:
            # The ops' table covers every step and the evaluation at step 0; so do the records' dt_ms. What the
            # ops leave of the records' time is, for A, mostly communication and waiting for the peer.
            for s in ("A", "B"):
                r = res[s][-1]
                table, ops_ms = profile_table(r["log"])
                out = r["timed_ms"] - ops_ms
                print(f"profile of the last {s} run (all its steps and the eval; A: rank 0):\n{table}\n"
                      f"  ops {ops_ms:.0f} ms of the records' {r['timed_ms']:.0f} ms: outside the ops {out:.0f} ms, "
                      f"{out / r['train_steps']:.1f} ms a train step ({100 * out / r['timed_ms']:.1f}%)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

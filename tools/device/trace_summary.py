#!/usr/bin/env python3
"""Summarizes a cupti_trace.cpp timeline of a parallm training run.

A step is the span from the end of one step's AdamW kernels to the end of
the next step's. For the
steps after --skip, it prints the step time, the GPU's busy time (the union of
kernel, copy and memset intervals) and its idle time, each kernel family's
share (names shortened to the function), the longest idle gaps with the
operations on either side and the runtime calls that overlapped them (a
synchronization or a blocking copy shows there).

    python3 tools/device/trace_summary.py trace.tsv [--skip 2] [--gaps 12]
"""
import argparse
import collections
import gzip
import re
import shutil
import subprocess


def demangle(names):
    """Itanium C++ names through c++filt, where it is installed."""
    names = sorted(n for n in names if n.startswith("_Z"))
    if not names or not shutil.which("c++filt"):
        return {}
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout.split("\n")
    return dict(zip(names, out))


def short(name):
    name = name.replace("(anonymous namespace)::", "")
    name = re.sub(r"\(.*", "", name)  # drop argument lists
    name = re.sub(r"<.*>", "", name)  # and template arguments
    name = name.replace("void ", "").strip()
    return name.split("::")[-1][:60] or "?"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--skip", type=int, default=2, help="steps to leave out at the start")
    ap.add_argument("--gaps", type=int, default=12)
    ap.add_argument("--step-kernel", default="adamw", help="the optimizer's kernels end a step")
    args = ap.parse_args()
    dev, api = [], []
    opener = gzip.open if args.trace.endswith(".gz") else open
    with opener(args.trace, "rt") as f:
        for line in f:
            kind, s, e, stream, nbytes, name = line.rstrip("\n").split("\t", 5)
            rec = (int(s), int(e), kind, int(stream), int(nbytes), name)
            (api if kind == "R" else dev).append(rec)
    names = demangle({r[5] for r in dev})
    dev = sorted(r[:5] + (names.get(r[5], r[5]),) for r in dev)
    api.sort()
    # A step ends with the last of a run of consecutive optimizer kernels (one per run of parameters).
    is_opt = [r[2] == "K" and args.step_kernel in r[5] for r in dev]
    ends = [r[1] for i, r in enumerate(dev) if is_opt[i] and (i + 1 == len(dev) or not is_opt[i + 1])]
    if len(ends) < args.skip + 2:
        raise SystemExit(f"only {len(ends)} steps found (kernel {args.step_kernel}); need more than {args.skip + 1}")
    lo, hi = ends[args.skip], ends[-1]
    nsteps = len(ends) - 1 - args.skip
    window = [r for r in dev if r[0] >= lo and r[1] <= hi]
    busy, cur_s, cur_e = 0, None, None
    gaps = []
    prev = None
    for r in window:
        if cur_e is None or r[0] > cur_e:
            if cur_e is not None:
                busy += cur_e - cur_s
                gaps.append((r[0] - cur_e, prev, r))
            cur_s, cur_e = r[0], r[1]
        else:
            cur_e = max(cur_e, r[1])
        prev = r
    if cur_e is not None:
        busy += cur_e - cur_s
    span = hi - lo
    print(f"steps {nsteps}: {span / nsteps / 1e6:.3f} ms/step; GPU busy {busy / nsteps / 1e6:.3f} ms, "
          f"idle {(span - busy) / nsteps / 1e6:.3f} ms per step")
    fam = collections.defaultdict(lambda: [0, 0])
    for r in window:
        key = short(r[5]) if r[2] == "K" else r[5]
        fam[key][0] += r[1] - r[0]
        fam[key][1] += 1
    print(f"\n{'ms/step':>9} {'calls/step':>10}  kernel")
    for key, (t, n) in sorted(fam.items(), key=lambda kv: -kv[1][0]):
        print(f"{t / nsteps / 1e6:9.3f} {n / nsteps:10.1f}  {key}")
    print(f"\nlongest idle gaps (of {len(gaps)}; total idle by size: "
          f">100us {sum(g for g, _, _ in gaps if g > 100e3) / nsteps / 1e6:.3f} ms/step, "
          f"10-100us {sum(g for g, _, _ in gaps if 10e3 < g <= 100e3) / nsteps / 1e6:.3f}, "
          f"<10us {sum(g for g, _, _ in gaps if g <= 10e3) / nsteps / 1e6:.3f})")
    for g, a, b in sorted(gaps, key=lambda x: -x[0])[:args.gaps]:
        calls = collections.Counter(short(r[5]) for r in api if r[0] < b[0] and r[1] > a[1] and r[1] - r[0] > 0.3 * g)
        print(f"  {g / 1e3:8.1f} us after {short(a[5])} before {short(b[5])}; "
              f"runtime calls spanning it: {dict(calls) or '-'}")
    slow = collections.defaultdict(lambda: [0, 0])
    for r in api:
        if lo <= r[0] <= hi:
            slow[r[5]][0] += r[1] - r[0]
            slow[r[5]][1] += 1
    print(f"\nruntime calls (host time per step)")
    for key, (t, n) in sorted(slow.items(), key=lambda kv: -kv[1][0])[:12]:
        print(f"{t / nsteps / 1e6:9.3f} ms {n / nsteps:8.1f}/step  {key}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Checks a `parallm report` HTML file against the runs' own records.

Every <svg class="plot">: its data-domain and data-box give the mapping from
data to pixels; every <polyline> (data-run, data-metric "train/loss",
"eval/val_loss", ...) must hold exactly the run's records of that metric
(every data-stride-th train record) at their pixels within 0.006 px, x being
the step, or in a plot "against tokens" the tokens read before the record's
step. Every memory bar (data-run, data-category, data-bytes) must be the
run's memory.json value. Stdlib only.

usage: report_check.py REPORT.html RUN_DIR...   (prints "report_check: PASS ..." or "...: FAIL: ...")
"""
import json
import math
import os
import sys
from html.parser import HTMLParser


class Parse(HTMLParser):
    def __init__(self):
        super().__init__()
        self.plots, self.bars, self.caption, self.in_caption = [], [], "", False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "figcaption":
            self.in_caption, self.caption = True, ""
        elif tag == "svg" and a.get("class") == "plot":
            self.plots.append({"caption": self.caption, "domain": [float(v) for v in a["data-domain"].split()],
                               "box": [float(v) for v in a["data-box"].split()], "lines": []})
        elif tag == "polyline":
            pts = [tuple(float(c) for c in p.split(",")) for p in a["points"].split()]
            self.plots[-1]["lines"].append((a["data-run"], a["data-metric"], int(a["data-stride"]), pts))
        elif tag == "rect" and "data-category" in a:
            self.bars.append((a["data-run"], a["data-category"], float(a["data-bytes"])))

    def handle_endtag(self, tag):
        if tag == "figcaption":
            self.in_caption = False

    def handle_data(self, data):
        if self.in_caption:
            self.caption += data


def fail(msg):
    print(f"report_check: FAIL: {msg}")
    sys.exit(1)


def main():
    html, dirs = sys.argv[1], sys.argv[2:]
    p = Parse()
    p.feed(open(html, encoding="utf-8").read())
    runs = {}
    for d in dirs:
        recs = [json.loads(l) for l in open(os.path.join(d, "metrics.jsonl"))]
        mem = os.path.join(d, "memory.json")
        runs[os.path.basename(os.path.normpath(d))] = (recs, json.load(open(mem)) if os.path.exists(mem) else None)
    checked = points = 0
    for plot in p.plots:
        x0, x1, y0, y1 = plot["domain"]
        left, top, w, h = plot["box"]
        by_tokens = "against tokens" in plot["caption"]
        for run, metric, stride, pts in plot["lines"]:
            if run not in runs:
                fail(f"a line of run {run!r}, which was not given")
            recs = runs[run][0]
            kind, field = metric.split("/", 1)
            train = [r for r in recs if r.get("kind") == "train"]
            tokens, total = {}, 0.0
            for r in train:
                total += round(r.get("tokens_per_s", 0) * r.get("dt_ms", 0) / 1e3)
                tokens[r["step"]] = total
            want = []
            for r in [r for r in recs if r.get("kind") == kind][::stride]:
                if field not in r or not isinstance(r[field], (int, float)) or not math.isfinite(r[field]):
                    continue
                x = r["step"]
                if by_tokens:
                    before = [s for s in tokens if s < r["step"]]
                    x = tokens[max(before)] if before else 0.0
                want.append((left + (x - x0) / (x1 - x0) * w, top + h - (r[field] - y0) / (y1 - y0) * h))
            if len(want) != len(pts):
                fail(f"{plot['caption']!r}: {run} {metric} has {len(pts)} points, the records {len(want)}")
            for (gx, gy), (wx, wy) in zip(pts, want):
                if abs(gx - wx) > 0.006 or abs(gy - wy) > 0.006:
                    fail(f"{plot['caption']!r}: {run} {metric} point ({gx}, {gy}) where the records put ({wx:.3f}, {wy:.3f})")
            checked += 1
            points += len(pts)
    for run, cat, b in p.bars:
        mem = runs[run][1]
        if mem is None or mem.get(cat + "_bytes") != b:
            fail(f"memory bar {run} {cat} = {b}, memory.json says {None if mem is None else mem.get(cat + '_bytes')}")
    if checked == 0:
        fail("no plotted line")
    print(f"report_check: PASS ({len(p.plots)} plots, {checked} lines, {points} points and {len(p.bars)} memory bars "
          f"equal to the runs' records)")


if __name__ == "__main__":
    main()

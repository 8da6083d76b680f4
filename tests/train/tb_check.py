#!/usr/bin/env python3
"""An independent reader of parallm's TensorBoard event files (stdlib only).

Reads every events.out.tfevents.* file of a run directory by the documented
TFRecord framing (u64 length, masked CRC-32C of it, data, masked CRC-32C of
the data; CRC-32C computed here bit by bit, not by parallm's table) and
decodes each Event with a generic protobuf wire-format decoder (Event:
wall_time=1 double, step=2 varint, file_version=3 string, summary=5;
Summary: value=1; Value: tag=1 string, simple_value=2 float). Then checks
that the first event of each file is file_version "brain.Event:2" and that
the scalars are exactly the run's metrics.jsonl: for every record of kind K
at step S and every numeric field F (but step and batch), one scalar "K/F"
at step S equal to the value rounded to float32, and nothing else (and the
same for memory.json's numbers as "memory/F").

usage: tb_check.py RUN_DIR   (prints "tb_check: PASS ..." or "tb_check: FAIL: ...")
"""
import glob
import json
import math
import os
import struct
import sys


def crc32c(data: bytes) -> int:
    c = 0xFFFFFFFF
    for b in data:
        c ^= b
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    return c ^ 0xFFFFFFFF


def masked(data: bytes) -> int:
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def varint(buf: bytes, i: int):
    v = shift = 0
    while True:
        b = buf[i]
        i += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return v, i


def fields(buf: bytes):
    """(field number, wire type, value) of a protobuf message, in order."""
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        num, wire = key >> 3, key & 7
        if wire == 0:
            v, i = varint(buf, i)
        elif wire == 1:
            v, i = buf[i:i + 8], i + 8
        elif wire == 2:
            n, i = varint(buf, i)
            v, i = buf[i:i + n], i + n
        elif wire == 5:
            v, i = buf[i:i + 4], i + 4
        else:
            raise ValueError(f"wire type {wire}")
        yield num, wire, v


def events(path: str):
    data = open(path, "rb").read()
    i = 0
    while i < len(data):
        head = data[i:i + 8]
        (n,) = struct.unpack("<Q", head)
        (crc_len,) = struct.unpack("<I", data[i + 8:i + 12])
        if crc_len != masked(head):
            raise ValueError(f"{path}: bad length CRC at byte {i}")
        body = data[i + 12:i + 12 + n]
        (crc_body,) = struct.unpack("<I", data[i + 12 + n:i + 16 + n])
        if len(body) != n or crc_body != masked(body):
            raise ValueError(f"{path}: bad data CRC at byte {i}")
        i += 16 + n
        ev = {"step": 0, "values": []}
        for num, wire, v in fields(body):
            if num == 1 and wire == 1:
                ev["wall_time"] = struct.unpack("<d", v)[0]
            elif num == 2 and wire == 0:
                ev["step"] = v
            elif num == 3 and wire == 2:
                ev["file_version"] = v.decode()
            elif num == 5 and wire == 2:
                for sn, sw, sv in fields(v):
                    if sn == 1 and sw == 2:
                        tag, val = None, None
                        for vn, vw, vv in fields(sv):
                            if vn == 1 and vw == 2:
                                tag = vv.decode()
                            elif vn == 2 and vw == 5:
                                val = struct.unpack("<f", vv)[0]
                        ev["values"].append((tag, val))
        yield ev


def f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


def main() -> int:
    run = sys.argv[1]
    files = sorted(glob.glob(os.path.join(run, "events.out.tfevents.*")))
    if not files:
        print(f"tb_check: FAIL: no events.out.tfevents.* in {run}")
        return 1
    got = []
    for f in files:
        evs = list(events(f))
        if not evs or evs[0].get("file_version") != "brain.Event:2":
            print(f"tb_check: FAIL: {f} does not start with file_version brain.Event:2")
            return 1
        for ev in evs[1:]:
            if "wall_time" not in ev or len(ev["values"]) != 1:
                print(f"tb_check: FAIL: {f}: an event without wall_time or one value: {ev}")
                return 1
            tag, val = ev["values"][0]
            got.append((tag, ev["step"], val))
    records = [json.loads(line) for line in open(os.path.join(run, "metrics.jsonl"))]
    memory = os.path.join(run, "memory.json")
    if os.path.exists(memory):
        records.append(dict(json.load(open(memory)), kind="memory"))
    want = []
    for r in records:
        kind = r.get("kind", "metrics")
        for k, v in r.items():
            if k in ("step", "batch") or isinstance(v, bool) or not isinstance(v, (int, float)):
                continue
            want.append((f"{kind}/{k}", r.get("step", 0), f32(float(v))))
    if len(got) != len(want):
        print(f"tb_check: FAIL: {len(got)} scalars in the event files, {len(want)} numbers in metrics.jsonl")
        return 1
    for g, w in zip(sorted(got, key=lambda x: x[:2]), sorted(want, key=lambda x: x[:2])):
        same = g[:2] == w[:2] and (g[2] == w[2] or (math.isnan(g[2]) and math.isnan(w[2])))
        if not same:
            print(f"tb_check: FAIL: event {g} but metrics.jsonl says {w}")
            return 1
    tags = sorted({t for t, _, _ in got})
    print(f"tb_check: PASS ({len(files)} file(s), {len(got)} scalars equal to metrics.jsonl; tags: {', '.join(tags)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

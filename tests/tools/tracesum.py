#!/usr/bin/env python3
"""tests/tools/tracesum.py - validates dtrain --trace files and sums them up per rank.

usage: tracesum.py [--layers a,b,...] [--expect-comm] TRACE.json [TRACE.rank1.json ...]
Structure (Chrome trace-event JSON): an object with a traceEvents list; metadata, complete ("X")
and instant ("i") events only; every X event with a name, a category, ts >= 0 and dur >= 0, the
file's rank as pid; spans on one thread either nested or disjoint (what the viewers need).
With --layers each layer needs forward and backward spans; with --expect-comm, collectives and
waits. Then prints, per rank, the shares of the training time (evaluation and checkpoints left
out) in compute (forward, backward, optimizer, data), communication (blocking collectives) and
waiting (on overlapped gradient buckets and messages). Exit 0, or 1 naming the first problem.
"""
import json, sys

CATS = {"forward", "backward", "recompute", "optimizer", "data", "comm", "wait", "eval", "checkpoint", "step", "shard"}


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def load(path):
    try:
        t = json.load(open(path))
    except ValueError as e:
        fail("%s: not JSON: %s" % (path, e))
    if not isinstance(t, dict) or not isinstance(t.get("traceEvents"), list):
        fail("%s: no traceEvents list" % path)
    rank = t.get("otherData", {}).get("rank")
    xs = []
    for i, e in enumerate(t["traceEvents"]):
        ph = e.get("ph")
        if ph not in ("X", "i", "M"):
            fail("%s: event %d: phase %r" % (path, i, ph))
        if e.get("pid") != rank or not isinstance(e.get("tid"), int):
            fail("%s: event %d: pid %r tid %r (rank %r)" % (path, i, e.get("pid"), e.get("tid"), rank))
        if ph == "M":
            continue
        if not isinstance(e.get("name"), str) or e.get("cat") not in CATS:
            fail("%s: event %d: name %r cat %r" % (path, i, e.get("name"), e.get("cat")))
        if not isinstance(e.get("ts"), (int, float)) or e["ts"] < 0:
            fail("%s: event %d: ts %r" % (path, i, e.get("ts")))
        if ph == "X":
            if not isinstance(e.get("dur"), (int, float)) or e["dur"] < 0:
                fail("%s: event %d: dur %r" % (path, i, e.get("dur")))
            xs.append(e)
    # nested or disjoint: walk by start (longer first), keep a stack of open spans
    xs.sort(key=lambda e: (e["ts"], -e["dur"]))
    stack = []
    eps = 0.002  # microseconds: the file's rounding
    for e in xs:
        while stack and stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"] + eps:
            stack.pop()
        if stack and e["ts"] + e["dur"] > stack[-1]["ts"] + stack[-1]["dur"] + eps:
            fail("%s: spans overlap without nesting: %s [%g, +%g] and %s [%g, +%g]" % (
                path, stack[-1]["name"], stack[-1]["ts"], stack[-1]["dur"], e["name"], e["ts"], e["dur"]))
        e["outer"] = [s["cat"] for s in stack]
        stack.append(e)
    return rank, xs, t


def main():
    args = sys.argv[1:]
    layers, comm = [], False
    while args and args[0].startswith("--"):
        a = args.pop(0)
        if a == "--layers":
            layers = args.pop(0).split(",")
        elif a == "--expect-comm":
            comm = True
    if not args:
        fail("no trace files")
    print("%-6s %10s %9s %9s %9s %9s   (ms of training, evaluation and checkpoints left out)" %
          ("rank", "train ms", "compute", "comm", "waiting", "other"))
    for path in args:
        rank, xs, _ = load(path)
        names = {(e["cat"], e["name"].split(" ")[0]) for e in xs}
        for l in layers:
            for c in ("forward", "backward"):
                if (c, l) not in names:
                    fail("%s: no %s span of layer %s" % (path, c, l))
        for c in ("optimizer", "data"):
            if not any(e["cat"] == c for e in xs):
                fail("%s: no %s span" % (path, c))
        if comm and not (any(e["cat"] == "wait" for e in xs) and any(e["cat"] == "comm" for e in xs)):
            fail("%s: no collective or wait spans" % path)
        top = [e for e in xs if not any(o in ("eval", "checkpoint") for o in e["outer"])]
        side = sum(e["dur"] for e in xs if e["cat"] in ("eval", "checkpoint") and not e["outer"])
        t0 = min(e["ts"] for e in xs)
        t1 = max(e["ts"] + e["dur"] for e in xs)
        train = (t1 - t0) - side
        tally = {"compute": 0.0, "comm": 0.0, "wait": 0.0}
        for e in top:
            if e["outer"]:
                continue  # counted in its outer span
            c = e["cat"]
            if c in ("forward", "backward", "recompute", "optimizer", "data"):
                tally["compute"] += e["dur"]
            elif c in ("comm", "wait"):
                tally[c] += e["dur"]
        other = train - sum(tally.values())
        pct = lambda v: "%8.1f%%" % (100.0 * v / train if train > 0 else 0)
        print("%-6s %10.1f %s %s %s %s" % (rank, train / 1e3, pct(tally["compute"]), pct(tally["comm"]),
                                           pct(tally["wait"]), pct(other)))
    print("ok: %d trace file(s) valid" % len(args))


main()

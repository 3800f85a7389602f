#!/usr/bin/env bash
# tests/cli/bench.sh - `dtrain bench`: the table and the --json document (valid JSON with every
# field, one object per model), usage errors, the allreduce fields under `mpirun -np 2`, pipeline
# stages (2 stages under -np 2 with the one-rank comparison, data 2 x pipeline 2 under -np 4): the
# per-stage fields and bubbles within [0, 1], and the bench flags documented in dtrain(1). No timing
# is asserted: only that the figures exist and are consistent.
. "$(dirname "$0")/lib.sh"
cd "$top_srcdir"
MPIRUN=${MPIRUN:-mpirun}
SPEC=tests/cli/dp-mlp.yaml
PY=$(command -v python3 || true)
# a sanitizer build times its own FMA loop instrumented (its peak read 25 GFLOP/s against OpenBLAS's
# uninstrumented 54 in fc1 once): the layers-below-the-peaks check is for the plain build
grep -qa __asan_init "$DTRAIN" && export DT_SANITIZED=1 || export DT_SANITIZED=0

expect_rc 0 "bench --help" "$DTRAIN" bench --help
expect_rc 2 "bench --iters 0" "$DTRAIN" bench "$SPEC" --iters 0
expect_rc 2 "bench unknown flag" "$DTRAIN" bench "$SPEC" --itres 3
expect_rc 2 "bench missing spec" "$DTRAIN" bench no/such.yaml
expect_rc 2 "bench without models here" sh -c "cd '$TMP' && exec '$DTRAIN' bench --iters 1"
grep -q 'models/mlp.yaml not found; skipped' "$TMP/err" || fail "bench names the bundled models it skips"

expect_rc 0 "bench table" "$DTRAIN" bench "$SPEC" --iters 3 --warmup 1 --threads 1
for w in 'fwd ms' 'fc1' '(update)' 'step:' 'samples/s' 'SGEMM' 'peak RSS' 'memory bandwidth (triad' '% BW'; do
  grep -qF "$w" "$TMP/out" || fail "bench table lacks '$w'"
done

# check_json FILE NMODELS RANKS: the document parses and has every field
check_json() {
  "$PY" - "$@" <<'PY'
import json, os, sys
path, nmodels, ranks = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
doc = json.load(open(path))
assert isinstance(doc, list) and len(doc) == nmodels, f"{len(doc)} objects, wanted {nmodels}"
top = ["model", "file", "batch", "local_batch", "ranks", "threads", "iters", "warmup", "params",
       "flops_per_sample", "blas_core", "sgemm_gflops", "sgemm_gflops_all_ranks", "fma_gflops_per_thread",
       "fma_gflops", "triad_gbs", "layers", "data_ms", "loss_ms", "update_ms", "update_gbs", "step_ms",
       "samples_per_sec", "gflops", "step_flops_per_sample", "peak_fraction", "peak_rss_mib", "planned_mib",
       "allreduce"]
lay = ["name", "type", "output", "flops_per_sample", "fwd_ms", "bwd_ms", "share", "fwd_gflops", "bwd_gflops",
       "memory_bound", "fwd_gbs", "bwd_gbs", "peak_fraction"]
ar = ["bytes", "buckets", "mpi_ms", "mpi_gbs", "dtrain_ms", "dtrain_gbs", "ratio", "backward_ms",
      "overlapped_ms", "hidden", "exposed_ms"]
for m in doc:
    miss = [k for k in top if k not in m]
    assert not miss, f"missing {miss}"
    assert m["ranks"] == ranks and m["samples_per_sec"] > 0 and m["step_ms"] > 0 and m["peak_rss_mib"] > 0
    assert m["sgemm_gflops"] > 0 and m["fma_gflops_per_thread"] > 0
    assert [l["name"] for l in m["layers"]][:1] == ["fc1"] or m["model"] != "dp-mlp"
    assert m["triad_gbs"] > 0 and m["update_gbs"] > 0
    # no layer computes faster than the cores' FMA units can (the FMA loop is timed in CPU time, so
    # a busy machine does not lower it; 2x for SMT siblings sharing a core meanwhile, and for the
    # sanitizer build under make -j2, where fc1's backward read 1.51x once): a gross FLOP miscount
    # shows here (fc1's backward counted at twice its FLOPs came out at ~2.5x the peaks; issue 15);
    # the exact count below, free of timing, pins smaller ones
    peak = max(m["sgemm_gflops"], m["fma_gflops"])
    for i, l in enumerate(m["layers"]):
        miss = [k for k in lay if k not in l]
        assert not miss, f"layer {l.get('name')} misses {miss}"
        for k in ("fwd_gflops", "bwd_gflops"):
            assert os.environ["DT_SANITIZED"] == "1" or l[k] <= 2.0 * peak, f"layer {l['name']} {k} {l[k]:.1f} above the peaks ({peak:.1f} GFLOP/s)"
        # and the count itself, free of timing: backward = forward x (dx unless first + dW)
        if l["type"] in ("fc", "conv") and l["fwd_gflops"] > 0 and l["bwd_gflops"] > 0:
            r = (l["bwd_gflops"] * l["bwd_ms"]) / (l["fwd_gflops"] * l["fwd_ms"])
            want = 1 if i == 0 else 2
            assert abs(r - want) < 1e-3, f"layer {l['name']}: backward counts {r:.3f} x its forward FLOPs, wanted {want}"
        assert l["memory_bound"] == (l["type"] in ("activation", "dropout", "maxpool", "avgpool", "global_avgpool",
                                                   "batchnorm", "flatten")), l
        assert (l["fwd_gbs"] > 0) == l["memory_bound"] and l["peak_fraction"] >= 0
    assert 0.99 < sum(l["share"] for l in m["layers"]) + (m["data_ms"] + m["loss_ms"] + m["update_ms"]) / \
        (sum(l["fwd_ms"] + l["bwd_ms"] for l in m["layers"]) + m["data_ms"] + m["loss_ms"] + m["update_ms"]) < 1.01
    if ranks == 1:
        assert m["allreduce"] is None, "allreduce must be null on one rank"
    else:
        a = m["allreduce"]
        miss = [k for k in ar if k not in a]
        assert not miss, f"allreduce misses {miss}"
        assert a["bytes"] == 4 * m["params"] and a["buckets"] >= 1 and 0 <= a["hidden"] <= 1
        assert a["mpi_gbs"] > 0 and a["dtrain_gbs"] > 0
PY
}

# check_pipe_json FILE DATA PIPELINE SCHEDULE ONE_RANK: one model's pipeline object, every field
check_pipe_json() {
  "$PY" - "$@" <<'PY'
import json, sys
path, D, P, sched, one = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
doc = json.load(open(path))
assert isinstance(doc, list) and len(doc) == 1, f"{len(doc)} objects"
m = doc[0]
top = ["model", "file", "batch", "local_batch", "ranks", "threads", "iters", "warmup", "params",
       "flops_per_sample", "blas_core", "strategy", "grid", "schedule", "micro_batches", "micro_batch_size",
       "clip_norm", "stages", "pipeline", "comm", "update_ms", "step_ms", "samples_per_sec", "peak_rss_mib",
       "one_rank"]
st = ["stage", "first_layer", "last_layer", "layers", "params", "micro_batches", "fwd_ms", "bwd_ms", "wgt_ms",
      "data_ms", "loss_ms", "busy_ms", "idle_ms", "walk_ms", "recv_act_ms", "recv_grad_ms", "send_wait_ms",
      "send_post_ms", "p2p_ms", "allreduce_ms", "norm_ms", "update_ms", "step_ms", "sim_idle_ms", "sim_steady_idle_ms"]
pp = ["walk_ms", "bubble", "bubble_theory", "bubble_sim", "sim_walk_ms", "sim_p2p_ms", "f_ms", "b_ms", "w_ms",
      "slowest_stage", "waits_yield", "sim_send_ms", "sim_recv_ms", "bubble_sim_free", "bubble_theory_steady",
      "bubble_sim_steady", "bubble_sim_steady_free", "sim_steady_step_ms", "bubble_sim_run", "sim_steps"]
st += ["steady_idle_ms"]
pp += ["bubble_steady", "steady_step_ms"]
cm = ["recv_act_ms", "recv_grad_ms", "send_wait_ms", "send_post_ms", "p2p_ms", "dp_allreduce_ms", "norm_allreduce_ms"]
miss = [k for k in top if k not in m]
assert not miss, f"missing {miss}"
assert m["ranks"] == D * P and m["grid"] == {"data": D, "pipeline": P, "tensor": 1}, m["grid"]
assert m["schedule"] == sched and m["samples_per_sec"] > 0 and m["step_ms"] > 0
assert len(m["stages"]) == P
assert sum(s["params"] for s in m["stages"]) == m["params"]
for s in m["stages"]:
    miss = [k for k in st if k not in s]
    assert not miss, f"stage {s.get('stage')} misses {miss}"
    assert s["micro_batches"] == m["micro_batches"] and s["fwd_ms"] > 0 and s["bwd_ms"] > 0
    assert 0 <= s["busy_ms"] <= s["walk_ms"] + 1e-9 and s["idle_ms"] >= 0
    assert s["busy_ms"] >= s["micro_batches"] * (s["fwd_ms"] + s["bwd_ms"]) * 0.999
assert m["stages"][0]["data_ms"] > 0 and m["stages"][-1]["data_ms"] == 0
assert m["stages"][-1]["loss_ms"] > 0 and m["stages"][0]["loss_ms"] == 0
assert m["stages"][0]["recv_act_ms"] == 0 and m["stages"][-1]["recv_grad_ms"] == 0
p = m["pipeline"]
miss = [k for k in pp if k not in p]
assert not miss, f"pipeline misses {miss}"
for k in ("bubble", "bubble_theory", "bubble_sim"):
    assert 0 <= p[k] <= 1, f"{k} {p[k]} outside [0, 1]"
# messages only delay a fixed order: free ones cannot give a larger bubble
assert 0 <= p["bubble_sim_free"] <= p["bubble_sim"] + 1e-6, (p["bubble_sim_free"], p["bubble_sim"])
assert abs(p["bubble_theory"] - (P - 1) / (m["micro_batches"] + P - 1)) < 1e-5   # 6 digits in the JSON
# steps back to back: gpipe's and 1f1b's first stage starts each step and ends it last, so the
# steady state is one step's, in theory and in the simulator's play of the timed steps
assert abs(p["bubble_theory_steady"] - p["bubble_theory"]) < 1e-5, (p["bubble_theory_steady"], p["bubble_theory"])
assert p["sim_steps"] == max(2, m["iters"]) and p["sim_steady_step_ms"] > 0
assert abs(p["bubble_sim_steady"] - p["bubble_sim"]) < 1e-5 and abs(p["bubble_sim_run"] - p["bubble_sim"]) < 1e-5
assert 0 <= p["bubble_sim_steady_free"] <= p["bubble_sim_steady"] + 1e-6
for s in m["stages"]:
    assert abs(s["sim_steady_idle_ms"] - (p["sim_steady_step_ms"] - s["busy_ms"])) < 1e-3 * p["sim_steady_step_ms"], s
assert p["walk_ms"] == max(s["walk_ms"] for s in m["stages"]) and 0 <= p["slowest_stage"] < P
# the steady state: the back-to-back steps' wall time less each stage's F, B, W and update
T = p["steady_step_ms"]
assert T > 0 and 0 <= p["bubble_steady"] < 1, (T, p["bubble_steady"])
for s in m["stages"]:
    assert abs(s["steady_idle_ms"] - (T - s["busy_ms"] - s["update_ms"])) < 1e-3 * T and s["steady_idle_ms"] >= -1e-6 * T
assert abs(p["bubble_steady"] - sum(s["steady_idle_ms"] for s in m["stages"]) / (P * T)) < 1e-4
# a waiting rank yields its core only when the node's ranks want more threads than it has cores
# (every rank of these runs is on this machine)
import os
assert p["waits_yield"] == (m["ranks"] * m["threads"] > os.cpu_count()), (p["waits_yield"], m["threads"])
assert p["sim_send_ms"] > 0 and p["sim_recv_ms"] >= 0   # the messages' own costs, given to the simulator
c = m["comm"]
miss = [k for k in cm if k not in c]
assert not miss, f"comm misses {miss}"
assert all(c[k] >= 0 for k in cm) and (c["dp_allreduce_ms"] > 0) == (D > 1)
if one:
    o = m["one_rank"]
    assert o and o["step_ms"] > 0 and o["samples_per_sec"] > 0 and o["speedup"] > 0, o
else:
    assert m["one_rank"] is None
PY
}

if [ -z "$PY" ]; then
  echo "note: no python3; the JSON is not parsed"
else
  expect_rc 0 "bench --json (2 models)" "$DTRAIN" bench "$SPEC" tests/cli/dp-cnn.yaml --iters 3 --warmup 1 --threads 1 --json
  if check_json "$TMP/out" 2 1 2>"$TMP/py.err"; then pass "bench --json has every field"
  else fail "bench --json document:"; sed 's/^/  | /' "$TMP/py.err" | tail -5; fi
  grep -q 'note\|error' "$TMP/out" && fail "bench --json prints only JSON on stdout"

  # a first recurrent layer's backward: both weight gradients and dh carried back through the steps
  # (not one forward's worth, which left the carry out), the inner layers' dX, bptt's cuts uncarried.
  # dp-lstm: T 8, I 6, H 24: (2*8*96*6 + 2*2*7*96*24) / (2*8*96*30) = 1.6; tp-gru: 2 layers of H 12,
  # bptt 3 (5 of 7 steps carried): 38016 / 24192
  expect_rc 0 "bench --json (lstm, gru)" "$DTRAIN" bench tests/cli/dp-lstm.yaml tests/cli/tp-gru.yaml --iters 1 \
    --warmup 0 --threads 1 --json
  if "$PY" - "$TMP/out" <<'PY' 2>"$TMP/py.err"
import json, sys
for m, want in zip(json.load(open(sys.argv[1])), (1.6, 38016 / 24192)):
    l = m["layers"][0]
    r = (l["bwd_gflops"] * l["bwd_ms"]) / (l["fwd_gflops"] * l["fwd_ms"])
    assert abs(r - want) < 1e-3, f"{m['model']}: backward counts {r:.4f} x its forward FLOPs, wanted {want:.4f}"
PY
  then pass "bench counts a recurrent layer's backward carry"
  else fail "bench's recurrent backward count:"; sed 's/^/  | /' "$TMP/py.err" | tail -5; fi

  if command -v "$MPIRUN" >/dev/null; then
    expect_rc 0 "mpirun -np 2 bench --json" timeout 120 "$MPIRUN" -np 2 "$DTRAIN" bench "$SPEC" --iters 3 --warmup 1 --threads 1 --json
    if check_json "$TMP/out" 1 2 2>"$TMP/py.err"; then pass "bench --json under mpirun has the allreduce fields"
    else fail "bench --json under mpirun:"; sed 's/^/  | /' "$TMP/py.err" | tail -5; fi

    # issue 15's case: the bundled mlp's fc1 (784 -> 256, the first layer) on 2 ranks x 1 thread,
    # where a backward counted at twice its FLOPs came out above both peaks
    expect_rc 0 "mpirun -np 2 bench models/mlp.yaml --threads 1" timeout 120 "$MPIRUN" -np 2 "$DTRAIN" bench \
      models/mlp.yaml --iters 5 --warmup 2 --threads 1 --json
    if check_json "$TMP/out" 1 2 2>"$TMP/py.err"; then pass "bench: every layer's GFLOP/s below the measured peaks"
    else fail "bench figures against the peaks:"; sed 's/^/  | /' "$TMP/py.err" | tail -5; fi

    # pipeline stages: the real step of each stage, few steps
    printf 'partition: {strategy: model, micro_batches: 4, schedule: 1f1b}\n' >"$TMP/pp2.yaml"
    printf 'partition: {strategy: hybrid, data: 2, pipeline: 2, micro_batches: 2, schedule: gpipe}\n' >"$TMP/hyb.yaml"
    PPFLAGS="--iters 3 --warmup 1 --threads 1 --json"
    expect_rc 0 "mpirun -np 2 bench --cluster (2 stages) --one-rank" timeout 120 "$MPIRUN" -np 2 "$DTRAIN" bench \
      tests/cli/pp-mlp.yaml --cluster "$TMP/pp2.yaml" $PPFLAGS --one-rank
    if check_pipe_json "$TMP/out" 1 2 1f1b 1 2>"$TMP/py.err"; then pass "bench --json with 2 stages has the per-stage fields"
    else fail "bench --json with 2 stages:"; sed 's/^/  | /' "$TMP/py.err" | tail -5; fi
    expect_rc 0 "mpirun -np 4 bench --cluster (data 2 x pipeline 2)" timeout 120 "$MPIRUN" -np 4 "$DTRAIN" bench \
      tests/cli/pp-lstm.yaml --cluster "$TMP/hyb.yaml" $PPFLAGS
    if check_pipe_json "$TMP/out" 2 2 gpipe 0 2>"$TMP/py.err"; then pass "bench --json with data 2 x pipeline 2"
    else fail "bench --json with data 2 x pipeline 2:"; sed 's/^/  | /' "$TMP/py.err" | tail -5; fi
    # every key of the pipeline object is documented in dtrain-bench(1)
    for k in $("$PY" -c 'import json, sys
def keys(x):
    if isinstance(x, dict):
        for k, v in x.items(): yield k; yield from keys(v)
    elif isinstance(x, list):
        for v in x: yield from keys(v)
print(" ".join(sorted(set(keys(json.load(open(sys.argv[1])))))))' "$TMP/out"); do
      grep -qE "(^\.BR? |\" )$k( |\"|\$)" man/dtrain-bench.1 || fail "dtrain-bench.1 does not document the JSON field $k"
    done
    expect_rc 0 "mpirun -np 2 bench --cluster table" timeout 120 "$MPIRUN" -np 2 "$DTRAIN" bench \
      tests/cli/pp-mlp.yaml --cluster "$TMP/pp2.yaml" --iters 2 --warmup 0 --threads 1
    for w in 'F ms/mb' 'recv grad' 'bubble' 'simulated' 'steady' 'steps back to back' 'gradient-norm all-reduce' 'samples/s' 'slowest stage'; do
      grep -qF "$w" "$TMP/out" || fail "pipeline bench table lacks '$w'"
    done
    [ "$(grep -c '^[01]  *fc' "$TMP/out")" = 2 ] || fail "pipeline bench table: not one row per stage"
  else
    echo "note: no mpirun; the allreduce fields are not checked"
  fi
fi

# the interconnect: --network needs two ranks; its fit is what dtrain plan's network key takes
if command -v mpirun >/dev/null 2>&1; then
  expect_rc 2 "bench --network on one rank" "$DTRAIN" bench --network
  grep -q "run it under mpirun -np 2" "$TMP/err" || fail "network message: $(cat "$TMP/err")"
  expect_rc 0 "bench --network on 2 ranks" timeout -k 5 120 mpirun -np 2 "$DTRAIN" bench --network --iters 2 --json
  python3 -c "
import json, sys
j = json.load(open(sys.argv[1]))
assert j['ranks'] == 2 and len(j['points']) == 8 and j['latency_us'] >= 0 and j['bandwidth_gbs'] > 0
assert j['send_overhead_us'] >= 0 and j['send_overhead_gbs'] >= 0
assert all(p['p2p_us'] > 0 and p['allreduce_us'] > 0 and p['isend_us'] >= 0 for p in j['points'])
# the planner's bandwidth: the better of the ping-pong's and a stream's (one pair on one node)
assert j['stream_pairs'] == 1 and j['stream_bandwidth_gbs'] > 0 and j['p2p_bandwidth_gbs'] > 0
assert j['bandwidth_gbs'] == max(j['stream_bandwidth_gbs'], j['p2p_bandwidth_gbs'])
" "$TMP/out" && pass "network JSON: 8 sizes, alpha and beta, the stream's bandwidth" || fail "network JSON: $(head -c 300 "$TMP/out")"
  # the TCP eager limit is the one in force, read from Open MPI (64 KiB unless set)
  expect_rc 0 "bench --network with btl_tcp_eager_limit 100000" timeout -k 5 120 \
    mpirun --mca btl_tcp_eager_limit 100000 -np 2 "$DTRAIN" bench --network --iters 1 --json
  python3 -c "
import json, sys
assert abs(json.load(open(sys.argv[1]))['eager_kb'] - 100000 / 1024) < 0.01
" "$TMP/out" && pass "network JSON: eager_kb follows btl_tcp_eager_limit" || fail "eager_kb: $(grep eager "$TMP/out")"
fi

# every flag of `dtrain bench --help` is in dtrain(1)
for flag in $("$DTRAIN" bench --help | grep -oE -- '--[A-Za-z0-9][A-Za-z0-9-]*' | sort -u); do
  esc=$(printf '%s' "$flag" | sed 's/-/\\-/g')
  grep -qF -- "$esc" man/dtrain.1 || fail "dtrain.1 does not document bench $flag"
done
finish

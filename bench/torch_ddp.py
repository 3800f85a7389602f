#!/usr/bin/env python3
"""bench/torch_ddp.py - PyTorch DistributedDataParallel (gloo, localhost only) training-step
throughput of a dtrain model, for comparison with `mpirun -np N dtrain bench MODEL`: N processes
x --threads threads, the global batch split evenly over them, random in-memory data, median step
time (forward + loss + backward with DDP's bucketed allreduce + optimizer step) of the slowest rank.

usage: torch_ddp.py MODEL [--procs N] [--threads N] [--batch N] [--steps N] [--warmup N] [--json]
MODEL as for torch_models.py (models/MODEL.yaml, a spec path or a built-in).
"""
import argparse, json, os, socket, statistics, sys, time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_models as tm  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(rank, a, port, q):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", rank=rank, world_size=a.procs)
    spec, _ = tm.load_spec(a.model)
    torch.manual_seed(0)  # the same initial weights on every rank (DDP also broadcasts rank 0's)
    model, shape, ids, out = tm.build(spec)
    B = a.batch or spec.get("train", {}).get("batch", 128)
    lo, hi = B * rank // a.procs, B * (rank + 1) // a.procs  # this rank's slice, as dtrain
    ddp = DDP(model)
    opt, lossf = tm.optimizer(spec, ddp.parameters()), tm.loss_fn(spec)
    gen = torch.Generator().manual_seed(1 + rank)
    pool = [tm.random_batch(spec, shape, ids, out, hi - lo, gen) for _ in range(2)]
    ddp.train()
    times = []
    for s in range(a.warmup + a.steps):
        xb, yb = pool[s % 2]
        t0 = time.perf_counter()
        tm.step(ddp, opt, lossf, xb, yb)
        if s >= a.warmup:
            times.append(time.perf_counter() - t0)
    med = torch.tensor([statistics.median(times)], dtype=torch.float64)
    dist.all_reduce(med, op=dist.ReduceOp.MAX)
    if rank == 0:
        q.put({"model": spec["name"], "framework": "torch-ddp", "torch": torch.__version__, "backend": "gloo",
               "procs": a.procs, "threads": a.threads, "batch": B, "steps": a.steps,
               "step_ms": med.item() * 1e3, "samples_per_sec": B / med.item(),
               "peak_rss_mib_rank0": tm.peak_rss_mib()})
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description="PyTorch DDP (gloo) throughput of a dtrain model")
    ap.add_argument("model")
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="torch threads per process")
    ap.add_argument("--batch", type=int, default=0, help="global batch (default: the spec's)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    mp.start_processes(worker, args=(a, free_port(), q), nprocs=a.procs, join=True, start_method="spawn")
    r = q.get()
    if a.json:
        print(json.dumps(r))
    else:
        print(f"torch {r['torch']} DDP/gloo {r['model']}: {a.procs} procs x {a.threads} threads, global batch "
              f"{r['batch']}: {r['samples_per_sec']:.0f} samples/s ({r['step_ms']:.3f} ms/step, slowest rank's "
              f"median of {a.steps})")


if __name__ == "__main__":
    main()

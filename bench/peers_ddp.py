"""PyTorch DDP peer of `make bench-dist` (bench/dist_bench.sh): the digits MLP's train step on 1
and 2 ranks with the gloo backend, the same per-rank batch as train_digits --distributed.

The model, data and optimizer are train_digits' (samples/train_digits.cc): Linear(64,64) - relu
- Linear(64,10), cross-entropy, Adam lr 3e-3; a global batch of 64 training rows, each of W
ranks taking 64 / W of them. Each rank uses its share of the cores (torch.set_num_threads), as
metajit's ranks do. The median time of a step (forward, backward with DDP's all-reduce, Adam)
after WARMUP steps, as rank 0 measured it, in microseconds.

  python3 bench/peers_ddp.py [--ranks 1 2]
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peers_training import load_digits  # noqa: E402

WARMUP, STEPS, BATCH = 50, 400, 64


def run(rank, world, port, out):
    import numpy as np
    import torch
    import torch.distributed as td
    from torch.nn.parallel import DistributedDataParallel as DDP

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    td.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    torch.manual_seed(0)
    x, y = load_digits(np)
    train = np.arange(len(x)) % 5 != 4
    xt, yt = torch.from_numpy(x[train]), torch.from_numpy(y[train])
    model = DDP(torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                    torch.nn.Linear(64, 10)))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    rows = BATCH // world
    batches = len(xt) // BATCH
    times = []
    for s in range(WARMUP + STEPS):
        first = (s % batches) * BATCH + rank * rows
        xb, yb = xt[first:first + rows], yt[first:first + rows]
        td.barrier()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
        t = time.perf_counter() - t0
        if s >= WARMUP:
            times.append(t)
    if rank == 0:
        out.put(statistics.median(times) * 1e6)
    td.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    args = ap.parse_args()
    try:
        import torch  # noqa: F401
        import torch.multiprocessing as mp
    except ImportError:
        print("PyTorch DDP: skipped (torch is not installed; make bench-deps installs it)")
        return
    results = []
    for i, world in enumerate(args.ranks):
        ctx = mp.get_context("spawn")
        out = ctx.Queue()
        procs = [ctx.Process(target=run, args=(r, world, 29500 + i, out)) for r in range(world)]
        for p in procs:
            p.start()
        us = None
        while us is None:  # a rank that fails ends the wait, not a timeout
            try:
                us = out.get(timeout=1)
            except Exception:  # queue.Empty
                if any(p.exitcode not in (None, 0) for p in procs):
                    for p in procs:
                        p.kill()
                    sys.exit(f"PyTorch DDP: a rank failed (exit codes {[p.exitcode for p in procs]})")
        for p in procs:
            p.join()
        results.append(f"{world} rank{'s' if world > 1 else ''} {us:.1f} us")
    print("PyTorch DDP (gloo) digits MLP step (global batch 64): " + ", ".join(results))


if __name__ == "__main__":
    main()

"""PyTorch DDP peer of `make bench-dist` (bench/dist_bench.sh): the digits MLP's train step on 1
and 2 ranks with the gloo backend, the same per-rank batch as train_digits --distributed, and
with --gpt the GPT's step as train_gpt --distributed runs it (dropout 0).

The model, data and optimizer are train_digits' (samples/train_digits.cc): Linear(64,64) - relu
- Linear(64,10), cross-entropy, Adam lr 3e-3; a global batch of 64 training rows, each of W
ranks taking 64 / W of them. Each rank uses its share of the cores (torch.set_num_threads), as
metajit's ranks do. The median time of a step (forward, backward with DDP's all-reduce, Adam)
after WARMUP steps, as rank 0 measured it, in microseconds.

  python3 bench/peers_ddp.py [--ranks 1 2] [--gpt V L D H T B]
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peers_training import load_digits  # noqa: E402

WARMUP, STEPS, BATCH = 50, 400, 64
GPT_WARMUP, GPT_STEPS = 5, 40  # train_gpt --steps 80 times its last 40


def digits_step(torch, rank, world):
    """train_digits' model, data and Adam; each step takes this rank's rows of the next batch."""
    import numpy as np
    from torch.nn.parallel import DistributedDataParallel as DDP
    x, y = load_digits(np)
    train = np.arange(len(x)) % 5 != 4
    xt, yt = torch.from_numpy(x[train]), torch.from_numpy(y[train])
    model = DDP(torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                    torch.nn.Linear(64, 10)))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    rows = BATCH // world
    batches = len(xt) // BATCH
    state = {"s": 0}

    def step():
        first = (state["s"] % batches) * BATCH + rank * rows
        state["s"] += 1
        xb, yb = xt[first:first + rows], yt[first:first + rows]
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
    return step


def gpt_step(torch, rank, world, cfg):
    """samples/gpt_model.h's GPT (dropout 0) with train_gpt's AdamW and clipping, on random
    windows of its vocabulary: the step's time does not depend on the characters."""
    import torch.nn.functional as F
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP
    V, L, D, H, T, B = (cfg[k] for k in ("vocab", "layers", "d_model", "heads", "context",
                                          "batch"))
    rows = B // world

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
            self.qkv, self.out = nn.Linear(D, 3 * D), nn.Linear(D, D)
            self.fc, self.proj = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

        def forward(self, x):
            q, k, v = (t.view(rows, T, H, D // H).transpose(1, 2)
                       for t in self.qkv(self.ln1(x)).split(D, -1))
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.out(o.transpose(1, 2).reshape(rows, T, D))
            return x + self.proj(F.gelu(self.fc(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(V, D), nn.Embedding(T, D)
            self.blocks = nn.Sequential(*[Block() for _ in range(L)])
            self.ln_f, self.head = nn.LayerNorm(D), nn.Linear(D, V, bias=False)

        def forward(self, ids):
            x = self.wte(ids) + self.wpe(torch.arange(T))
            return self.head(self.ln_f(self.blocks(x)))

    model = DDP(GPT())
    params = list(model.parameters())
    opt = torch.optim.AdamW(params, lr=3e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    g = torch.Generator().manual_seed(rank)
    windows = [torch.randint(0, V, (rows, T + 1), generator=g) for _ in range(8)]
    state = {"s": 0}

    def step():
        w = windows[state["s"] % len(windows)]
        state["s"] += 1
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(w[:, :-1]).reshape(rows * T, V), w[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
    return step


def run(rank, world, port, out, model, cfg):
    import torch
    import torch.distributed as td

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    td.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    torch.manual_seed(0)
    step = digits_step(torch, rank, world) if model == "digits" else gpt_step(torch, rank, world,
                                                                             cfg)
    warmup, steps = (WARMUP, STEPS) if model == "digits" else (GPT_WARMUP, GPT_STEPS)
    times = []
    for s in range(warmup + steps):
        td.barrier()
        t0 = time.perf_counter()
        step()
        t = time.perf_counter() - t0
        if s >= warmup:
            times.append(t)
    if rank == 0:
        out.put(statistics.median(times) * 1e6)
    td.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--gpt", type=int, nargs=6, metavar=("V", "L", "D", "H", "T", "B"),
                    help="also the GPT step: vocabulary, layers, d_model, heads, context, batch")
    args = ap.parse_args()
    try:
        import torch  # noqa: F401
        import torch.multiprocessing as mp
    except ImportError:
        print("PyTorch DDP: skipped (torch is not installed; make bench-deps installs it)")
        return
    models = [("digits", None)]
    if args.gpt:
        models.append(("gpt", dict(zip(("vocab", "layers", "d_model", "heads", "context", "batch"),
                                       args.gpt))))
    port = 29500
    for model, cfg in models:
        results = []
        for world in args.ranks:
            port += 1
            results.append(f"{world} rank{'s' if world > 1 else ''} "
                           f"{ranks_median_us(mp, world, port, model, cfg):.1f} us")
        what = ("digits MLP step (global batch 64)" if model == "digits" else
                "GPT step (L{layers} D{d_model} H{heads} T{context}, global batch {batch})"
                .format(**cfg))
        print(f"PyTorch DDP (gloo) {what}: " + ", ".join(results))


def ranks_median_us(mp, world, port, model, cfg):
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=run, args=(r, world, port, out, model, cfg))
             for r in range(world)]
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
    return us


if __name__ == "__main__":
    main()

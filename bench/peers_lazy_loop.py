"""The lazy-loop peers of `make bench` (imported by peers.py): Jittor's canonical training loop
(python/jittor/test/test_example.py) in PyTorch eager and in Jittor, timed like metajit's C++
rows (bench/lazy_loop.cc): an MLP 1-10-1 fitting y = x^2 on batches of 50 uniform [0, 1)
inputs (numpy seed 0), SGD with lr 0.1 written by hand, only the loss read each step; the
median step time over steps 5..15 and over steps 995..1005 of one run of 1,006 steps.

PyTorch updates its parameters in place under no_grad; Jittor with `p.update(p - lr * g)`
(its test_example.py writes `p -= g * lr`, the same update), fetching the loss with `.item()`.
The batches are not metajit's (its rand() stream is its own): the step's work is the same.
"""
import statistics
import time

import peers_training

EARLY = "lazy loop MLP 1-10-1 sgd step 10"
LATE = "lazy loop MLP 1-10-1 sgd step 1000"
WORKLOADS = [EARLY, LATE]
STEPS, BATCH, HIDDEN, LR = 1006, 50, 10, 0.1


def batches(np):
    rng = np.random.default_rng(0)
    return [rng.random((BATCH, 1), dtype=np.float32) for _ in range(STEPS)]


def initial(np):
    rng = np.random.default_rng(11)
    return [(rng.standard_normal((1, HIDDEN)) * 0.5).astype(np.float32),
            np.zeros(HIDDEN, np.float32),
            (rng.standard_normal((HIDDEN, 1)) * 0.5).astype(np.float32),
            np.zeros(1, np.float32)]


def torch_loop(np, xs, init):
    import torch
    ps = [torch.tensor(p, requires_grad=True) for p in init]
    times, loss = [], None
    for x_np in xs:
        t0 = time.perf_counter()
        x = torch.from_numpy(x_np)
        y = x * x
        pred = torch.relu(x @ ps[0] + ps[1]) @ ps[2] + ps[3]
        loss_t = ((pred - y) * (pred - y)).mean()
        gs = torch.autograd.grad(loss_t, ps)
        with torch.no_grad():
            for p, g in zip(ps, gs):
                p -= g * LR
        loss = loss_t.item()
        times.append(time.perf_counter() - t0)
    return times, loss


def jittor_loop(np, xs, init, import_jittor):
    jt = import_jittor(np)
    ps = [jt.array(p) for p in init]
    times, loss = [], None
    for x_np in xs:
        t0 = time.perf_counter()
        x = jt.array(x_np)
        y = x * x
        pred = jt.nn.relu(jt.matmul(x, ps[0]) + ps[1]) @ ps[2] + ps[3]
        loss_v = ((pred - y) * (pred - y)).mean()
        gs = jt.grad(loss_v, ps)
        for p, g in zip(ps, gs):
            p.update(p - g * LR)
        loss = loss_v.item()
        times.append(time.perf_counter() - t0)
    return times, loss


def lazy_loop_rows(np, frameworks, names, cpp, import_jittor):
    """Rows for the frameworks in `frameworks` (peers.py's names); cpp maps workload -> metajit's
    C++ row. Returns (rows, skipped)."""
    xs, init = batches(np), initial(np)
    loops = [("torch", "PyTorch eager", lambda: torch_loop(np, xs, init)),
             ("jittor", "Jittor", lambda: jittor_loop(np, xs, init, import_jittor))]
    rows, skipped = [], []
    for pkg, impl, run in loops:
        if pkg not in frameworks:
            continue
        result = peers_training.set_up_peer(pkg, "lazy loop", run, skipped)
        if result is None:
            continue
        times, loss = result
        for name, lo in ((EARLY, 5), (LATE, 995)):
            if name not in names:
                continue
            s = statistics.median(times[lo:lo + 11])
            row = {"source": "python", "framework": pkg, "workload": name, "impl": impl,
                   "seconds": s, "unit": "ms", "gflops": None, "metajit_over_impl": None,
                   "floor_seconds": None, "over_floor": None, "target": "", "measured": "",
                   "met": None, "reps": 11, "max_rel_err": None,
                   "note": "median of steps %d..%d of one run of %d; final loss %.6f"
                           % (lo, lo + 10, STEPS, loss)}
            base = cpp.get(name, {})
            if base.get("seconds"):
                row["metajit_over_impl"] = base["seconds"] / s
            rows.append(row)
    return rows, skipped

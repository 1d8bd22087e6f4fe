"""GPT peers of `make bench` (imported by peers.py): bench/gpt.cc's model (samples/gpt_model.h)
in PyTorch eager, torch.compile and JAX jit, whichever import, from metajit's initial weights.

The model is samples/gpt_model.h's GPT with dropout 0, in torch's layer conventions: token
embedding wte [V, D] + position embedding wpe[arange(T)]; per block, x + attn(ln1(x)) then
+ proj(gelu(fc(ln2(x)))), where attn is nn.MultiheadAttention's math (qkv = h @ in_proj_weight.T
+ in_proj_bias, q, k, v the three D-wide parts, H heads of D / H side by side, causal
softmax(q k^T / sqrt(D / H)) v, out_proj), LayerNorm eps 1e-5, exact (erf) GELU; a final
LayerNorm and an untied head without bias. Linear weights are [out, in] (x @ W.T + b). The train
step is cross-entropy over all B*T positions (mean), backward, clip_grad_norm_(params, 1.0) and
torch.optim.AdamW (lr 1e-3, betas (0.9, 0.95), eps 1e-8, weight decay 0.1), on the same fixed
batch every step; the forward row materializes the logits.

Weights and data: metajit_bench writes them (metajit's initialisers after manual_seed(1), and a
batch of 16 windows of 64 characters of the Book of Genesis) with save_safetensors to the file
its GPT rows name in `weights_file`; here safetensors.numpy loads it. Without that file (no C++
GPT rows in the JSON) there is nothing to compare with and the rows are skipped.

Checked, not timed: every peer's first loss against a float64 numpy forward of those weights
(relative 1e-3) and that the loss went down over CHECK_STEPS steps; the forward rows' logits
against the float64 logits (max_rel_err 1e-3). metajit's C++ rows: the first loss and the logits
at PROBE against the same float64 reference, and its CHECK_STEPS losses against PyTorch eager's
(max relative difference, CURVE_TOLERANCE); the result is written into the metajit row
(`check`).

Timed in paired blocks: the C++ rows were timed earlier in the run, minutes before these, and a
shared machine has phases that slow one process for minutes (bench/README.md "GPT"). So when
metajit_bench sits beside the weights file, it is started again with --serve-gpt (bench/gpt.h)
and every peer block is bracketed by blocks of metajit's calls, PAIRED_ROUNDS rounds: metajit,
peer 1, metajit, peer 2, metajit, ... Each peer row's ratio is the median over its rounds of
(mean of the two metajit blocks around it) / (its block), its time the median of its blocks;
metajit's C++ row gets the median of its blocks as `paired_seconds`.
"""
import math
import os
import statistics
import subprocess
import sys
import time

import peers_training

STEP = "GPT L4 D128 H4 T64 B16 adamw train step"
FORWARD = "GPT L4 D128 H4 T64 B16 forward"
WORKLOADS = [STEP, FORWARD]

L, D, H, T, B = 4, 128, 4, 64, 16
HD = D // H
LR, BETA1, BETA2, EPS, WD, CLIP = 1e-3, 0.9, 0.95, 1e-8, 0.1, 1.0
LN_EPS = 1e-5
CHECK_STEPS = 20  # as kCheckSteps in gpt.cc
TOLERANCE = 1e-3  # first loss (relative) and logits (max_rel_err) against float64
CURVE_TOLERANCE = 1e-4  # metajit's CHECK_STEPS losses against PyTorch eager's (relative)
PROBE = [(0, 0), (0, T - 1), (B - 1, T // 2)]  # (b, t) of the logits metajit's row records
PAIRED_ROUNDS = 5  # blocks per peer row, each between two of metajit's
SETTLE = 0.1  # idle before each block (as bench/timing.h): the other thread pool stops spinning


def load(np, path):
    """(params {name: float32 array} in the file's order, ids [B, T] int64, targets [B*T])."""
    from safetensors.numpy import load_file
    tensors = load_file(path)
    ids = tensors.pop("batch.inputs").astype(np.int64)
    tgt = tensors.pop("batch.targets").astype(np.int64).reshape(-1)
    return tensors, ids, tgt


def block_names(l):
    b = "blocks.%d." % l
    return [b + n for n in ("ln1.weight", "ln1.bias", "attn.in_proj_weight", "attn.in_proj_bias",
                            "attn.out_proj.weight", "attn.out_proj.bias", "ln2.weight",
                            "ln2.bias", "fc.weight", "fc.bias", "proj.weight", "proj.bias")]


def numpy_logits(np, p, ids):
    """float64 logits [B, T, V]: the reference."""
    from scipy.special import erf
    p = {k: v.astype(np.float64) for k, v in p.items()}

    def ln(x, g, b):
        xc = x - x.mean(axis=-1, keepdims=True)
        return xc / np.sqrt((xc * xc).mean(axis=-1, keepdims=True) + LN_EPS) * g + b

    causal = np.tril(np.ones((T, T), dtype=bool))
    x = p["wte.weight"][ids] + p["wpe.weight"][np.arange(T)]
    for l in range(L):
        g1, b1, wi, bi, wo, bo, g2, b2, wf, bf, wp, bp = [p[n] for n in block_names(l)]
        qkv = ln(x, g1, b1) @ wi.T + bi
        q, k, v = (qkv[..., j * D:(j + 1) * D].reshape(B, T, H, HD).transpose(0, 2, 1, 3)
                   for j in range(3))
        s = np.where(causal, q @ k.transpose(0, 1, 3, 2) / math.sqrt(HD), -np.inf)
        e = np.exp(s - s.max(axis=-1, keepdims=True))
        o = ((e / e.sum(axis=-1, keepdims=True)) @ v).transpose(0, 2, 1, 3).reshape(B, T, D)
        x = x + o @ wo.T + bo
        f = ln(x, g2, b2) @ wf.T + bf
        x = x + (0.5 * f * (1.0 + erf(f / math.sqrt(2.0)))) @ wp.T + bp
    return ln(x, p["ln_f.weight"], p["ln_f.bias"]) @ p["head.weight"].T


# ---- peers: each returns {impl: {workload: Trainer}} (peers_training.Trainer) ----

def torch_impls(np, init, ids, tgt):
    import torch
    import torch.nn.functional as F
    threads = os.cpu_count() or 1
    torch.set_num_threads(threads)
    ids_t, tgt_t = torch.from_numpy(ids), torch.from_numpy(tgt)
    names = list(init)
    positions = torch.arange(T)

    def logits(p, i):
        x = F.embedding(i, p["wte.weight"]) + F.embedding(positions, p["wpe.weight"])
        for l in range(L):
            g1, b1, wi, bi, wo, bo, g2, b2, wf, bf, wp, bp = [p[n] for n in block_names(l)]
            qkv = F.linear(F.layer_norm(x, (D,), g1, b1, LN_EPS), wi, bi)
            q, k, v = (t.view(B, T, H, HD).transpose(1, 2) for t in qkv.split(D, -1))
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + F.linear(o.transpose(1, 2).reshape(B, T, D), wo, bo)
            f = F.gelu(F.linear(F.layer_norm(x, (D,), g2, b2, LN_EPS), wf, bf))
            x = x + F.linear(f, wp, bp)
        return F.linear(F.layer_norm(x, (D,), p["ln_f.weight"], p["ln_f.bias"], LN_EPS),
                        p["head.weight"])

    def fresh():
        return {n: torch.from_numpy(init[n].copy()).requires_grad_() for n in names}

    def trainer(compiled):
        p = fresh()
        params = list(p.values())
        opt = torch.optim.AdamW(params, lr=LR, betas=(BETA1, BETA2), eps=EPS, weight_decay=WD)

        def train_step(i, t):
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(logits(p, i).reshape(B * T, -1), t)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, CLIP)
            opt.step()
            return loss.detach()
        run = torch.compile(train_step) if compiled else train_step
        return peers_training.Trainer(lambda: run(ids_t, tgt_t), float, None)

    def forward(compiled):
        return peers_training.torch_forward(torch, logits, fresh(), ids_t, compiled)

    return peers_training.torch_model_rows(
        trainer, forward, STEP, FORWARD,
        "F.linear, F.layer_norm, F.scaled_dot_product_attention(is_causal=True), F.gelu, "
        "F.cross_entropy, clip_grad_norm_, torch.optim.AdamW defaults (the for-loop "
        "implementation on CPU)",
        "zero_grad, forward, loss, backward, clip_grad_norm_, opt.step", threads)


def jax_impls(np, init, ids, tgt):
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_platforms", "cpu")
    ids_j, tgt_j = jnp.asarray(ids.astype(np.int32)), jnp.asarray(tgt.astype(np.int32))
    names = list(init)
    causal = jnp.asarray(np.tril(np.ones((T, T), dtype=bool)))

    def ln(x, g, b):
        xc = x - x.mean(axis=-1, keepdims=True)
        return xc * jax.lax.rsqrt((xc * xc).mean(axis=-1, keepdims=True) + LN_EPS) * g + b

    def logits(plist, i):
        p = dict(zip(names, plist))
        x = p["wte.weight"][i] + p["wpe.weight"][jnp.arange(T)]
        for l in range(L):
            g1, b1, wi, bi, wo, bo, g2, b2, wf, bf, wp, bp = [p[n] for n in block_names(l)]
            qkv = ln(x, g1, b1) @ wi.T + bi
            q, k, v = (qkv[..., j * D:(j + 1) * D].reshape(B, T, H, HD).transpose(0, 2, 1, 3)
                       for j in range(3))
            s = jnp.where(causal, q @ k.transpose(0, 1, 3, 2) * (1.0 / math.sqrt(HD)), -jnp.inf)
            o = (jax.nn.softmax(s, axis=-1) @ v).transpose(0, 2, 1, 3).reshape(B, T, D)
            x = x + o @ wo.T + bo
            x = x + jax.nn.gelu(ln(x, g2, b2) @ wf.T + bf, approximate=False) @ wp.T + bp
        return ln(x, p["ln_f.weight"], p["ln_f.bias"]) @ p["head.weight"].T

    def loss_fn(p, i, t):
        lg = logits(p, i)
        logp = jax.nn.log_softmax(lg.reshape(B * T, lg.shape[-1]), axis=-1)
        return -jnp.mean(jnp.take_along_axis(logp, t[:, None], axis=1))

    def train_step(p, m, v, t, i, y):
        # clip_grad_norm_ then torch.optim.AdamW's update (decay first, then Adam's step)
        loss, g = jax.value_and_grad(loss_fn)(p, i, y)
        norm = jnp.sqrt(sum(jnp.sum(gi * gi) for gi in g))
        coef = jnp.minimum(1.0, CLIP / (norm + 1e-6))
        g = [gi * coef for gi in g]
        t = t + 1
        tf = t.astype(jnp.float32)
        bc1, bc2_sqrt = 1 - BETA1 ** tf, jnp.sqrt(1 - BETA2 ** tf)
        p = [pi * (1 - LR * WD) for pi in p]
        m = [BETA1 * mi + (1 - BETA1) * gi for mi, gi in zip(m, g)]
        v = [BETA2 * vi + (1 - BETA2) * gi * gi for vi, gi in zip(v, g)]
        p = [pi - (LR / bc1) * mi / (jnp.sqrt(vi) / bc2_sqrt + EPS) for pi, mi, vi in zip(p, m, v)]
        return p, m, v, t, loss
    step_note = ("@jax.jit step (value_and_grad, global-norm clipping and hand-written AdamW as "
                 "torch's, params and state donated); XLA CPU, its default thread pool")
    arrays = [init[n] for n in names]
    return peers_training.jax_model_impls(jax, jnp, np, train_step, logits, arrays, ids_j, tgt_j,
                                          (STEP, FORWARD), step_note, False)


# ---- checking and measuring ----

class MetajitServer:
    """metajit_bench --serve-gpt (bench/gpt.h): the C++ GPT rows, timed block by block."""

    def __init__(self, exe, target):
        self.proc = subprocess.Popen([exe, "--serve-gpt", "--target", target],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True, bufsize=1)
        for line in self.proc.stdout:
            if line.strip() == "ready":
                return
        raise RuntimeError("%s --serve-gpt exited (status %s) before it was ready" % (
            exe, self.proc.wait()))

    def time(self, what, budget):
        """The median seconds of one block of `what` ("step" or "forward")."""
        self.proc.stdin.write("%s %g\n" % (what, budget))
        self.proc.stdin.flush()
        while True:  # the answer is "SECONDS CALLS"; any other line printed meanwhile is skipped
            line = self.proc.stdout.readline().strip()
            if not line or line.startswith("error"):
                raise RuntimeError("metajit_bench --serve-gpt: %s" % (line or "exited"))
            parts = line.split()
            try:
                if len(parts) == 2 and int(parts[1]) > 0:
                    return float(parts[0])
            except ValueError:
                pass

    def close(self):
        try:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.close()
            self.proc.wait(timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()


def paired_rounds(server, rows, trainers, cpp, budget):
    """Re-times the timed peer rows in blocks alternated with metajit's (module docstring)."""
    for name in (STEP, FORWARD):
        timed = [r for r in rows if r["workload"] == name and r["seconds"] is not None]
        if not timed:
            continue
        what, block = ("step" if name == STEP else "forward"), budget / 2
        print("bench.py: %s: %d rounds of paired blocks with metajit ..." % (
            name, PAIRED_ROUNDS), file=sys.stderr, flush=True)
        pairs = {r["impl"]: [] for r in timed}
        before = server.time(what, block)
        mine = [before]
        for _ in range(PAIRED_ROUNDS):
            for r in timed:
                time.sleep(SETTLE)
                peer, _ = peers_training.time_steps(trainers[(r["impl"], name)], block)
                after = server.time(what, block)
                pairs[r["impl"]].append(((before + after) / 2, peer))
                mine.append(after)
                before = after
        for r in timed:
            p = pairs[r["impl"]]
            ratios = [m / s for m, s in p]
            r["paired"] = [{"metajit_seconds": m, "seconds": s} for m, s in p]
            r["seconds"] = statistics.median(s for _, s in p)
            r["paired_ratio"] = statistics.median(ratios)
            r["note"] += ("; timed again in %d blocks alternated with metajit's (--serve-gpt): "
                          "median %.2f ms, metajit/this per round %s" % (
                              len(p), 1e3 * r["seconds"],
                              " ".join("%.3f" % x for x in ratios)))
        if name in cpp:
            cpp[name]["paired_seconds"] = statistics.median(mine)

def curve_diff(a, b):
    """The largest relative difference of two loss curves."""
    return max(abs(x - y) / abs(y) for x, y in zip(a, b))


def check_metajit(np, cpp, ref_loss, ref_logits, max_rel_err):
    """metajit's C++ rows against the float64 reference (peers_training.check_model_rows)."""
    return peers_training.check_model_rows(np, cpp, STEP, FORWARD, PROBE, TOLERANCE, ref_loss,
                                           ref_logits, max_rel_err)


def measure_row(np, pkg, impl, name, trainer, ref, budget, max_rel_err, curves):
    """One peer row: checked, then timed with peers_training.time_steps (each call on its own,
    the median). ref = (float64 first loss, float64 logits); the step rows' losses go into
    curves[impl]."""
    row = {"source": "python", "framework": pkg, "workload": name, "impl": impl,
           "seconds": None, "unit": "ms/step" if name == STEP else "ms", "gflops": None,
           "metajit_over_impl": None, "floor_seconds": None, "over_floor": None, "target": "",
           "measured": "", "met": None, "note": "", "max_rel_err": None, "reps": 0,
           "loss_first": None, "loss_after_check": None}
    try:
        if name == STEP:
            losses = [trainer.to_float(trainer.step()) for _ in range(CHECK_STEPS)]
            curves[impl] = losses
            first, last = losses[0], losses[-1]
            row["loss_first"], row["loss_after_check"], row["losses"] = first, last, losses
            rel = abs(first - ref[0]) / abs(ref[0])
            note = "loss %.4f -> %.4f over %d steps (float64 first loss %.4f, rel err %.2g)" % (
                first, last, CHECK_STEPS, ref[0], rel)
            problem = peers_training.loss_problem(losses, first, last, ref[0], rel, TOLERANCE)
        else:
            err = max_rel_err(np, trainer.to_float(trainer.step()), ref[1])
            row["max_rel_err"] = err
            note = "logits max rel err %.2g against float64" % err
            problem = None if err <= TOLERANCE else "logits max rel err %.3g (tolerance %.0e)" % (
                err, TOLERANCE)
        return peers_training.time_checked_row(row, trainer, note, problem, budget)
    except Exception as e:  # noqa: BLE001 - report, do not stop the other peers
        row["note"] = peers_training.failure_note(impl, e)
    return row


def check_curves(rows, cpp, curves, problems):
    """The loss curves of the first CHECK_STEPS steps against PyTorch eager's: metajit's (its
    row's `check`; off by more than CURVE_TOLERANCE fails it) and each other peer's (a note)."""
    eager = next((c for impl, c in curves.items() if impl.startswith("PyTorch eager")), None)
    if eager is None:
        return
    for r in rows:
        if r["workload"] == STEP and r["impl"] in curves and not r["impl"].startswith("PyTorch"):
            r["note"] += "; loss curve vs PyTorch eager: max rel diff %.2g" % curve_diff(
                curves[r["impl"]], eager)
    mj = cpp.get(STEP)
    if mj is None or not mj.get("losses"):
        return
    diff = curve_diff(mj["losses"], eager)
    mj["loss_curve_max_rel_diff"] = diff
    text = "losses of steps 1-%d vs PyTorch eager's: max rel diff %.2g (tolerance %.0e)" % (
        len(mj["losses"]), diff, CURVE_TOLERANCE)
    if diff <= CURVE_TOLERANCE:
        mj["check"] = mj.get("check", "ok: ") + "; " + text
    else:
        mj["check"] = "FAILED: " + text + "; " + mj.get("check", "")
        problems[STEP] = text


def gpt_rows(np, frameworks, names, cpp, budget, max_rel_err, target="native"):
    """The GPT workloads in `names` for the frameworks in `frameworks` (peers.py's --frameworks
    names); cpp maps workload -> metajit's C++ row (its `check` is written here); target is
    metajit_bench's --target for the paired blocks. Returns (rows, skipped, note lines)."""
    path = next((cpp[n].get("weights_file") for n in names if cpp.get(n, {}).get("weights_file")),
                None)
    if not path or not os.path.exists(path):
        why = "GPT rows skipped: no weights file from metajit_bench's GPT rows (%s)" % (
            path or "run metajit_bench --only GPT first")
        print(why)
        return [], [why], []
    init, ids, tgt = load(np, path)
    ref_logits = numpy_logits(np, init, ids)
    ref = (peers_training.numpy_loss(np, ref_logits.reshape(B * T, -1), tgt), ref_logits)
    mine = {n: cpp[n] for n in names if n in cpp}
    problems = check_metajit(np, mine, *ref, max_rel_err)
    rows, skipped, curves, trainers = [], [], {}, {}
    for pkg, make in (("torch", torch_impls), ("jax", jax_impls)):
        if pkg not in frameworks:
            continue
        impls = peers_training.set_up_peer(pkg, "GPT", lambda: make(np, init, ids, tgt), skipped)
        if impls is None:
            continue
        for impl, per_workload in impls.items():
            for name in names:
                print("bench.py: %s / %s ..." % (name, impl), file=sys.stderr, flush=True)
                trainers[(impl, name)] = per_workload[name]
                rows.append(measure_row(np, pkg, impl, name, per_workload[name], ref, budget,
                                        max_rel_err, curves))
    if STEP in names:
        check_curves(rows, mine, curves, problems)
    notes = []
    exe = os.path.join(os.path.dirname(path), "metajit_bench")
    if any(r["seconds"] is not None for r in rows):
        if os.access(exe, os.X_OK):
            server = None
            try:
                server = MetajitServer(exe, target)
                paired_rounds(server, rows, trainers, mine, budget)
            except Exception as e:  # noqa: BLE001 - report, keep the unpaired rows
                notes.append("GPT rows not paired (each side's own blocks): %s" % e)
            finally:
                if server:
                    server.close()
        else:
            notes.append("GPT rows not paired (each side's own blocks): no %s" % exe)
    for row in rows:
        base = cpp.get(row["workload"], {})
        if row["seconds"] is not None and base.get("seconds"):
            row["metajit_over_impl"] = row.get("paired_ratio", base["seconds"] / row["seconds"])
            row["target"] = "(reported)"
            row["measured"] = ("metajit failed its check" if problems.get(row["workload"]) else
                               "metajit at %.0f%% of its speed%s" % (
                                   100 / row["metajit_over_impl"],
                                   " (paired)" if "paired_ratio" in row else ""))
    notes += ["%s / metajit (C++ row): check %s" % (n, cpp[n]["check"])
              for n in names if "check" in cpp.get(n, {})]
    notes += ["%s / metajit: median of its %d paired blocks %.2f ms (its own row: %.2f ms)" % (
        n, 1 + PAIRED_ROUNDS * sum(1 for r in rows if r["workload"] == n and "paired" in r),
        1e3 * cpp[n]["paired_seconds"], 1e3 * cpp[n]["seconds"])
        for n in names if cpp.get(n, {}).get("paired_seconds") and cpp[n].get("seconds")]
    return rows, skipped, notes

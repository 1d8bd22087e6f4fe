"""Transformer peers of `make bench` (imported by peers.py): bench/transformer.cc's block in
PyTorch eager, torch.compile and JAX jit, whichever import, from the same weights and data.

The model is transformer.cc's `logits()` op for op: token + position embedding, pre-norm
LayerNorm (eps 1e-5), a packed qkv projection [D, 3D] + bias, 2 causal heads of 64 (q, k, v are
columns h*64, 128 + h*64, 256 + h*64 of qkv; the heads are put back side by side), scores * 0.125
+ a mask of -1e9 above the diagonal, softmax, the output projection + residual, LayerNorm, a
tanh-GELU FFN of 512 + residual, a final LayerNorm and the projection to the 64-word vocabulary.
Weight matrices are [in, out] and used as x @ W. The train step is cross-entropy over all B*T =
1024 positions (mean), backward and Adam (lr 1e-3, betas (0.9, 0.999), eps 1e-8, no weight
decay) on the same fixed batch every step; the forward row materializes the logits.

Weights and data are the formula of transformer.cc (`hashed_uniform`, `hashed_ids`; README
"Transformer"), computed here bit for bit: element i of stream s is splitmix64((s << 32) + i);
parameter p of Block::params() is stream p, u = top 24 bits / 2^24, value = float32((2u - 1) *
std * sqrt(3)) with std 0.02 for the matrices, LayerNorm gains 1 and biases 0; ids and targets
are streams 17 and 18, the hash's top 6 bits.

Checked, not timed: the first step's loss against a float64 numpy forward of those weights
(relative 1e-3), and that the loss went down over CHECK_STEPS steps (the warm-up, compilation
included); the forward rows' logits against the float64 logits (peers.py's max_rel_err, 1e-3).
metajit's C++ rows record their first loss and the logits of PROBE positions; they are checked
against the same reference here and the result written into the metajit row (`check`).
"""
import math
import os
import statistics
import sys

import peers_training

STEP = "transformer block B16 T64 D128 H2 FFN512 adam train step"
FORWARD = "transformer block B16 T64 D128 H2 FFN512 forward"
WORKLOADS = [STEP, FORWARD]

B, T, D, H, FFN, V = 16, 64, 128, 2, 512, 64
HD = D // H
LR, BETA1, BETA2, EPS = 1e-3, 0.9, 0.999, 1e-8
LN_EPS = 1e-5
CHECK_STEPS = 20  # as kCheckSteps in transformer.cc
TOLERANCE = 1e-3  # first loss (relative) and logits (max_rel_err) against float64
PROBE = [(0, 0), (0, T - 1), (B - 1, T // 2)]  # (b, t) of the logits metajit's row records

# Block::params() order: name, shape, "w" (uniform, std 0.02), "1" (ones) or "0" (zeros).
PARAMS = [("tok", (V, D), "w"), ("pos", (T, D), "w"), ("g1", (D,), "1"), ("b1", (D,), "0"),
          ("wqkv", (D, 3 * D), "w"), ("bqkv", (3 * D,), "0"), ("wo", (D, D), "w"),
          ("bo", (D,), "0"), ("g2", (D,), "1"), ("b2", (D,), "0"), ("w1", (D, FFN), "w"),
          ("c1", (FFN,), "0"), ("w2", (FFN, D), "w"), ("c2", (D,), "0"), ("gf", (D,), "1"),
          ("bf", (D,), "0"), ("wout", (D, V), "w")]
IDS_STREAM, TARGETS_STREAM = 17, 18

# Targets (issue 24): (peer row prefix, text, k): metajit's time must be <= k * the peer's.
TARGETS = {
    STEP: [("PyTorch eager", "faster than PyTorch eager", 1.0),
           ("JAX jit", "within 1.2x of JAX jit", 1.2)],
    FORWARD: [("PyTorch eager", "faster than PyTorch eager", 1.0)],
}


# ---- weights, data and the float64 reference (numpy) ----

def splitmix64(np, x):
    """uint64 arrays; the products wrap modulo 2^64 as in C++."""
    c = np.uint64
    x = x + c(0x9E3779B97F4A7C15)
    x = (x ^ (x >> c(30))) * c(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> c(27))) * c(0x94D049BB133111EB)
    return x ^ (x >> c(31))


def stream_hash(np, stream, n):
    return splitmix64(np, (np.uint64(stream) << np.uint64(32)) + np.arange(n, dtype=np.uint64))


def hashed_uniform(np, stream, shape, std):
    """transformer.cc's hashed_uniform: 2u - 1 is exact in float64, so the product and the cast
    to float32 are the only roundings, as there."""
    u = (stream_hash(np, stream, math.prod(shape)) >> np.uint64(40)).astype(np.float64) * 2.0**-24
    return ((2.0 * u - 1.0) * (std * math.sqrt(3.0))).astype(np.float32).reshape(shape)


def hashed_ids(np, stream, shape):
    """Ids in [0, 64): the hash's top 6 bits (int64, what torch's embedding takes)."""
    top6 = stream_hash(np, stream, math.prod(shape)) >> np.uint64(58)
    return top6.astype(np.int64).reshape(shape)


def init_params(np):
    out = []
    for p, (_, shape, kind) in enumerate(PARAMS):
        if kind == "w":
            out.append(hashed_uniform(np, p, shape, 0.02))
        else:
            out.append(np.full(shape, 1.0 if kind == "1" else 0.0, dtype=np.float32))
    return out


def causal_mask(np):
    """0 on and below the diagonal, -1e9 above (float32, as transformer.cc's mask)."""
    return np.where(np.tril(np.ones((T, T), dtype=bool)), 0.0, -1e9).astype(np.float32)


def numpy_logits(np, params, ids):
    """float64 logits [B, T, V]: the reference."""
    (tok, pos, g1, b1, wqkv, bqkv, wo, bo, g2, b2, w1, c1, w2, c2, gf, bf,
     wout) = [a.astype(np.float64) for a in params]

    def ln(x, g, b):
        xc = x - x.mean(axis=-1, keepdims=True)
        return xc / np.sqrt((xc * xc).mean(axis=-1, keepdims=True) + LN_EPS) * g + b

    x = tok[ids] + pos
    q, k, v = (ln(x, g1, b1) @ wqkv + bqkv).reshape(B, T, 3, H, HD).transpose(2, 0, 3, 1, 4)
    s = q @ k.transpose(0, 1, 3, 2) * 0.125 + causal_mask(np).astype(np.float64)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    o = ((e / e.sum(axis=-1, keepdims=True)) @ v).transpose(0, 2, 1, 3).reshape(B, T, D)
    h = x + o @ wo + bo
    f = ln(h, g2, b2) @ w1 + c1
    f = 0.5 * f * (1.0 + np.tanh(0.7978845608028654 * (f + 0.044715 * f ** 3)))
    h = h + f @ w2 + c2
    return ln(h, gf, bf) @ wout


# ---- peers: each returns {impl: {workload: Trainer}} (peers_training.Trainer) ----

def torch_threads():
    return os.cpu_count() or 1


def torch_impls(np, init, ids, tgt):
    import torch
    import torch.nn.functional as F
    threads = torch_threads()
    torch.set_num_threads(threads)
    ids_t, tgt_t = torch.from_numpy(ids), torch.from_numpy(tgt.reshape(-1))
    mask = torch.from_numpy(causal_mask(np))

    def logits(p, i):
        (tok, pos, g1, b1, wqkv, bqkv, wo, bo, g2, b2, w1, c1, w2, c2, gf, bf, wout) = p
        x = F.embedding(i, tok) + pos
        qkv = F.layer_norm(x, (D,), g1, b1, LN_EPS) @ wqkv + bqkv
        q, k, v = qkv.view(B, T, 3, H, HD).permute(2, 0, 3, 1, 4).unbind(0)
        att = torch.softmax(q @ k.transpose(-2, -1) * 0.125 + mask, dim=-1)
        h = x + (att @ v).transpose(1, 2).reshape(B, T, D) @ wo + bo
        f = F.gelu(F.layer_norm(h, (D,), g2, b2, LN_EPS) @ w1 + c1, approximate="tanh")
        return F.layer_norm(h + f @ w2 + c2, (D,), gf, bf, LN_EPS) @ wout

    def fresh():
        return [torch.from_numpy(a.copy()).requires_grad_() for a in init]

    def trainer(compiled):
        params = fresh()
        opt = torch.optim.Adam(params, lr=LR, betas=(BETA1, BETA2), eps=EPS, weight_decay=0)

        def train_step(i, t):
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(logits(params, i).reshape(B * T, V), t)
            loss.backward()
            opt.step()
            return loss.detach()
        run = torch.compile(train_step) if compiled else train_step
        return peers_training.Trainer(lambda: run(ids_t, tgt_t), float,
                                      lambda: [p.detach().numpy().copy() for p in params])

    def forward(compiled):
        return peers_training.torch_forward(torch, logits, fresh(), ids_t, compiled)

    return peers_training.torch_model_rows(
        trainer, forward, STEP, FORWARD,
        "tensors with requires_grad, F.layer_norm, F.gelu(approximate='tanh'), F.cross_entropy, "
        "torch.optim.Adam defaults (the for-loop implementation on CPU)",
        "zero_grad, forward, loss, backward, opt.step, as the training rows", threads)


def jax_impls(np, init, ids, tgt):
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_platforms", "cpu")
    ids_j, tgt_j = jnp.asarray(ids.astype(np.int32)), jnp.asarray(tgt.reshape(-1).astype(np.int32))
    mask = jnp.asarray(causal_mask(np))

    def ln(x, g, b):
        xc = x - x.mean(axis=-1, keepdims=True)
        return xc * jax.lax.rsqrt((xc * xc).mean(axis=-1, keepdims=True) + LN_EPS) * g + b

    def logits(p, i):
        (tok, pos, g1, b1, wqkv, bqkv, wo, bo, g2, b2, w1, c1, w2, c2, gf, bf, wout) = p
        x = tok[i] + pos
        qkv = (ln(x, g1, b1) @ wqkv + bqkv).reshape(B, T, 3, H, HD).transpose(2, 0, 3, 1, 4)
        att = jax.nn.softmax(qkv[0] @ qkv[1].transpose(0, 1, 3, 2) * 0.125 + mask, axis=-1)
        h = x + (att @ qkv[2]).transpose(0, 2, 1, 3).reshape(B, T, D) @ wo + bo
        f = jax.nn.gelu(ln(h, g2, b2) @ w1 + c1, approximate=True)
        return ln(h + f @ w2 + c2, gf, bf) @ wout

    def loss_fn(p, i, t):
        logp = jax.nn.log_softmax(logits(p, i).reshape(B * T, V), axis=-1)
        return -jnp.mean(jnp.take_along_axis(logp, t[:, None], axis=1))

    def train_step(p, m, v, t, i, y):
        # torch.optim.Adam's update, bias-corrected the same way (as peers_training.py)
        loss, g = jax.value_and_grad(loss_fn)(p, i, y)
        t = t + 1
        tf = t.astype(jnp.float32)
        bc1, bc2_sqrt = 1 - BETA1 ** tf, jnp.sqrt(1 - BETA2 ** tf)
        m = [BETA1 * mi + (1 - BETA1) * gi for mi, gi in zip(m, g)]
        v = [BETA2 * vi + (1 - BETA2) * gi * gi for vi, gi in zip(v, g)]
        p = [pi - (LR / bc1) * mi / (jnp.sqrt(vi) / bc2_sqrt + EPS) for pi, mi, vi in zip(p, m, v)]
        return p, m, v, t, loss
    step_note = ("@jax.jit step (value_and_grad + hand-written Adam, params and state donated); "
                 "XLA CPU, its default thread pool")
    return peers_training.jax_model_impls(jax, jnp, np, train_step, logits, init, ids_j,
                                          tgt_j, (STEP, FORWARD), step_note, True)


# ---- checking and measuring ----

def check_step(np, trainer, ref_loss):
    """CHECK_STEPS steps: (problem or None, note, first loss, last loss)."""
    losses = [trainer.to_float(trainer.step()) for _ in range(CHECK_STEPS)]
    first, last = losses[0], losses[-1]
    rel = abs(first - ref_loss) / abs(ref_loss)
    note = "loss %.4f -> %.4f over %d steps (float64 first loss %.4f)" % (
        first, last, CHECK_STEPS, ref_loss)
    problem = peers_training.loss_problem(losses, first, last, ref_loss, rel, TOLERANCE)
    return problem, note, first, last


def check_forward(np, trainer, ref_logits, max_rel_err):
    """The logits of the first call (compilation included) against float64:
    (problem or None, note, max rel err)."""
    err = max_rel_err(np, trainer.to_float(trainer.step()), ref_logits)
    note = "logits max rel err %.2g against float64" % err
    if not err <= TOLERANCE:
        return "logits max rel err %.3g (tolerance %.0e)" % (err, TOLERANCE), note, err
    return None, note, err


def check_metajit(np, cpp, ref_loss, ref_logits, max_rel_err):
    """metajit's C++ rows against the float64 reference (peers_training.check_model_rows)."""
    return peers_training.check_model_rows(np, cpp, STEP, FORWARD, PROBE, TOLERANCE, ref_loss,
                                           ref_logits, max_rel_err)


def cross_check_training(rows, mj_row, mj_problems):
    """The backward and the Adam update, which the float64 forward does not cover: the loss
    after CHECK_STEPS steps from the same start, metajit's against the median of the peers that
    passed their own checks (they agreed to 1e-5 when this was written). A peer off the median
    gets a note; metajit off it fails its check (written into its row's `check`)."""
    passed = [r for r in rows if r["workload"] == STEP and r["seconds"] is not None]
    if not passed:
        return
    med = statistics.median(r["loss_after_check"] for r in passed)
    for r in passed:
        rel = abs(r["loss_after_check"] - med) / abs(med)
        if not rel <= TOLERANCE:
            r["note"] += "; loss after %d steps off the peers' median %.6f (rel %.2g)" % (
                CHECK_STEPS, med, rel)
    mj = mj_row.get("loss_after_check")
    if mj is None:
        return
    rel = abs(mj - med) / abs(med)
    text = "loss after %d steps %.6f, peers' median %.6f (rel diff %.2g)" % (CHECK_STEPS, mj,
                                                                            med, rel)
    if rel <= TOLERANCE:
        mj_row["check"] = mj_row.get("check", "ok: ") + "; " + text
    else:
        mj_row["check"] = "FAILED: " + text + "; " + mj_row.get("check", "")
        mj_problems[STEP] = text


def judge(row, name, impl, base, mj_problem):
    """The issue's targets on the peer rows they name (TARGETS), as the training rows do."""
    for on, text, k in TARGETS.get(name, []):
        if not impl.startswith(on):
            continue
        row["target"] = text
        if mj_problem:
            row["measured"], row["met"] = "metajit failed its check", False
        elif base.get("seconds"):
            row["measured"] = "metajit at %.0f%% of its speed" % (
                100 * row["seconds"] / base["seconds"])
            row["met"] = base["seconds"] <= k * row["seconds"]
        else:
            row["measured"] = "no C++ row for metajit"


def measure_row(np, pkg, impl, name, trainer, ref, budget, max_rel_err):
    """One peer row: checked, then timed with peers_training.time_steps (each call on its own,
    the median). ref = (float64 first loss, float64 logits)."""
    row = {"source": "python", "framework": pkg, "workload": name, "impl": impl,
           "seconds": None, "unit": "ms/step" if name == STEP else "ms", "gflops": None,
           "metajit_over_impl": None, "floor_seconds": None, "over_floor": None, "target": "",
           "measured": "", "met": None, "note": "", "max_rel_err": None, "reps": 0,
           "loss_first": None, "loss_after_check": None}
    try:
        if name == STEP:
            problem, note, row["loss_first"], row["loss_after_check"] = check_step(
                np, trainer, ref[0])
        else:
            problem, note, row["max_rel_err"] = check_forward(np, trainer, ref[1], max_rel_err)
        return peers_training.time_checked_row(row, trainer, note, problem, budget)
    except Exception as e:  # noqa: BLE001 - report, do not stop the other peers
        row["note"] = peers_training.failure_note(impl, e)
    return row


def transformer_rows(np, frameworks, names, cpp, budget, max_rel_err):
    """The transformer workloads in `names` for the frameworks in `frameworks` (peers.py's
    --frameworks names); cpp maps workload -> metajit's C++ row (its `check` is written here).
    Returns (rows, skipped, note lines)."""
    init = init_params(np)
    ids, tgt = hashed_ids(np, IDS_STREAM, (B, T)), hashed_ids(np, TARGETS_STREAM, (B * T,))
    ref_logits = numpy_logits(np, init, ids)
    ref = (peers_training.numpy_loss(np, ref_logits.reshape(B * T, V), tgt), ref_logits)
    mj_problems = check_metajit(np, {n: cpp[n] for n in names if n in cpp}, *ref, max_rel_err)
    rows, skipped = [], []
    for pkg, make in (("torch", torch_impls), ("jax", jax_impls)):
        if pkg not in frameworks:
            continue
        impls = peers_training.set_up_peer(pkg, "transformer",
                                           lambda: make(np, init, ids, tgt), skipped)
        if impls is None:
            continue
        for impl, per_workload in impls.items():
            for name in names:
                print("bench.py: %s / %s ..." % (name, impl), file=sys.stderr, flush=True)
                rows.append(measure_row(np, pkg, impl, name, per_workload[name], ref, budget,
                                        max_rel_err))
    if STEP in cpp and STEP in names:
        cross_check_training(rows, cpp[STEP], mj_problems)
    for row in rows:
        base = cpp.get(row["workload"], {})
        if row["seconds"] is not None:
            if base.get("seconds"):
                row["metajit_over_impl"] = base["seconds"] / row["seconds"]
            judge(row, row["workload"], row["impl"], base, mj_problems.get(row["workload"]))
    notes = ["%s / metajit (C++ row): check %s" % (n, cpp[n]["check"])
             for n in names if "check" in cpp.get(n, {})]
    return rows, skipped, notes

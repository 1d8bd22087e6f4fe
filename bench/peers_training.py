"""Training peers of `make bench` (imported by peers.py): one optimizer step of three small
models in PyTorch eager, torch.compile, JAX jit and Jittor, whichever import.

A step is forward + cross-entropy loss (mean over the batch, integer labels) + backward + an Adam
update of every parameter (lr 1e-3, betas (0.9, 0.999), eps 1e-8, no weight decay), with the
loss materialized (JAX: block_until_ready on everything the step returns). Every framework
starts from the same initial parameters (drawn here with numpy) and sees the same batches in
the same order.

Workloads (the C++ bench names its rows the same, so the ratios line up):
- TRAIN_DIGITS_MLP: UCI digits (data/digits/digits.csv.gz, pixels / 16), train split = rows
  i % 5 != 4 (1438), held out = i % 5 == 4 (359); batch b = train rows [64b, 64b+64), the 22
  full batches cycled; Linear(64,64) - relu - Linear(64,10).
- TRAIN_MLP: 4 fixed batches of standard normal [256,784] inputs with uniform labels 0..9
  (numpy seed 11), cycled; Linear(784,512) - relu - Linear(512,512) - relu - Linear(512,10).
- TRAIN_CNN: the digits batches as [64,1,8,8]; conv 1->8 3x3 pad 1 - relu - maxpool 2 -
  conv 8->16 3x3 pad 1 - relu - maxpool 2 - flatten [64,64] - Linear(64,10). NCHW, OIHW.

Checked, not timed: the first step's loss against a float64 numpy forward of the same
parameters and batch, and that the loss decreases over the first CHECK_STEPS steps (mean of the
last cycle of batches below the first step's loss). Those steps are the warm-up (they include
any compilation); then each step is timed on its own and the median reported.
"""
import gzip
import math
import os
import statistics
import sys
import time

TRAIN_DIGITS_MLP = "train digits MLP 64-64-10 b64 adam"
TRAIN_MLP = "train MLP 784-512-512-10 b256 adam"
TRAIN_CNN = "train digits CNN b64 adam"
TRAIN_WORKLOADS = [TRAIN_DIGITS_MLP, TRAIN_MLP, TRAIN_CNN]

LR, BETA1, BETA2, EPS = 1e-3, 0.9, 0.999, 1e-8
BATCH = 64
CHECK_STEPS = 100  # warm-up and the loss-decrease check
LOSS_TOLERANCE = 1e-3  # first step's loss against the float64 reference, relative
MAX_REPS = 2000

# Targets (the training issue): on which peer rows, the text, and the factor k with which
# metajit's time must be <= k * the peer's.  None = every peer row of the workload.
TRAIN_TARGETS = {
    TRAIN_DIGITS_MLP: (None, "metajit faster", 1.0),
    TRAIN_MLP: ("PyTorch eager", "within 1.1x of PyTorch eager", 1.1),
    TRAIN_CNN: ("PyTorch eager", "within 1.5x of PyTorch eager", 1.5),
}

DIGITS_PATH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                           "data", "digits", "digits.csv.gz")


# ---- data and initial parameters (numpy) ----

def load_digits(np, path=DIGITS_PATH):
    with gzip.open(path, "rt") as f:
        a = np.loadtxt(f, delimiter=",", dtype=np.int64)
    x = (a[:, :64].astype(np.float32) / np.float32(16.0)).astype(np.float32)
    return x, a[:, 64].copy()


def layer_shapes(name):
    """Parameters in PyTorch's order and layout: Linear weight [out,in] then bias; conv OIHW."""
    if name == TRAIN_DIGITS_MLP:
        return [(64, 64), (64,), (10, 64), (10,)]
    if name == TRAIN_MLP:
        return [(512, 784), (512,), (512, 512), (512,), (10, 512), (10,)]
    if name == TRAIN_CNN:
        return [(8, 1, 3, 3), (8,), (16, 8, 3, 3), (16,), (10, 64), (10,)]
    raise KeyError(name)


def init_params(np, name, seed=5):
    """PyTorch's default bounds: uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weight and bias."""
    rng = np.random.default_rng(seed)
    shapes = layer_shapes(name)
    out = []
    for i in range(0, len(shapes), 2):
        w, b = shapes[i], shapes[i + 1]
        bound = 1.0 / math.sqrt(int(np.prod(w[1:])))
        out.append(rng.uniform(-bound, bound, w).astype(np.float32))
        out.append(rng.uniform(-bound, bound, b).astype(np.float32))
    return out


def make_train_data(np):
    """{workload: (batches [(x float32, y int64)], held-out (x, y) or None, note)}."""
    x, y = load_digits(np)
    idx = np.arange(len(x))
    tr, ho = idx % 5 != 4, idx % 5 == 4
    xt, yt = x[tr], y[tr]
    nb = len(xt) // BATCH
    digits = [(np.ascontiguousarray(xt[b * BATCH:(b + 1) * BATCH]), yt[b * BATCH:(b + 1) * BATCH].copy())
              for b in range(nb)]
    rng = np.random.default_rng(11)
    rand = [(rng.standard_normal((256, 784), dtype=np.float32), rng.integers(0, 10, 256))
            for _ in range(4)]
    held = (x[ho], y[ho])
    return {
        TRAIN_DIGITS_MLP: (digits, held, "digits: %d train rows, %d batches of 64 cycled"
                           % (len(xt), nb)),
        TRAIN_MLP: (rand, None, "4 fixed random batches cycled"),
        TRAIN_CNN: ([(bx.reshape(BATCH, 1, 8, 8), by) for bx, by in digits],
                    (held[0].reshape(-1, 1, 8, 8), held[1]),
                    "digits: %d train rows, %d batches of 64 cycled" % (len(xt), nb)),
    }


def numpy_forward(np, name, params, x):
    """float64 logits: the reference the frameworks' first loss is checked against."""
    p = [a.astype(np.float64) for a in params]
    h = x.astype(np.float64)
    if name in (TRAIN_DIGITS_MLP, TRAIN_MLP):
        for i in range(0, len(p), 2):
            h = h @ p[i].T + p[i + 1]
            if i + 2 < len(p):
                h = np.maximum(h, 0.0)
        return h
    if name == TRAIN_CNN:
        for i in (0, 2):
            w = p[i]
            pad = np.pad(h, ((0, 0), (0, 0), (1, 1), (1, 1)))
            win = np.lib.stride_tricks.sliding_window_view(pad, (3, 3), axis=(2, 3))
            h = np.tensordot(win, w, axes=([1, 4, 5], [1, 2, 3])).transpose(0, 3, 1, 2)
            h = np.maximum(h + p[i + 1][None, :, None, None], 0.0)
            n, c, hh, ww = h.shape
            h = h.reshape(n, c, hh // 2, 2, ww // 2, 2).max(axis=(3, 5))
        return h.reshape(h.shape[0], -1) @ p[4].T + p[5]
    raise KeyError(name)


def numpy_loss(np, logits, y):
    m = logits.max(axis=1, keepdims=True)
    lse = np.log(np.exp(logits - m).sum(axis=1)) + m[:, 0]
    return float(np.mean(lse - logits[np.arange(len(y)), y]))


# ---- trainers: each framework returns {impl: {workload: Trainer}} ----

class Trainer:
    """step() runs one training step on the next batch and returns the loss (materialized);
    to_float(loss) reads it; params() returns the current parameters as numpy arrays."""

    def __init__(self, step, to_float, params, note=""):
        self.step, self.to_float, self.params, self.note = step, to_float, params, note



def torch_forward(torch, logits, params, ids_t, compiled):
    """A language model's no_grad forward on ids_t as a Trainer (eager or torch.compile'd), for
    the forward rows of peers_transformer.py and peers_gpt.py."""
    def fwd(i):
        with torch.no_grad():
            return logits(params, i)
    run = torch.compile(fwd) if compiled else fwd
    return Trainer(lambda: run(ids_t), lambda y: y.numpy(), None)


def torch_model_rows(trainer, forward, step, fwd, eager_step_note, compiled_step_what, threads):
    """The PyTorch eager and torch.compile rows of a language model's train step `step` and
    forward `fwd`: trainer(compiled) and forward(compiled) make them, with their notes."""
    notes = {
        ("eager", step): eager_step_note + "; %d threads" % threads,
        ("eager", fwd): "the same functions under torch.no_grad(); %d threads" % threads,
        ("compile", step): "torch.compile of the whole step function (%s), Inductor default "
                           "mode, compiled in the warm-up; %d threads" % (compiled_step_what,
                                                                          threads),
        ("compile", fwd): "torch.compile of the no_grad forward, Inductor default mode; "
                          "%d threads" % threads,
    }
    out = {"PyTorch eager (%d threads)" % threads: {step: trainer(False), fwd: forward(False)},
           "torch.compile": {step: trainer(True), fwd: forward(True)}}
    for impl, per in out.items():
        for name, t in per.items():
            t.note = notes[("compile" if impl == "torch.compile" else "eager", name)]
    return out


def check_model_rows(np, cpp, step, forward, probe_at, tolerance, ref_loss, ref_logits,
                     max_rel_err):
    """A language model's metajit rows (train step `step`, forward `forward`) against the float64
    reference: the step's first loss, the forward's logits at the (b, t) of `probe_at`, each within
    `tolerance`. Writes `check` ("ok: ..." or "FAILED: ...") into each row it finds; returns
    {workload: problem or None} (peers_transformer.py, peers_gpt.py)."""
    found = {}  # workload: (what was compared, within the tolerance)
    row = cpp.get(step)
    if row is not None:
        first = row.get("loss_first")
        if first is None:
            found[step] = ("no loss_first in the row", False)
        else:
            rel = abs(first - ref_loss) / abs(ref_loss)
            found[step] = ("first loss %.6f, float64 %.6f (rel err %.2g)" % (first, ref_loss, rel),
                           rel <= tolerance)
    row = cpp.get(forward)
    if row is not None:
        ref = np.stack([ref_logits[b, t] for b, t in probe_at])
        probe = row.get("logits_probe")
        if not probe or len(probe) != ref.size:
            found[forward] = ("no logits_probe of %d values in the row" % ref.size, False)
        else:
            err = max_rel_err(np, np.asarray(probe), ref)
            found[forward] = ("logits at (b, t) %s: max rel err %.2g against float64" % (
                probe_at, err), err <= tolerance)
    problems = {}
    for name, (text, ok) in found.items():
        cpp[name]["check"] = ("ok: " if ok else "FAILED: ") + text
        problems[name] = None if ok else text
    return problems


def jax_model_impls(jax, jnp, np, train_step, logits, arrays, ids_j, tgt_j, names, step_note,
                    with_params):
    """The JAX row of a language model (peers_transformer.py, peers_gpt.py): train_step(p, m, v,
    t, ids, targets) -> (p, m, v, t, loss) jitted with the parameters and state donated, and
    logits(params, ids) jitted; names = (step workload, forward workload)."""
    step_fn = jax.jit(train_step, donate_argnums=(0, 1, 2))
    st = {"p": [jnp.asarray(a) for a in arrays],
          "m": [jnp.zeros(a.shape, jnp.float32) for a in arrays],
          "v": [jnp.zeros(a.shape, jnp.float32) for a in arrays], "t": jnp.asarray(0, jnp.int32)}

    def step():
        out = jax.block_until_ready(step_fn(st["p"], st["m"], st["v"], st["t"], ids_j, tgt_j))
        st["p"], st["m"], st["v"], st["t"], loss = out
        return loss

    fwd_fn, fwd_params = jax.jit(logits), [jnp.asarray(a) for a in arrays]
    params = (lambda: [np.asarray(a) for a in st["p"]]) if with_params else None
    return {"JAX jit": {
        names[0]: Trainer(step, float, params, step_note),
        names[1]: Trainer(lambda: jax.block_until_ready(fwd_fn(fwd_params, ids_j)), np.asarray,
                          None, "@jax.jit forward, block_until_ready; XLA CPU, its default "
                          "thread pool")}}


def time_checked_row(row, trainer, note, problem, budget):
    """A peer row after its check: the note joined to the trainer's, then timed with time_steps
    unless the check found `problem` (then not timed, and the note says why)."""
    row["note"] = "; ".join(n for n in (trainer.note, note) if n)
    if problem:
        row["note"] = "check failed: %s; not timed (%s)" % (problem, row["note"])
        return row
    row["seconds"], row["reps"] = time_steps(trainer, budget)
    row["note"] += "; median of %d single calls" % row["reps"]
    return row


def failure_note(impl, e):
    """The note of a peer row whose framework raised `e` (torch.compile's failures are skips)."""
    reason = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
    return ("skipped: torch.compile failed here: %s" if impl == "torch.compile"
            else "failed: %s") % reason

def torch_train_impls(np, data, inits):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    threads = os.cpu_count() or 1
    torch.set_num_threads(threads)

    def model_for(name):
        if name == TRAIN_DIGITS_MLP:
            m = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
        elif name == TRAIN_MLP:
            m = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                              nn.Linear(512, 10))
        else:
            m = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2, 2),
                              nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2, 2),
                              nn.Flatten(), nn.Linear(64, 10))
        with torch.no_grad():
            for p, v in zip(m.parameters(), inits[name], strict=True):
                assert tuple(p.shape) == v.shape, (name, p.shape, v.shape)
                p.copy_(torch.from_numpy(v))
        return m

    def trainer(name, compiled):
        model = model_for(name)
        opt = torch.optim.Adam(model.parameters(), lr=LR, betas=(BETA1, BETA2), eps=EPS,
                               weight_decay=0)
        batches = [(torch.from_numpy(x), torch.from_numpy(y)) for x, y in data[name][0]]
        state = {"i": 0}

        def train_step(x, y):
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            return loss.detach()
        run = torch.compile(train_step) if compiled else train_step

        def step():
            x, y = batches[state["i"] % len(batches)]
            state["i"] += 1
            return run(x, y)

        def params():
            return [p.detach().numpy().copy() for p in model.parameters()]
        return Trainer(step, lambda t: float(t), params)

    eager_note = ("nn.Module + torch.optim.Adam (defaults: the for-loop implementation on CPU); "
                  "%d threads" % threads)
    # Measured here (2-core AMD EPYC, torch 2.15, alternating blocks): compiling the whole step
    # function and compiling model and opt.step separately were within 5% of each other, this
    # one ahead on all three; mode="max-autotune-no-cudagraphs" no better; compiled autograd
    # (torch._dynamo.config.compiled_autograd) failed to trace the backward.
    compile_note = ("torch.compile of the whole step function (zero_grad, forward, loss, "
                    "backward, opt.step; Dynamo breaks at loss.backward(): forward + loss is one "
                    "Inductor graph with its AOTAutograd backward, the Adam step another), "
                    "Inductor default mode, compiled in the warm-up; %d threads" % threads)
    out = {}
    eager = {}
    for name in data:
        t = trainer(name, False)
        t.note = eager_note
        eager[name] = t
    out["PyTorch eager (%d threads)" % threads] = eager
    compiled = {}
    for name in data:
        t = trainer(name, True)
        t.note = compile_note
        compiled[name] = t
    out["torch.compile"] = compiled
    return out


def jax_train_impls(np, data, inits):
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_platforms", "cpu")

    def forward(name, p, x):
        if name in (TRAIN_DIGITS_MLP, TRAIN_MLP):
            h = x
            for i in range(0, len(p), 2):
                h = h @ p[i].T + p[i + 1]
                if i + 2 < len(p):
                    h = jax.nn.relu(h)
            return h
        h = x
        for i in (0, 2):
            h = jax.lax.conv_general_dilated(h, p[i], (1, 1), ((1, 1), (1, 1)),
                                             dimension_numbers=("NCHW", "OIHW", "NCHW"))
            h = jax.nn.relu(h + p[i + 1][None, :, None, None])
            h = jax.lax.reduce_window(h, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2),
                                      "VALID")
        return h.reshape(h.shape[0], -1) @ p[4].T + p[5]

    def make_step(name):
        def loss_fn(p, x, y):
            logp = jax.nn.log_softmax(forward(name, p, x), axis=1)
            return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1))

        def train_step(p, m, v, t, x, y):
            # torch.optim.Adam's update, bias-corrected the same way
            loss, g = jax.value_and_grad(loss_fn)(p, x, y)
            t = t + 1
            tf = t.astype(jnp.float32)
            bc1 = 1 - BETA1 ** tf
            bc2_sqrt = jnp.sqrt(1 - BETA2 ** tf)
            m = [BETA1 * mi + (1 - BETA1) * gi for mi, gi in zip(m, g)]
            v = [BETA2 * vi + (1 - BETA2) * gi * gi for vi, gi in zip(v, g)]
            p = [pi - (LR / bc1) * mi / (jnp.sqrt(vi) / bc2_sqrt + EPS)
                 for pi, mi, vi in zip(p, m, v)]
            return p, m, v, t, loss
        return jax.jit(train_step, donate_argnums=(0, 1, 2))

    def trainer(name):
        step_fn = make_step(name)
        batches = [(jnp.asarray(x), jnp.asarray(y.astype(np.int32))) for x, y in data[name][0]]
        st = {"p": [jnp.asarray(a) for a in inits[name]],
              "m": [jnp.zeros(a.shape, jnp.float32) for a in inits[name]],
              "v": [jnp.zeros(a.shape, jnp.float32) for a in inits[name]],
              "t": jnp.asarray(0, jnp.int32), "i": 0}

        def step():
            x, y = batches[st["i"] % len(batches)]
            st["i"] += 1
            out = jax.block_until_ready(step_fn(st["p"], st["m"], st["v"], st["t"], x, y))
            st["p"], st["m"], st["v"], st["t"], loss = out
            return loss

        def params():
            return [np.asarray(a).copy() for a in st["p"]]
        return Trainer(step, lambda l: float(l), params,
                       "@jax.jit step (value_and_grad + hand-written Adam, params and state "
                       "donated); XLA CPU, its default thread pool")

    return {"JAX jit": {name: trainer(name) for name in data}}


def jittor_train_impls(np, data, inits, import_jittor):
    jt = import_jittor(np)
    nn = jt.nn

    def model_for(name):
        if name == TRAIN_DIGITS_MLP:
            return nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
        if name == TRAIN_MLP:
            return nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                                 nn.Linear(512, 10))
        return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Pool(2, 2, op="maximum"),
                             nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.Pool(2, 2, op="maximum"),
                             nn.Flatten(), nn.Linear(64, 10))

    def trainer(name):
        model = model_for(name)
        ps = model.parameters()
        if len(ps) != len(inits[name]):
            raise RuntimeError("jittor model has %d parameters, expected %d"
                               % (len(ps), len(inits[name])))
        for p, v in zip(ps, inits[name]):
            if tuple(p.shape) != v.shape:
                raise RuntimeError("jittor parameter shape %s, expected %s" % (p.shape, v.shape))
            p.assign(jt.array(v))
        opt = jt.optim.Adam(ps, lr=LR, betas=(BETA1, BETA2), eps=EPS)
        batches = [(jt.array(x), jt.array(y.astype(np.int32))) for x, y in data[name][0]]
        for x, y in batches:
            x.sync()
            y.sync()
        st = {"i": 0}

        def step():
            x, y = batches[st["i"] % len(batches)]
            st["i"] += 1
            loss = nn.cross_entropy_loss(model(x), y)
            opt.step(loss)
            loss.sync()
            return loss

        def params():
            return [p.numpy().copy() for p in model.parameters()]
        return Trainer(step, lambda l: float(l.numpy().reshape(-1)[0]), params,
                       "jt.nn modules + jt.optim.Adam (its eps is added to sqrt(v) before the "
                       "bias correction)")

    return {"Jittor": {name: trainer(name) for name in data}}


# ---- measuring ----

def check_and_warm(np, name, trainer, batches, held, init):
    """Runs CHECK_STEPS steps: the first loss against the float64 reference, the last cycle's
    mean below it. Returns (problem or None, note text, first loss, last-cycle mean)."""
    ref = numpy_loss(np, numpy_forward(np, name, init, batches[0][0]), batches[0][1])
    losses = [trainer.to_float(trainer.step()) for _ in range(CHECK_STEPS)]
    first = losses[0]
    cycle = len(batches) if len(batches) <= CHECK_STEPS // 2 else CHECK_STEPS // 2
    last = statistics.fmean(losses[-cycle:])
    rel = abs(first - ref) / max(abs(ref), 1e-30)
    note = "loss %.4f -> %.4f (mean of the last %d of %d steps)" % (first, last, cycle, CHECK_STEPS)
    if held is not None:
        logits = numpy_forward(np, name, trainer.params(), held[0])
        note += ", held-out accuracy %.3f" % float(np.mean(logits.argmax(axis=1) == held[1]))
    return loss_problem(losses, first, last, ref, rel, LOSS_TOLERANCE), note, first, last


def loss_problem(losses, first, last, ref, rel, tolerance):
    """What is wrong with a peer's first training steps, or None: a non-finite loss, a first loss
    `rel` away from the float64 reference `ref` beyond `tolerance`, or no decrease."""
    if not all(math.isfinite(v) for v in losses):
        return "non-finite loss"
    if not rel <= tolerance:
        return ("first loss %.6g, float64 reference %.6g (rel err %.3g, tolerance %.0e)"
                % (first, ref, rel, tolerance))
    if not last < first:
        return "loss did not decrease"
    return None


def time_steps(trainer, budget):
    """Each step timed on its own; the median. The number of steps comes from the median of 5
    steps (one slow step, say a page fault or another process, must not set it)."""
    est = []
    for _ in range(5):
        t0 = time.perf_counter()
        trainer.step()
        est.append(time.perf_counter() - t0)
    est = max(statistics.median(est), 1e-9)
    reps = max(10, min(MAX_REPS, int(budget / est)))
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        trainer.step()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples), reps


def set_up_peer(pkg, what, make, skipped):
    """make()'s implementations of framework `pkg`, or None when it does not import or fails
    to set up: then a line says why and `skipped` gets the reason (`what`: whose rows)."""
    try:
        return make()
    except ImportError:
        print("skipped: %s not installed (%s rows)" % (pkg, what))
        skipped.append("%s not installed" % pkg)
    except (Exception, SystemExit) as e:  # noqa: BLE001 - report, do not stop the others
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
        print("skipped: %s (%s rows): %s" % (pkg, what, reason))
        skipped.append("%s skipped (%s): %s" % (pkg, what, reason))
    return None


def train_rows(np, frameworks, names, cpp, budget, import_jittor):
    """Runs the training workloads in `names` for the frameworks in `frameworks` (names as in
    peers.py's --frameworks); cpp maps workload -> metajit's C++ row. Returns (rows, skipped)."""
    data = {n: v for n, v in make_train_data(np).items() if n in names}
    inits = {n: init_params(np, n) for n in data}
    makers = [("torch", lambda: torch_train_impls(np, data, inits)),
              ("jax", lambda: jax_train_impls(np, data, inits)),
              ("jittor", lambda: jittor_train_impls(np, data, inits, import_jittor))]
    rows, skipped = [], []
    for pkg, make in makers:
        if pkg not in frameworks:
            continue
        impls = set_up_peer(pkg, "training", make, skipped)
        if impls is None:
            continue
        for impl, per_workload in impls.items():
            for name in names:
                if name not in per_workload:
                    continue
                print("bench.py: %s / %s ..." % (name, impl), file=sys.stderr, flush=True)
                trainer = per_workload[name]
                batches, held, data_note = data[name]
                row = {"source": "python", "framework": pkg, "workload": name, "impl": impl,
                       "seconds": None, "unit": "ms/step", "gflops": None,
                       "metajit_over_impl": None, "floor_seconds": None, "over_floor": None,
                       "target": "", "measured": "", "met": None, "note": "",
                       "max_rel_err": None, "reps": 0, "loss_first": None,
                       "loss_after_check": None}
                try:
                    problem, check_note, first, last = check_and_warm(
                        np, name, trainer, batches, held, inits[name])
                    row["loss_first"], row["loss_after_check"] = first, last
                    row["note"] = "; ".join([trainer.note, data_note, check_note])
                    if problem:
                        row["note"] = "check failed: %s; not timed (%s)" % (problem, row["note"])
                        rows.append(row)
                        continue
                    row["seconds"], row["reps"] = time_steps(trainer, budget)
                    row["note"] += "; median of %d single steps" % row["reps"]
                except Exception as e:  # noqa: BLE001
                    row["note"] = "failed: %s" % (str(e).strip().splitlines() or ["?"])[0][:300]
                    rows.append(row)
                    continue
                s = row["seconds"]
                base = cpp.get(name, {})
                if base.get("seconds"):
                    row["metajit_over_impl"] = base["seconds"] / s
                on, text, k = TRAIN_TARGETS[name]
                if on is None or impl.startswith(on):
                    row["target"] = text
                    if base.get("seconds"):
                        row["measured"] = "metajit at %.0f%% of its speed" % (
                            100 * s / base["seconds"])
                        row["met"] = base["seconds"] <= k * s
                    else:
                        row["measured"] = "no C++ row for metajit"
                rows.append(row)
    return rows, skipped

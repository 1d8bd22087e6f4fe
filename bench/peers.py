#!/usr/bin/env python3
"""Python peers of `make bench`: the same workloads in numpy, PyTorch eager, torch.compile,
JAX jit and Jittor, whichever import. Rows are appended to the C++ bench's JSON file (and
printed); each workload's floor and metajit time are read from the C++ rows of that file, so
the Python rows get floor ratios and metajit ratios too.

This script installs nothing: a framework that does not import prints
"skipped: <pkg> not installed".

    python3 bench/peers.py [--json bench/results.json] [--budget 1.5] [--only TEXT]
                           [--frameworks numpy,torch,jax,jittor]

The training rows (one optimizer step of three small models) are in peers_training.py;
`--only train` runs just them. The transformer block's train step and forward are in
peers_transformer.py (`--only transformer`), the GPT's (from the weights metajit_bench writes) in
peers_gpt.py (`--only GPT`), Jittor's lazy training loop in peers_lazy_loop.py (`--only lazy`).

Running it again (say, Jittor from another interpreter: Jittor 1.3 wants numpy<2, JAX 0.10
wants numpy>=2) replaces only the rows of the frameworks it runs.
"""
import argparse
import importlib.util
import json
import math
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peers_training  # noqa: E402 - the training rows, kept in their own file
import peers_transformer  # noqa: E402 - the transformer rows, likewise
import peers_gpt  # noqa: E402 - the GPT rows, likewise
import peers_lazy_loop  # noqa: E402 - the lazy training loop

# The same names as the C++ rows, so that the two halves line up.
SELU = "selu 16M"
# SELU on half values (the precision issue): the same expression on a bfloat16 / float16 tensor.
SELU_BF16 = SELU + " bfloat16"
SELU_F16 = SELU + " float16"
ROW_SUMS = "row sums 4096x4096"
COL_SUMS = "col sums 4096x4096"
SOFTMAX = "softmax rows 4096x4096"
MATMUL = "matmul 1024^3"
CONV = "conv2d 8x64x56x56 * 64x3x3"
CONV_SHAPE = (8, 64, 56, 56, 64, 3)  # N, C, H=W, -, O, K (stride 1, padding 1)
# Reported against PyTorch (the performance issue): a ResNet stem and a 1x1 projection.
CONV_STEM = "conv2d stem 1x3x224x224 * 64x7x7 s2"
CONV_1X1 = "conv2d 1x1 8x256x56x56 * 64x1x1"
CONV_ARGS = {CONV: (1, 1), CONV_STEM: (2, 3), CONV_1X1: (1, 0)}  # stride, padding
# Backward (the autograd issue): the gradients of sum(f(...) * g), PyTorch's against metajit's.
MATMUL_GA = MATMUL + " grad a"
# bfloat16 operands, float32 sums, a bfloat16 result (the precision issue: on AVX512_BF16
# metajit multiplies pairs with vdpbf16ps, and is judged against PyTorch's bfloat16 matmul).
MATMUL_BF16 = MATMUL + " bfloat16"
MATMUL_GB = MATMUL + " grad b"
CONV_GX = CONV + " grad input"
CONV_GW = CONV + " grad weight"

# Data-dependent indexing (the extras issue): embedding's backward (a scatter-add of the [65536,
# 64] gradient into the [4096, 64] table, colliding ids add up) and gather along the last axis.
EMB_BWD = "embedding backward 65536x64 -> 4096x64"
GATHER = "gather dim 1 4096x1024"
# Max pooling as ResNet has it after its stem (3x3, stride 2, padding 1).
POOL = "max_pool2d 8x64x112x112 3x3 s2 p1"

FLOPS = {MATMUL: 2.0 * 1024**3, MATMUL_BF16: 2.0 * 1024**3,
         CONV: 2.0 * 8 * 64 * 56 * 56 * 64 * 3 * 3,
         MATMUL_GA: 2.0 * 1024**3, MATMUL_GB: 2.0 * 1024**3,
         CONV_GX: 2.0 * 8 * 64 * 56 * 56 * 64 * 3 * 3, CONV_GW: 2.0 * 8 * 64 * 56 * 56 * 64 * 3 * 3,
         CONV_STEM: 2.0 * 64 * 112 * 112 * 3 * 7 * 7, CONV_1X1: 2.0 * 8 * 64 * 56 * 56 * 256}
TOLERANCE = {MATMUL_BF16: 1e-2,  # the result's rounding to bfloat16
             # PyTorch eager rounds each op to the half type, and 1.67 * exp(x) - 1.67 cancels
             # near 0: bfloat16 0.59, float16 0.095 (torch.compile 0.20, 0.0086), measured
             SELU_BF16: 1.0, SELU_F16: 0.2,
             SELU: 1e-3, ROW_SUMS: 2e-3, COL_SUMS: 2e-3, SOFTMAX: 1e-3, MATMUL: 1e-3, CONV: 1e-3,
             CONV_STEM: 1e-3, CONV_1X1: 1e-3, MATMUL_GA: 1e-3, MATMUL_GB: 1e-3, CONV_GX: 1e-3,
             CONV_GW: 1e-3, EMB_BWD: 1e-4, GATHER: 0.0, POOL: 0.0}


def round_bfloat16(np, x):
    """float32 x rounded to the nearest bfloat16 (ties to even), as float32; no NaN here."""
    u = x.view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32)


def make_inputs(np):
    rng = np.random.default_rng(7)
    f32 = np.float32
    selu_x = rng.standard_normal(1 << 24, dtype=f32)
    return {
        SELU: (selu_x,),
        # float32 arrays of half values (each framework casts them exactly)
        SELU_BF16: (round_bfloat16(np, selu_x),),
        SELU_F16: (selu_x.astype(np.float16).astype(f32),),
        ROW_SUMS: (rng.standard_normal((4096, 4096), dtype=f32),),
        COL_SUMS: (rng.standard_normal((4096, 4096), dtype=f32),),
        SOFTMAX: (rng.standard_normal((4096, 4096), dtype=f32),),
        # float32 arrays of bfloat16 values (each framework casts them exactly)
        MATMUL_BF16: (round_bfloat16(np, rng.standard_normal((1024, 1024), dtype=f32)),
                      round_bfloat16(np, rng.standard_normal((1024, 1024), dtype=f32))),
        MATMUL: (rng.standard_normal((1024, 1024), dtype=f32),
                 rng.standard_normal((1024, 1024), dtype=f32)),
        CONV: (rng.standard_normal((8, 64, 56, 56), dtype=f32),
               rng.standard_normal((64, 64, 3, 3), dtype=f32)),
        CONV_STEM: (rng.standard_normal((1, 3, 224, 224), dtype=f32),
                    rng.standard_normal((64, 3, 7, 7), dtype=f32)),
        CONV_1X1: (rng.standard_normal((8, 256, 56, 56), dtype=f32),
                   rng.standard_normal((64, 256, 1, 1), dtype=f32)),
        # (a, b, g) and (x, w, g): g is the gradient of the forward's output
        MATMUL_GA: tuple(rng.standard_normal((1024, 1024), dtype=f32) for _ in range(3)),
        MATMUL_GB: tuple(rng.standard_normal((1024, 1024), dtype=f32) for _ in range(3)),
        CONV_GX: (rng.standard_normal((8, 64, 56, 56), dtype=f32),
                  rng.standard_normal((64, 64, 3, 3), dtype=f32),
                  rng.standard_normal((8, 64, 56, 56), dtype=f32)),
        CONV_GW: (rng.standard_normal((8, 64, 56, 56), dtype=f32),
                  rng.standard_normal((64, 64, 3, 3), dtype=f32),
                  rng.standard_normal((8, 64, 56, 56), dtype=f32)),
        # (g, ids) and (x, index)
        EMB_BWD: (rng.standard_normal((65536, 64), dtype=f32),
                  rng.integers(0, 4096, 65536, dtype=np.int64)),
        GATHER: (rng.standard_normal((4096, 1024), dtype=f32),
                 rng.integers(0, 1024, (4096, 1024), dtype=np.int64)),
        POOL: (rng.standard_normal((8, 64, 112, 112), dtype=f32),),
    }


def reference(np, name, args):
    """float64 results every framework is checked against."""
    if name == EMB_BWD:
        out = np.zeros((4096, 64))
        np.add.at(out, args[1], args[0].astype(np.float64))
        return out
    if name == GATHER:
        return np.take_along_axis(args[0].astype(np.float64), args[1], axis=1)
    if name == POOL:  # padded cells never win
        p = np.pad(args[0].astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)),
                   constant_values=-np.inf)
        win = np.lib.stride_tricks.sliding_window_view(p, (3, 3), axis=(2, 3))[:, :, ::2, ::2]
        return win.max(axis=(4, 5))
    a = [x.astype(np.float64) for x in args]
    if name in (SELU, SELU_BF16, SELU_F16):
        x = a[0]
        return 1.05 * np.where(x > 0, x, 1.67 * np.exp(x) - 1.67)
    if name == ROW_SUMS:
        return a[0].sum(axis=1)
    if name == COL_SUMS:
        return a[0].sum(axis=0)
    if name == SOFTMAX:
        e = np.exp(a[0] - a[0].max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)
    if name in (MATMUL, MATMUL_BF16):
        return a[0] @ a[1]
    if name in CONV_ARGS:
        return numpy_conv(np, a[0], a[1], *CONV_ARGS[name])
    if name == MATMUL_GA:
        return a[2] @ a[1].T
    if name == MATMUL_GB:
        return a[0].T @ a[2]
    if name == CONV_GX:  # the transposed convolution: g (padded) against flipped, swapped w
        return numpy_conv(np, a[2], np.ascontiguousarray(a[1][:, :, ::-1, ::-1].transpose(1, 0, 2, 3)))
    if name == CONV_GW:  # windows of x contracted with g over N, OH, OW
        p = np.pad(a[0], ((0, 0), (0, 0), (1, 1), (1, 1)))
        win = np.lib.stride_tricks.sliding_window_view(p, (56, 56), axis=(2, 3))  # N,C,3,3,56,56
        return np.tensordot(a[2], win, axes=([0, 2, 3], [0, 4, 5]))  # O,C,3,3
    raise KeyError(name)


def numpy_conv(np, x, w, stride=1, pad=1):
    """Sliding windows (a view) contracted with the weights (BLAS)."""
    k = w.shape[2]
    p = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    win = np.lib.stride_tricks.sliding_window_view(p, (k, k), axis=(2, 3))  # N,C,H,W,k,k
    win = win[:, :, ::stride, ::stride]
    out = np.tensordot(win, w, axes=([1, 4, 5], [1, 2, 3]))  # N,H,W,O
    return np.ascontiguousarray(out.transpose(0, 3, 1, 2))


def max_rel_err(np, got, ref):
    with np.errstate(invalid="ignore"):
        got = np.asarray(got, dtype=np.float64).reshape(ref.shape)
    scale = 1e-2 * math.sqrt(float(np.mean(ref * ref)))
    denom = np.maximum(np.abs(ref), max(scale, 1e-30))
    return float(np.max(np.abs(got - ref) / denom))


class Skip(Exception):
    """A framework that is installed but cannot be measured here, and why."""


# ---- frameworks: each returns {workload: (run, result)}; run() is the timed call ----

def numpy_impls(np, inputs):
    x, r, c, s = inputs[SELU][0], inputs[ROW_SUMS][0], inputs[COL_SUMS][0], inputs[SOFTMAX][0]
    a, b = inputs[MATMUL]
    cx, cw = inputs[CONV]

    def softmax(v):
        e = np.exp(v - v.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    def emb_bwd(g, ids):
        out = np.zeros((4096, 64), dtype=g.dtype)
        np.add.at(out, ids, g)
        return out

    fns = {
        SELU: lambda: 1.05 * np.where(x > 0, x, 1.67 * np.exp(x) - 1.67),
        ROW_SUMS: lambda: r.sum(axis=1),
        COL_SUMS: lambda: c.sum(axis=0),
        SOFTMAX: lambda: softmax(s),
        MATMUL: lambda: a @ b,
        CONV: lambda: numpy_conv(np, cx, cw),
        EMB_BWD: lambda: emb_bwd(*inputs[EMB_BWD]),
        GATHER: lambda: np.take_along_axis(*inputs[GATHER], axis=1),
    }
    return {"numpy": {k: (f, f) for k, f in fns.items()}}


def torch_impls(np, inputs):
    import torch
    t = {k: [torch.from_numpy(v) for v in vs] for k, vs in inputs.items()}

    def selu(x):
        return 1.05 * torch.where(x > 0, x, 1.67 * torch.exp(x) - 1.67)

    fns = {
        SELU: (selu, t[SELU]),
        SELU_BF16: (selu, [v.bfloat16() for v in t[SELU_BF16]]),
        SELU_F16: (selu, [v.half() for v in t[SELU_F16]]),
        ROW_SUMS: (lambda v: v.sum(dim=1), t[ROW_SUMS]),
        COL_SUMS: (lambda v: v.sum(dim=0), t[COL_SUMS]),
        SOFTMAX: (lambda v: torch.softmax(v, dim=1), t[SOFTMAX]),
        MATMUL: (torch.matmul, t[MATMUL]),
        MATMUL_BF16: (torch.matmul, [v.bfloat16() for v in t[MATMUL_BF16]]),
        CONV: (lambda v, w: torch.nn.functional.conv2d(v, w, padding=1), t[CONV]),
        CONV_STEM: (lambda v, w: torch.nn.functional.conv2d(v, w, stride=2, padding=3),
                    t[CONV_STEM]),
        CONV_1X1: (lambda v, w: torch.nn.functional.conv2d(v, w), t[CONV_1X1]),
        # PyTorch's own backward functions (what autograd calls for these ops)
        MATMUL_GA: (lambda a, b, g: g @ b.T, t[MATMUL_GA]),
        MATMUL_GB: (lambda a, b, g: a.T @ g, t[MATMUL_GB]),
        CONV_GX: (lambda x, w, g: torch.nn.grad.conv2d_input(x.shape, w, g, padding=1),
                  t[CONV_GX]),
        CONV_GW: (lambda x, w, g: torch.nn.grad.conv2d_weight(x, w.shape, g, padding=1),
                  t[CONV_GW]),
        # what autograd calls for F.embedding's backward (dense, no padding_idx)
        EMB_BWD: (lambda g, ids: torch.ops.aten.embedding_dense_backward(g, ids, 4096, -1, False),
                  t[EMB_BWD]),
        GATHER: (lambda x, i: torch.gather(x, 1, i), t[GATHER]),
        POOL: (lambda v: torch.nn.functional.max_pool2d(v, 3, 2, 1), t[POOL]),
    }
    out = {}
    eager = {}
    for k, (f, args) in fns.items():
        eager[k] = (lambda f=f, args=args: f(*args),
                    lambda f=f, args=args: f(*args).float())  # numpy has no bfloat16
    out["PyTorch eager (%d threads)" % torch.get_num_threads()] = eager
    try:
        compiled = {}
        for k, (f, args) in fns.items():
            cf = torch.compile(f)
            compiled[k] = (lambda cf=cf, args=args: cf(*args),
                           lambda cf=cf, args=args: cf(*args).float())
        out["torch.compile"] = compiled
    except Exception as e:  # noqa: BLE001 - report, do not stop the other peers
        print("skipped: torch.compile unavailable: %s" % e)
    return out


def jax_impls(np, inputs):
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_platforms", "cpu")
    d = {k: [jnp.asarray(v) for v in vs] for k, vs in inputs.items()}
    d[MATMUL_BF16] = [v.astype(jnp.bfloat16) for v in d[MATMUL_BF16]]
    d[SELU_BF16] = [v.astype(jnp.bfloat16) for v in d[SELU_BF16]]
    d[SELU_F16] = [v.astype(jnp.float16) for v in d[SELU_F16]]

    def selu(x):
        return 1.05 * jnp.where(x > 0, x, 1.67 * jnp.exp(x) - 1.67)

    def conv_with(stride, pad):
        return lambda x, w: jax.lax.conv_general_dilated(
            x, w, (stride, stride), ((pad, pad), (pad, pad)),
            dimension_numbers=("NCHW", "OIHW", "NCHW"))
    conv = conv_with(1, 1)

    fns = {
        SELU: selu,
        SELU_BF16: selu,
        SELU_F16: selu,
        ROW_SUMS: lambda v: v.sum(axis=1),
        COL_SUMS: lambda v: v.sum(axis=0),
        SOFTMAX: lambda v: jax.nn.softmax(v, axis=1),
        MATMUL: jnp.matmul,
        MATMUL_BF16: jnp.matmul,
        CONV: conv,
        CONV_STEM: conv_with(*CONV_ARGS[CONV_STEM]),
        CONV_1X1: conv_with(*CONV_ARGS[CONV_1X1]),
        EMB_BWD: lambda g, ids: jnp.zeros((4096, 64), g.dtype).at[ids].add(g),
        GATHER: lambda x, i: jnp.take_along_axis(x, i, axis=1),
        POOL: lambda v: jax.lax.reduce_window(v, -jnp.inf, jax.lax.max, (1, 1, 3, 3),
                                              (1, 1, 2, 2), ((0, 0), (0, 0), (1, 1), (1, 1))),
    }
    impls = {}
    for k, f in fns.items():
        jf, args = jax.jit(f), d[k]
        impls[k] = (lambda jf=jf, args=args: jf(*args).block_until_ready(),
                    lambda jf=jf, args=args: np.asarray(jf(*args).astype(jnp.float32)))
    return {"JAX jit": impls}


def import_jittor(np):
    """Jittor, imported for measuring, or ImportError / Skip with the reason."""
    # Jittor downloads oneDNN on first use unless use_mkl=0, and takes CUDA for present when
    # the nvidia wheels PyTorch pulls in are installed: both off unless set by the caller.
    os.environ.setdefault("use_mkl", "0")
    os.environ.setdefault("nvcc_path", "")
    os.environ.setdefault("log_silent", "1")
    if importlib.util.find_spec("jittor") is None:
        raise ImportError("jittor")
    if int(np.__version__.split(".")[0]) >= 2:
        raise Skip("jittor 1.3 computes wrong values with numpy %s (it requires numpy<2); run "
                   "`PY --frameworks jittor` with an interpreter that has numpy<2 "
                   "(make bench BENCH_JITTOR_PYTHON=PY)" % np.__version__)
    # Jittor builds its core on first import and may then exit asking to be run again: let a
    # child process take that, so that this one imports a ready Jittor (or skips it).
    for _ in range(2):
        probe = subprocess.run([sys.executable, "-c", "import jittor"], capture_output=True,
                               text=True, timeout=1800)
    if probe.returncode != 0:
        raise Skip("import jittor failed: %s" % (probe.stderr.strip().splitlines() or ["?"])[-1])
    import jittor as jt
    return jt


def jittor_impls(np, inputs):
    jt = import_jittor(np)
    d = {k: [jt.array(v) for v in vs] for k, vs in inputs.items()}
    for vs in d.values():
        for v in vs:
            v.sync()

    def selu(x):
        return 1.05 * jt.ternary(x > 0, x, 1.67 * jt.exp(x) - 1.67)

    fns = {
        SELU: selu,
        ROW_SUMS: lambda v: v.sum(dim=1),
        COL_SUMS: lambda v: v.sum(dim=0),
        SOFTMAX: lambda v: jt.nn.softmax(v, dim=1),
        MATMUL: jt.matmul,
        CONV: lambda v, w: jt.nn.conv2d(v, w, padding=1),
    }
    impls = {}
    for k, f in fns.items():
        args = d[k]
        impls[k] = (lambda f=f, args=args: f(*args).sync(),
                    lambda f=f, args=args: f(*args).numpy())
    return {"Jittor": impls}


FRAMEWORKS = [("numpy", numpy_impls), ("torch", torch_impls), ("jax", jax_impls),
              ("jittor", jittor_impls)]


DISPATCH = "dispatch: a*b+c 2x3"


def dispatch_rows(np, cpp_rows):
    """numpy's eager a*b+c on 2x3 float32 arrays, per call, and the issue's targets for
    metajit's lazy path (<= 3x numpy) and jit() replay (not slower than numpy), judged with the
    C++ rows of the same run."""
    rng = np.random.default_rng(1)
    a, b, c = (rng.random((2, 3), dtype=np.float32) for _ in range(3))
    n, blocks = 10000, 7
    per_call = []
    for _ in range(blocks):
        t0 = time.perf_counter()
        for _ in range(n):
            a * b + c
        per_call.append((time.perf_counter() - t0) / n)
    s = statistics.median(per_call)
    out = []
    for impl, limit in (("lazy graph + eval", 3.0), ("jit()", 1.0)):
        base = next((r for r in cpp_rows if r.get("workload") == DISPATCH and r.get("impl") == impl), None)
        row = {"source": "python", "framework": "numpy", "workload": DISPATCH,
               "impl": "numpy eager (vs metajit %s)" % impl, "seconds": s, "unit": "us/call",
               "gflops": None, "metajit_over_impl": None, "floor_seconds": None, "over_floor": None,
               "target": "metajit <= %gx numpy" % limit, "measured": "", "met": None,
               "note": "median of %d blocks of %d calls" % (blocks, n), "max_rel_err": None,
               "reps": n * blocks}
        if base and base.get("seconds"):
            ratio = base["seconds"] / s
            row["metajit_over_impl"] = ratio
            row["measured"] = "metajit %.2fx numpy" % ratio
            row["met"] = ratio <= limit
        else:
            row["measured"] = "no C++ row for metajit %s" % impl
        out.append(row)
    return out


def time_call(run, budget):
    run()  # warm-up: compiles where the framework compiles
    run()
    t0 = time.perf_counter()
    run()
    est = max(time.perf_counter() - t0, 1e-9)
    reps = max(5, min(1000, int(budget / est)))
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        run()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples), reps


def fmt_time(s):
    if s is None or (isinstance(s, float) and math.isnan(s)):
        return "-"
    return "%.3f ms" % (s * 1e3) if s < 0.01 else "%.2f ms" % (s * 1e3)


def fmt_x(v):
    return "-" if v is None else "%.2fx" % v


def print_row(row, first):
    if row["met"] is None:
        met = "-" if row["target"] else ""
    else:
        met = "yes" if row["met"] else "NO"
    line = "%-30s %-26s %15s %8s %9s %10s %8s  %-26s %-22s %s" % (
        row["workload"] if first else "", row["impl"],
        fmt_time(row["seconds"]) if row["seconds"] is not None else "n/a",
        "-" if row["gflops"] is None else "%.1f" % row["gflops"],
        fmt_x(row["metajit_over_impl"]),
        fmt_time(row["floor_seconds"]) if first else "",
        fmt_x(row["over_floor"]), row["target"], row["measured"], met)
    print(line.rstrip())


def hold_inductor_to_avx2():
    """torch.compile's C++ kernels at AVX2's 8 floats. Inductor picks its vector width from the
    CPU, not from ATEN_CPU_CAPABILITY: on an AVX-512 machine it generated 16-float kernels
    beside ATen's AVX2 ones, and the GPT's logits came out NaN (26,880 of 61,440; 2026-11-29,
    torch 2.15.0 as installed by scripts/install_bench_deps.sh); with simdlen 8 they are finite and
    within the checks' tolerance."""
    try:
        import torch._inductor.config as inductor_config
    except ImportError:
        return
    inductor_config.cpp.simdlen = 8


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--json", default=os.path.join(here, "results.json"))
    ap.add_argument("--budget", type=float, default=1.5, help="timed seconds per row")
    ap.add_argument("--only", default="", help="run only workloads whose name contains this")
    ap.add_argument("--frameworks", default=",".join(p for p, _ in FRAMEWORKS),
                    help="comma-separated subset of: %(default)s")
    ap.add_argument("--target", default="native", choices=["native", "avx2", "avx512", "portable"],
                    help="avx2: hold every peer to AVX2 (like metajit_bench --target avx2); "
                         "the others leave the peers at their own choice")
    args = ap.parse_args()
    if args.target == "avx2":
        # Set before any import: each library reads its switch when it loads.
        os.environ["ATEN_CPU_CAPABILITY"] = "avx2"  # PyTorch's kernels (and oneDNN's ISA below)
        os.environ["ONEDNN_MAX_CPU_ISA"] = "AVX2"
        os.environ["DNNL_MAX_CPU_ISA"] = "AVX2"
        os.environ["NPY_DISABLE_CPU_FEATURES"] = (
            "AVX512F AVX512CD AVX512_SKX AVX512_CLX AVX512_CNL AVX512_ICL AVX512_SPR")
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                                   " --xla_cpu_max_isa=AVX2").strip()
        os.environ["OPENBLAS_CORETYPE"] = "Haswell"
    wanted = [f.strip() for f in args.frameworks.split(",") if f.strip()]
    if args.target == "avx2" and "torch" in wanted:
        hold_inductor_to_avx2()

    doc = {"meta": {}, "rows": []}
    if os.path.exists(args.json):
        with open(args.json) as f:
            doc = json.load(f)
    doc["rows"] = [r for r in doc.get("rows", [])
                   if r.get("source") != "python" or r.get("framework") not in wanted]
    cpp = {r["workload"]: r for r in doc["rows"] if r.get("impl") == "metajit"}
    if not cpp:
        print("note: no C++ rows in %s: Python rows get no floor or metajit ratios" % args.json)

    try:
        import numpy as np
    except ImportError:
        print("skipped: numpy not installed (every Python peer needs it)")
        return 0

    inputs = make_inputs(np)
    names = [n for n in inputs if args.only in n]
    refs = {n: reference(np, n, inputs[n]) for n in names}
    skipped, rows = [], []
    for pkg, make in FRAMEWORKS:
        if pkg not in wanted or not names:
            continue
        try:
            impls = make(np, inputs)
        except ImportError:
            print("skipped: %s not installed" % pkg)
            skipped.append("%s not installed" % pkg)
            continue
        except Skip as e:
            print("skipped: %s: %s" % (pkg, e))
            skipped.append("%s skipped: %s" % (pkg, e))
            continue
        except (Exception, SystemExit) as e:  # noqa: BLE001
            print("skipped: %s failed to set up: %s" % (pkg, e))
            skipped.append("%s failed to set up: %s" % (pkg, e))
            continue
        for impl, per_workload in impls.items():
            for name in names:
                if name not in per_workload:
                    continue  # this framework's peers do not cover it
                run, result = per_workload[name]
                print("bench.py: %s / %s ..." % (name, impl), file=sys.stderr, flush=True)
                row = {"source": "python", "framework": pkg, "workload": name, "impl": impl, "seconds": None,
                       "unit": "ms", "gflops": None, "metajit_over_impl": None,
                       "floor_seconds": None, "over_floor": None, "target": "", "measured": "",
                       "met": None, "note": "", "max_rel_err": None, "reps": 0}
                base = cpp.get(name, {})
                row["floor_seconds"] = base.get("floor_seconds")
                try:
                    err = max_rel_err(np, result(), refs[name])
                    row["max_rel_err"] = err
                    if not err <= TOLERANCE[name]:
                        row["note"] = "wrong result: max rel err %.3g (tolerance %.0e); not timed" % (
                            err, TOLERANCE[name])
                        rows.append(row)
                        continue
                    row["seconds"], row["reps"] = time_call(run, args.budget)
                except Exception as e:  # noqa: BLE001
                    row["note"] = "failed: %s" % (str(e).splitlines() or ["?"])[0][:200]
                    rows.append(row)
                    continue
                s = row["seconds"]
                if name in FLOPS:
                    row["gflops"] = FLOPS[name] / s / 1e9
                if base.get("seconds"):
                    row["metajit_over_impl"] = base["seconds"] / s
                if row["floor_seconds"]:
                    row["over_floor"] = s / row["floor_seconds"]
                judged = {CONV: ("PyTorch eager", ">= 80% of PyTorch", 1 / 0.8),
                          CONV_STEM: ("PyTorch eager", "(reported)", None),
                          CONV_1X1: ("PyTorch eager", "(reported)", None),
                          SOFTMAX: ("PyTorch eager", "metajit faster", 1.0),
                          MATMUL: ("PyTorch eager", "(reported)", None),
                          MATMUL_BF16: ("PyTorch eager", "metajit faster", 1.0),
                          SELU_BF16: ("PyTorch eager", "(reported)", None),
                          SELU_F16: ("PyTorch eager", "(reported)", None),
                          CONV_GX: ("PyTorch eager", "(reported)", None),
                          CONV_GW: ("PyTorch eager", "(reported)", None),
                          EMB_BWD: ("PyTorch eager", "(reported)", None),
                          GATHER: ("PyTorch eager", "(reported)", None)}
                if name in judged and impl.startswith(judged[name][0]) and base.get("seconds"):
                    row["target"] = judged[name][1]
                    row["measured"] = "metajit at %.0f%% of its speed" % (100 * s / base["seconds"])
                    if judged[name][2] is not None:
                        row["met"] = base["seconds"] <= judged[name][2] * s
                if name == SELU and impl == "numpy":
                    row["target"] = "metajit faster"
                    if base.get("seconds"):
                        row["measured"] = "%.2fx faster" % (s / base["seconds"])
                        row["met"] = s > base["seconds"]
                rows.append(row)

    if "numpy" in wanted and (not args.only or args.only in DISPATCH):
        rows.extend(dispatch_rows(np, doc["rows"]))
        names.append(DISPATCH)

    # Training steps (peers_training.py): the same workload names as the C++ training rows.
    train_names = [n for n in peers_training.TRAIN_WORKLOADS if args.only in n]
    if train_names:
        train, train_skipped = peers_training.train_rows(np, wanted, train_names, cpp,
                                                         args.budget, import_jittor)
        rows.extend(train)
        skipped.extend(s for s in train_skipped if s not in skipped)
        names.extend(train_names)

    # The transformer block (peers_transformer.py), which also checks metajit's C++ rows against
    # its float64 reference and writes the result into them.
    tf_names = [n for n in peers_transformer.WORKLOADS if args.only in n]
    extra_notes = []
    if tf_names:
        tf, tf_skipped, extra_notes = peers_transformer.transformer_rows(
            np, wanted, tf_names, cpp, args.budget, max_rel_err)
        rows.extend(tf)
        skipped.extend(s for s in tf_skipped if s not in skipped)
        names.extend(tf_names)

    # The GPT (peers_gpt.py), from the weights metajit_bench wrote; it also checks metajit's C++
    # rows (first loss and logits against float64, the loss curve against PyTorch eager's).
    gpt_names = [n for n in peers_gpt.WORKLOADS if args.only in n]
    if gpt_names:
        gp, gp_skipped, gp_notes = peers_gpt.gpt_rows(np, wanted, gpt_names, cpp, args.budget,
                                                      max_rel_err, args.target)
        rows.extend(gp)
        skipped.extend(s for s in gp_skipped if s not in skipped)
        names.extend(gpt_names)
        extra_notes.extend(gp_notes)

    # Jittor's lazy training loop (peers_lazy_loop.py): step 10 against step 1,000 of one run.
    lazy_names = [n for n in peers_lazy_loop.WORKLOADS if args.only in n]
    if lazy_names:
        lazy, lazy_skipped = peers_lazy_loop.lazy_loop_rows(np, wanted, lazy_names, cpp,
                                                            import_jittor)
        rows.extend(lazy)
        skipped.extend(s for s in lazy_skipped if s not in skipped)
        names.extend(lazy_names)

    print()
    print("Python peers (floor and metajit times from the C++ rows of %s)" % args.json)
    last = None
    for name in names:
        for row in [r for r in rows if r["workload"] == name]:
            print_row(row, row["workload"] != last)
            last = row["workload"]
        print()
    for row in rows:
        if row["note"]:
            print("  %s / %s: %s" % (row["workload"], row["impl"], row["note"]))
    for line in extra_notes:
        print("  " + line)

    doc["rows"].extend(rows)
    doc.setdefault("meta", {})["python_target"] = args.target
    py = doc.setdefault("meta", {}).setdefault("python", {})
    for pkg in wanted:
        mod = sys.modules.get(pkg)
        py[pkg] = {"python": sys.version.split()[0], "numpy": np.__version__,
                   "version": getattr(mod, "__version__", None),
                   "status": next((s for s in skipped if s.startswith(pkg + " ")), "measured")}
    with open(args.json, "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
    print("appended %d Python rows to %s" % (len(rows), args.json))
    return 0


if __name__ == "__main__":
    sys.exit(main())

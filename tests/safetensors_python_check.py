#!/usr/bin/env python3
"""metajit's safetensors files against Python's own package (README "Weights (safetensors)").

  1. safetensors.numpy.save_file writes a file; metajit loads it (tests/programs/
     safetensors_tool read) and every tensor's dtype, shape and bytes, and the metadata, match.
  2. metajit writes the same arrays (safetensors_tool write); safetensors.numpy.load_file reads
     them back equal, and the file's bytes equal what save_file writes for the same arrays and
     metadata (one metadata key: Python orders several by a per-process hash).

Usage: safetensors_python_check.py SAFETENSORS_TOOL WORK_DIR
Exits 77 (CTest: skipped) with the reason when numpy or safetensors cannot be imported.
"""
import json
import os
import subprocess
import sys

SKIP = 77

try:
    import numpy as np
    from safetensors.numpy import load_file, save, save_file
except ImportError as e:  # make test installs them (scripts/install_test_deps.sh), best effort
    print(f"skipped: Python's safetensors/numpy are not importable ({e}); "
          "install them with: python3 -m pip install safetensors numpy")
    sys.exit(SKIP)

CODES = {np.float32: "F32", np.float64: "F64", np.int32: "I32", np.int64: "I64", np.bool_: "BOOL"}


def arrays():
    rng = np.random.default_rng(27)
    return {
        "layer.0.weight": rng.standard_normal((3, 4)).astype(np.float32),
        "layer.0.bias": np.array([-0.0, 1e-38, 3.4e38, -1.5], dtype=np.float32),
        "f64": rng.standard_normal(5),
        "scale": np.array(2.5),  # 0-d
        "i32": np.array([-2**31, -1, 0, 2**31 - 1], dtype=np.int32),
        "i64": np.array([[-2**63, 1], [7, 2**63 - 1]], dtype=np.int64),
        "mask": np.array([True, False, True]),
        "empty": np.zeros((0, 2), dtype=np.float32),
        "\u00fcn\u00efcode \"name\"": np.arange(3, dtype=np.int32),
    }


def same(name, got_dtype, got_shape, got, want):
    if got_dtype != CODES[want.dtype.type] or list(got_shape) != list(want.shape) \
            or got.tobytes() != want.tobytes():
        print(f"FAIL: {name!r}: got {got_dtype} {list(got_shape)} {got!r}, "
              f"want {CODES[want.dtype.type]} {list(want.shape)} {want!r}")
        return False
    return True


def main():
    tool, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    want = arrays()
    meta = {"format": "np"}
    ok = True

    # 1. Python writes, metajit reads.
    py_file = os.path.join(work, "python.safetensors")
    save_file(want, py_file, metadata=meta)
    out = json.loads(subprocess.run([tool, "read", py_file], check=True, capture_output=True,
                                    text=True).stdout)
    if set(out["tensors"]) != set(want) or out["metadata"] != meta:
        print(f"FAIL: metajit read names {sorted(out['tensors'])} metadata {out['metadata']}")
        ok = False
    for name, a in want.items():
        t = out["tensors"].get(name)
        if t is not None:
            got = np.array(t["values"], dtype=a.dtype).reshape(t["shape"])
            ok &= same(name, t["dtype"], t["shape"], got, a)

    # 2. metajit writes, Python reads, and the bytes are Python's.
    for m in (meta, {}):
        spec = {"tensors": {n: {"dtype": CODES[a.dtype.type], "shape": list(a.shape),
                                "values": a.ravel().tolist()} for n, a in want.items()},
                "metadata": m}
        spec_file = os.path.join(work, "spec.json")
        with open(spec_file, "w") as f:
            json.dump(spec, f)
        mj_file = os.path.join(work, "metajit.safetensors")
        subprocess.run([tool, "write", spec_file, mj_file], check=True)
        back = load_file(mj_file)
        for name, a in want.items():
            ok &= same(name, CODES[back[name].dtype.type], back[name].shape, back[name], a)
        with open(mj_file, "rb") as f:
            mine = f.read()
        theirs = save(want, metadata=m or None)
        if mine != theirs:
            print(f"FAIL: metadata {m}: metajit's file differs from safetensors.numpy.save's:\n"
                  f"  metajit: {mine[:400]!r}\n  python:  {theirs[:400]!r}")
            ok = False
    import safetensors
    print(f"safetensors {safetensors.__version__}, numpy {np.__version__}: "
          + ("metajit and Python read each other's files; the bytes match" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

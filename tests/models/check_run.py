#!/usr/bin/env python3
"""Runs an ONNX model with `tuneforge model run` and with onnxruntime on the same
seeded inputs, and checks that every output matches within rtol 1e-3 / atol 1e-4
(issue 17's bound). Exit status 0 when all match, 1 otherwise.

  check_run.py TUNEFORGE MODEL.onnx WORKDIR [--threads N] [--seed S] [--db F]
"""
import argparse
import os
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort

RTOL = 1e-3
ATOL = 1e-4


def main():
    p = argparse.ArgumentParser()
    p.add_argument("tuneforge")
    p.add_argument("model")
    p.add_argument("workdir")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--db", default="")
    a = p.parse_args()

    os.makedirs(a.workdir, exist_ok=True)
    model = onnx.load(a.model, load_external_data=False)
    weights = {t.name for t in model.graph.initializer}
    rng = np.random.default_rng(a.seed)
    feeds = {}
    args = [a.tuneforge, "model", "run", a.model, "--output-dir", os.path.join(a.workdir, "out")]
    for v in model.graph.input:
        if v.name in weights:
            continue
        shape = [d.dim_value for d in v.type.tensor_type.shape.dim]
        x = rng.uniform(-1, 1, shape).astype(np.float32)
        path = os.path.join(a.workdir, v.name.replace("/", "_") + ".in.npy")
        np.save(path, x)
        feeds[v.name] = x
        args += ["--input", f"{v.name}={path}"]
    if a.threads:
        args += ["--threads", str(a.threads)]
    if a.db:
        args += ["--db", a.db]

    options = ort.SessionOptions()
    if a.threads:
        options.intra_op_num_threads = a.threads
    session = ort.InferenceSession(a.model, options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    expected = session.run(names, feeds)

    print(" ".join(args), flush=True)
    run = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print(run.stdout, end="")
    if run.returncode != 0:
        print(f"FAIL: tuneforge model run exited {run.returncode}")
        return 1
    ok = True
    for name, want in zip(names, expected):
        got = np.load(os.path.join(a.workdir, "out", name.replace("/", "_") + ".npy"))
        if got.shape != want.shape:
            print(f"FAIL {name}: shape {got.shape}, onnxruntime {want.shape}")
            ok = False
            continue
        err = np.abs(got.astype(np.float64) - want.astype(np.float64))
        bound = ATOL + RTOL * np.abs(want.astype(np.float64))
        worst = float(np.max(err - bound)) if err.size else -1.0
        bad = int(np.count_nonzero(err > bound))
        print(f"{name}: shape {list(want.shape)}, max |error| {float(err.max()):.3g}, "
              f"{bad} of {err.size} outside rtol {RTOL} / atol {ATOL}")
        if bad or not np.all(np.isfinite(got)):
            i = int(np.argmax(err - bound))
            print(f"FAIL {name}: element {i}: {got.flat[i]!r} vs onnxruntime {want.flat[i]!r} "
                  f"(excess {worst:.3g})")
            ok = False
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

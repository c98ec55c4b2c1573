#!/usr/bin/env python3
"""Runs an ONNX model with `tuneforge model run` and with onnxruntime on the same
seeded inputs, and checks that every output matches within rtol 1e-3 / atol 1e-4
(issue 17's bound) and that the largest error is at most 1e-3 of the output's
largest magnitude (issue 64's: atol alone would pass a softmax over 1000 classes,
whose values are near 1e-3, with 10% errors). Exit status 0 when all match, 1
otherwise.

  check_run.py TUNEFORGE MODEL.onnx WORKDIR [--threads N] [--seed S] [--db F]
               [--deploy EXAMPLE.c] [--dim NAME=N,...] [--quantized] [--float-model F.onnx]

--quantized: a quantized model's outputs that a DequantizeLinear makes must be within
one quantization step of onnxruntime's in every element instead (see compare).

--float-model F.onnx: a dynamically quantized model's float original; outputs that no
DequantizeLinear makes must then stay well inside onnxruntime's own quantization
error, its quantized run against F's (see compare).

--dim binds symbolic input dimensions (batch_size, sequence, ...) for both sides:
tuneforge gets the flag, onnxruntime inputs of the bound shapes.

With --deploy, the model is also deployed as a library (`tuneforge deploy --model`),
the C example is compiled against it and run on the same inputs: its outputs must
match onnxruntime's within the same bound and the executor's to the last few bits
(the library runs the executor's kernels in the executor's order).
"""
import argparse
import os
import subprocess
import sys

import numpy as np
import onnx
import onnx.numpy_helper
import onnxruntime as ort

RTOL = 1e-3
ATOL = 1e-4
SCALED = 1e-3  # max |error| / max |onnxruntime's output|


def main():
    p = argparse.ArgumentParser()
    p.add_argument("tuneforge")
    p.add_argument("model")
    p.add_argument("workdir")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--db", default="")
    p.add_argument("--deploy", default="")
    p.add_argument("--dim", action="append", default=[])
    p.add_argument("--quantized", action="store_true",
                   help="outputs of DequantizeLinear within one quantization step (see compare)")
    p.add_argument("--float-model", default="",
                   help="a dynamically quantized model's float original: its outputs bound ours (see compare)")
    a = p.parse_args()
    dims = {}
    for item in a.dim:
        for binding in item.split(","):
            name, _, size = binding.partition("=")
            dims[name] = int(size)

    os.makedirs(a.workdir, exist_ok=True)
    model = onnx.load(a.model, load_external_data=False)
    weights = {t.name for t in model.graph.initializer}
    rng = np.random.default_rng(a.seed)
    feeds = {}
    args = [a.tuneforge, "model", "run", a.model, "--output-dir", os.path.join(a.workdir, "out")]
    for v in model.graph.input:
        if v.name in weights:
            continue
        shape = [dims[d.dim_param] if d.dim_param else d.dim_value for d in v.type.tensor_type.shape.dim]
        x = seeded_input(model, v, shape, rng)
        path = os.path.join(a.workdir, v.name.replace("/", "_") + ".in.npy")
        np.save(path, x)
        feeds[v.name] = x
        args += ["--input", f"{v.name}={path}"]
    if a.threads:
        args += ["--threads", str(a.threads)]
    for item in a.dim:
        args += ["--dim", item]
    if a.db:
        args += ["--db", a.db]

    options = ort.SessionOptions()
    if a.threads:
        options.intra_op_num_threads = a.threads
    session = ort.InferenceSession(a.model, options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    expected = session.run(names, feeds)

    if not run_logged(args, "tuneforge model run"):
        return 1
    ok = True
    outputs = {name: np.load(os.path.join(a.workdir, "out", name.replace("/", "_") + ".npy")) for name in names}
    steps = quantization_steps(model) if a.quantized else None
    noise = None
    if a.float_model:
        # onnxruntime's own quantization error: its quantized run against the float model's.
        original = ort.InferenceSession(a.float_model, options, providers=["CPUExecutionProvider"])
        noise = {name: np.abs(want.astype(np.float64) - got.astype(np.float64))
                 for name, want, got in zip(names, expected, original.run(names, feeds))}
    ok = compare(outputs, names, expected, "tuneforge model run", steps, noise) and ok
    if a.deploy:
        ok = check_library(a, names, expected, feeds, outputs, steps, noise) and ok
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


def seeded_input(model, value, shape, rng):
    """Uniform in [-1, 1) for float32; for int64 (token ids, masks): valid indices
    where the input indexes a Gather of a weight, else 0 or 1 (a mask)."""
    if value.type.tensor_type.elem_type != onnx.TensorProto.INT64:
        return rng.uniform(-1, 1, shape).astype(np.float32)
    weights = {t.name: list(t.dims) for t in model.graph.initializer}
    bounds = []
    for node in model.graph.node:
        if node.op_type == "Gather" and len(node.input) > 1 and node.input[1] == value.name and \
                node.input[0] in weights:
            dims = weights[node.input[0]]
            axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
            bounds.append(dims[axis % len(dims)])
    if not bounds:
        return rng.integers(0, 2, shape).astype(np.int64)
    return rng.integers(0, min(bounds), shape).astype(np.int64)


def run_logged(cmd, what):
    """Runs `cmd`, echoing it and its output; False (after a FAIL line) if it fails."""
    print(" ".join(cmd), flush=True)
    run = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print(run.stdout, end="")
    if run.returncode != 0:
        print(f"FAIL: {what} exited {run.returncode}")
        return False
    return True


def check_library(a, names, expected, feeds, executor_outputs, steps=None, noise=None):
    lib = os.path.join(a.workdir, "lib")
    deploy = [a.tuneforge, "deploy", "--model", a.model, "--out", lib]
    if a.threads:
        deploy += ["--threads", str(a.threads)]
    if a.db:
        deploy += ["--db", a.db]
    if not run_logged(deploy, "tuneforge deploy --model"):
        return False
    example = os.path.join(a.workdir, "model_example")
    cc = ["cc", "-std=c11", "-O2", a.deploy, "-I", lib, "-L", lib, "-ltuneforge_model",
          "-Wl,-rpath," + os.path.abspath(lib), "-o", example]
    build = subprocess.run(cc, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if build.returncode != 0:
        print(" ".join(cc) + "\n" + build.stdout + "FAIL: the C example does not build")
        return False
    files = []
    for name, x in feeds.items():
        path = os.path.join(a.workdir, name.replace("/", "_") + ".in.bin")
        x.tofile(path)
        files.append(path)
    out = os.path.join(a.workdir, "lib_out")
    os.makedirs(out, exist_ok=True)
    if not run_logged([example, lib, "--out", out] + files, "the C example"):
        return False
    got = {}
    for i, (name, want) in enumerate(zip(names, expected)):
        got[name] = np.fromfile(os.path.join(out, f"output{i}.bin"), dtype=np.float32).reshape(want.shape)
    ok = compare(got, names, expected, "the deployed library", steps, noise)
    for name in names:
        diff = np.abs(got[name].astype(np.float64) - executor_outputs[name].astype(np.float64))
        bound = 1e-6 * (1 + np.abs(executor_outputs[name].astype(np.float64)))
        bad = int(np.count_nonzero(diff > bound))
        print(f"{name}: library vs executor, max |difference| {float(diff.max()) if diff.size else 0:.3g}, "
              f"{bad} outside 1e-6")
        if bad:
            print(f"FAIL {name}: the library differs from the executor")
            ok = False
    return ok


def quantization_steps(model):
    """Per graph output made by a DequantizeLinear of constant scales: the largest
    scale, one quantization step of that output."""
    scales = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    steps = {}
    for node in model.graph.node:
        if node.op_type == "DequantizeLinear" and len(node.input) > 1 and node.input[1] in scales:
            steps[node.output[0]] = float(np.max(scales[node.input[1]]))
    return {v.name: steps[v.name] for v in model.graph.output if v.name in steps}


def compare(outputs, names, expected, what, steps=None, noise=None):
    """The bounds above; with `steps` (--quantized), an output that a
    DequantizeLinear makes must instead be within one quantization step of
    onnxruntime's in every element (issue 67's bound): the requantization of a value
    lying within float32 error of a half may round either way (onnxruntime's own
    optimized and unoptimized sessions differ so), and the layers tuneforge computes
    in float32 on the dequantized values round differently from integer kernels.

    With `noise` (--float-model: a dynamically quantized model, whose float outputs no
    quantization step bounds), an output must instead differ from onnxruntime's by at
    most a quarter of onnxruntime's own quantization error (its quantized run against
    the float model's) in the largest element, and a tenth of it in root mean square:
    an activation quantized at run time rounds a value within float32 error of a half
    either way (our LayerNorm or Gelu is not onnxruntime's to the last bit), and each
    such flip moves the matmul after it by a step times the weights."""
    ok = True
    print(f"{what} vs onnxruntime:")
    for name, want in zip(names, expected):
        got = outputs[name]
        if got.shape != want.shape:
            print(f"FAIL {name}: shape {got.shape}, onnxruntime {want.shape}")
            ok = False
            continue
        if steps and name in steps:
            err = np.abs(got.astype(np.float64) - want.astype(np.float64)) / steps[name]
            worst = float(err.max()) if err.size else 0.0
            off = int(np.count_nonzero(err > 0.5))
            far = int(np.count_nonzero(err > 1.0 + 1e-4))
            print(f"{name}: shape {list(want.shape)}, quantization step {steps[name]:.4g}: {off} of {err.size} "
                  f"elements one step or more off, {far} more than one, at most {worst:.4f} steps")
            if far > 0 or not np.all(np.isfinite(got)):
                i = int(np.argmax(err))
                print(f"FAIL {name}: element {i}: {got.flat[i]!r} vs onnxruntime {want.flat[i]!r} "
                      f"({worst:.3g} quantization steps apart; {far} elements more than one step off)")
                ok = False
            continue
        if noise and name in noise:
            err = np.abs(got.astype(np.float64) - want.astype(np.float64))
            q = noise[name]
            worst, q_worst = float(err.max()), float(q.max())
            rms, q_rms = float(np.sqrt(np.mean(err ** 2))), float(np.sqrt(np.mean(q ** 2)))
            print(f"{name}: shape {list(want.shape)}, max |error| {worst:.3g} (onnxruntime's quantization error "
                  f"{q_worst:.3g}), rms {rms:.3g} (its {q_rms:.3g})")
            if not np.all(np.isfinite(got)) or worst > 0.25 * q_worst or rms > 0.1 * q_rms:
                print(f"FAIL {name}: beyond a quarter of onnxruntime's quantization error at most, a tenth in rms")
                ok = False
            continue
        err = np.abs(got.astype(np.float64) - want.astype(np.float64))
        bound = ATOL + RTOL * np.abs(want.astype(np.float64))
        worst = float(np.max(err - bound)) if err.size else -1.0
        bad = int(np.count_nonzero(err > bound))
        scale = float(np.max(np.abs(want))) if want.size else 0.0
        scaled = float(err.max()) / scale if err.size and scale > 0 else 0.0
        print(f"{name}: shape {list(want.shape)}, max |error| {float(err.max()) if err.size else 0.0:.3g} "
              f"({scaled:.2g} of the largest |value|), {bad} of {err.size} outside rtol {RTOL} / atol {ATOL}")
        if scaled > SCALED:
            print(f"FAIL {name}: the largest error is {scaled:.3g} of the output's largest magnitude "
                  f"(at most {SCALED})")
            ok = False
        if bad or not np.all(np.isfinite(got)):
            i = int(np.argmax(err - bound))
            print(f"FAIL {name}: element {i}: {got.flat[i]!r} vs onnxruntime {want.flat[i]!r} "
                  f"(excess {worst:.3g})")
            ok = False
    return ok


if __name__ == "__main__":
    sys.exit(main())

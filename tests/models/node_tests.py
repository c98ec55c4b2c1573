#!/usr/bin/env python3
"""Runs the ONNX project's backend node tests (onnx/backend/test/data/node in the
installed onnx package: per operator and attribute, a model, its inputs and the
expected outputs) through `tuneforge model run` and sorts each into

  pass     every output matches (rtol 1e-3, atol 1e-5) with the expected shape
  refused  tuneforge exits 1 with a one-line reason (an unsupported operator,
           attribute or input form)
  wrong    tuneforge ran and an output is missing, has another shape or other values
  crash    anything else: a signal, another exit status, a timeout, exit 1 without
           a reason

Only the tests whose outputs are float32 and whose inputs are float32 or
shape-deciding count (the float32 set); the rest are skipped and counted. tuneforge
compiles for static shapes, so an input that decides an output's shape or an
operator's layout (Resize's and Upsample's scales and sizes, OneHot's depth, Range's
bounds, Reshape's shape, the axes of Squeeze, Unsqueeze and the reductions, Slice's
starts, ends, axes and steps, Split's sizes, Pad's pads, value and axes, Expand's
shape, Tile's repeats, CumSum's axis, Trilu's k, TopK's K, DFT's length and axis) must be a constant, as exporters
write it: a test that feeds one as a graph input gets it bound to the test's value as
an initializer first (SHAPE_INPUTS; the summary counts these tests). Prints one line per wrong or crashed test, the
refusal reasons by frequency, and a summary line. Exit status 1 when any test is
wrong or crashed (a wrong answer is the worst thing the product can give), or when
fewer than --min-pass tests pass; 0 otherwise.

With --int64 the set also takes the tests whose inputs or outputs are int64 (token
ids, Gather indices, ArgMax's output): int64 at run time, fed and compared as int64.

  node_tests.py TUNEFORGE WORKDIR [--threads N] [--jobs J] [--filter SUBSTRING]
                [--min-pass N] [--list] [--int64]
"""
import argparse
import collections
import concurrent.futures
import glob
import os
import shutil
import subprocess
import sys

import numpy as np
import onnx
from onnx import numpy_helper

RTOL = 1e-3
ATOL = 1e-5
TIMEOUT_SECONDS = 120


# (operator, input index) -> the inputs whose values decide output shapes, bound as
# constants. Resize-10 and Upsample-9 take scales as input 1; Resize-11+ takes
# roi, scales, sizes as inputs 1-3 (roi only matters to tf_crop_and_resize, whose
# kernel tables are computed from it);
# OneHot's depth; Range's start, limit and delta.
SHAPE_INPUTS = {("Upsample", 1), ("Resize", 1), ("Resize", 2), ("Resize", 3), ("OneHot", 1), ("Range", 0), ("Range", 1),
                ("Range", 2), ("Reshape", 1), ("Squeeze", 1), ("Unsqueeze", 1), ("Slice", 1), ("Slice", 2),
                ("Slice", 3), ("Slice", 4), ("Split", 1), ("Pad", 1), ("Pad", 2), ("Pad", 3), ("Expand", 1),
                ("Tile", 1), ("CumSum", 1), ("Trilu", 1), ("TopK", 1), ("DFT", 1), ("DFT", 2)} | {
                    (f"Reduce{kind}", 1)
                    for kind in ("L1", "L2", "LogSum", "LogSumExp", "Max", "Mean", "Min", "Prod", "Sum", "SumSquare")}


def shape_input_names(model):
    names = set()
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    for node in model.graph.node:
        for i, name in enumerate(node.input):
            if (node.op_type, i) in SHAPE_INPUTS or (node.op_type == "Resize" and opset < 11 and i == 1):
                names.add(name)
    return names


def node_test_dirs():
    root = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "node")
    return sorted(d for d in glob.glob(os.path.join(root, "test_*")) if os.path.isdir(d))


TYPES = {onnx.TensorProto.FLOAT}  # --int64 adds INT64


def is_float_tensor(value_info):
    t = value_info.type
    return t.HasField("tensor_type") and t.tensor_type.elem_type in TYPES


def load_case(test_dir):
    """The model and its first data set, or None when the test is not float32-only."""
    model_path = os.path.join(test_dir, "model.onnx")
    data_dir = os.path.join(test_dir, "test_data_set_0")
    if not os.path.isfile(model_path) or not os.path.isdir(data_dir):
        return None
    model = onnx.load(model_path)
    weights = {t.name for t in model.graph.initializer}
    inputs = [v for v in model.graph.input if v.name not in weights]
    outputs = list(model.graph.output)
    shape_inputs = shape_input_names(model)
    if not outputs or not all(is_float_tensor(v) for v in outputs):
        return None
    if not all(is_float_tensor(v) or v.name in shape_inputs for v in inputs):
        return None
    feeds = load_tensors(data_dir, "input", inputs)
    expected = load_tensors(data_dir, "output", outputs)
    if feeds is None or expected is None:
        return None
    bind = shape_inputs & {name for name, _ in feeds}
    if bind:
        for name, array in feeds:
            if name in bind:
                model.graph.initializer.append(numpy_helper.from_array(array, name))
        kept = [v for v in model.graph.input if v.name not in bind]
        del model.graph.input[:]
        model.graph.input.extend(kept)
        feeds = [(name, array) for name, array in feeds if name not in bind]
    return model if bind else model_path, feeds, expected


def load_tensors(data_dir, kind, values):
    """(name, array) of each value from DATA_DIR/KIND_<i>.pb, or None when one is missing."""
    tensors = []
    for i, v in enumerate(values):
        path = os.path.join(data_dir, f"{kind}_{i}.pb")
        if not os.path.isfile(path):
            return None
        tensors.append((v.name, numpy_helper.to_array(onnx.load_tensor(path))))
    return tensors


def safe_name(name):
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)


def run_case(tuneforge, workdir, threads, test_dir):
    name = os.path.basename(test_dir)
    case = load_case(test_dir)
    if case is None:
        return name, "skipped", "", False
    model_path, feeds, expected = case
    work = os.path.join(workdir, name)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    bound = not isinstance(model_path, str)
    if bound:  # shape inputs bound as initializers
        path = os.path.join(work, "model.onnx")
        onnx.save(model_path, path)
        model_path = path
    out_dir = os.path.join(work, "out")
    args = [tuneforge, "model", "run", model_path, "--output-dir", out_dir, "--threads", str(threads)]
    for input_name, array in feeds:
        path = os.path.join(work, safe_name(input_name) + ".in.npy")
        np.save(path, array if array.dtype == np.int64 else array.astype(np.float32))
        args += ["--input", f"{input_name}={path}"]
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        return name, "crash", f"no answer within {TIMEOUT_SECONDS} s", bound
    said = [line for line in (done.stderr + done.stdout).splitlines() if line.strip()]
    if done.returncode == 1 and said:
        return name, "refused", said[-1], bound
    if done.returncode != 0:
        return name, "crash", f"exit {done.returncode}: {said[-1] if said else '(no message)'}", bound
    for output_name, want in expected:
        path = os.path.join(out_dir, output_name + ".npy")
        if not os.path.isfile(path):
            return name, "wrong", f"no output {output_name}", bound
        got = np.load(path)
        if got.shape != want.shape:
            return name, "wrong", f"{output_name}: shape {list(got.shape)}, expected {list(want.shape)}", bound
        if not np.allclose(got, want, rtol=RTOL, atol=ATOL, equal_nan=True):
            bad = np.abs(got.astype(np.float64) - want) - (ATOL + RTOL * np.abs(want))
            i = np.unravel_index(np.nanargmax(np.where(np.isnan(bad), np.inf, bad)), want.shape)
            return name, "wrong", f"{output_name}{list(i)} = {got[i]}, expected {want[i]}", bound
    shutil.rmtree(work, ignore_errors=True)
    return name, "pass", "", bound


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("tuneforge")
    p.add_argument("workdir")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    p.add_argument("--filter", default="")
    p.add_argument("--min-pass", type=int, default=0)
    p.add_argument("--list", action="store_true", help="print every test's verdict")
    p.add_argument("--int64", action="store_true",
                   help="the float32-and-int64 set: also tests with int64 inputs or outputs (token ids, indices)")
    a = p.parse_args()
    if a.int64:
        TYPES.add(onnx.TensorProto.INT64)
    if a.threads < 1 or a.jobs < 1 or a.min_pass < 0:
        p.error("--threads and --jobs must be >= 1, --min-pass >= 0")
    if not os.access(a.tuneforge, os.X_OK):
        p.error(f"{a.tuneforge}: not an executable")
    dirs = [d for d in node_test_dirs() if a.filter in os.path.basename(d)]
    if not dirs:
        p.error("no node tests found (is onnx installed with its test data?)")
    os.makedirs(a.workdir, exist_ok=True)

    results = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=a.jobs) as pool:
        futures = [pool.submit(run_case, a.tuneforge, a.workdir, a.threads, d) for d in dirs]
        for f in futures:
            results.append(f.result())

    counts = collections.Counter(verdict for _, verdict, _, _ in results)
    bound = sum(1 for _, _, _, b in results if b)
    reasons = collections.Counter()
    for name, verdict, detail, _ in results:
        if a.list and verdict != "skipped":
            print(f"{verdict:8} {name}: {detail}" if detail else f"{verdict:8} {name}")
        elif verdict in ("wrong", "crash"):
            print(f"{verdict.upper()} {name}: {detail}")
        if verdict == "refused":
            # The reason without the node's name: "unsupported operator 'X'" and the like.
            reasons[detail.split(" (supported: ")[0].split(": ")[-1][:100]] += 1
    if reasons:
        print("refusals by reason (most frequent first):")
        for reason, n in reasons.most_common(25):
            print(f"  {n:4}  {reason}")
    considered = len(results) - counts["skipped"]
    share = 100.0 * counts["pass"] / considered if considered else 0.0
    print(f"onnx {onnx.__version__} node tests, {'float32+int64' if a.int64 else 'float32'} set: {considered} tests, "
          f"{counts['pass']} pass ({share:.1f}%), {counts['refused']} refused, "
          f"{counts['wrong']} wrong, {counts['crash']} crash ({counts['skipped']} others skipped; "
          f"{bound} with shape inputs bound as constants)")
    if counts["wrong"] or counts["crash"]:
        return 1
    if counts["pass"] < a.min_pass:
        print(f"fewer than --min-pass {a.min_pass} tests pass")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

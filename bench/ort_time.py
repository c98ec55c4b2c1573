#!/usr/bin/env python3
"""The onnxruntime side of `tuneforge bench model`: loads a model in onnxruntime's
CPU provider with the given intra-op thread count (its strongest configuration on a
CPU: graph optimizations at their highest level, the default), warms up, times
`--runs` inferences one after another, and prints {"samples_ms": [...]} as JSON.

  ort_time.py MODEL.onnx --threads N --runs R [--warmup W] [--seed S] [--shape NAME=D0,D1,...]...

--shape gives an input's shape where the model's has symbolic dimensions (the
shapes tuneforge bound with --dim/--shape); inputs not named use the model's.
"""
import argparse
import json
import sys
import time

import numpy as np
import onnx
import onnxruntime as ort


def main():
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--runs", type=int, required=True)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--shape", action="append", default=[])
    a = p.parse_args()
    shapes = {}
    for item in a.shape:
        name, _, dims = item.partition("=")
        shapes[name] = [int(d) for d in dims.split(",")]

    options = ort.SessionOptions()
    options.intra_op_num_threads = a.threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(a.model, options, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(a.seed)
    feeds = {}
    for i in session.get_inputs():
        shape = shapes.get(i.name, i.shape)
        if not all(isinstance(d, int) for d in shape):
            p.error(f"input {i.name} has symbolic dimensions {i.shape}: give --shape {i.name}=...")
        if i.type == "tensor(int64)":  # token ids in [0, 2) (valid for any vocabulary), masks of 0 and 1
            feeds[i.name] = rng.integers(0, 2, shape).astype(np.int64)
        else:
            feeds[i.name] = rng.uniform(-1, 1, shape).astype(np.float32)
    for _ in range(a.warmup):
        session.run(None, feeds)
    samples = []
    for _ in range(a.runs):
        start = time.perf_counter()
        session.run(None, feeds)
        samples.append((time.perf_counter() - start) * 1e3)
    json.dump({"samples_ms": samples, "version": ort.__version__}, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Writes the ONNX test models of the frontend tests into OUT_DIR (seeded weights,
nothing large committed): run by ctest with the project's venv (scripts/
install-python-deps).

  mlp.onnx           a tiny MLP: MatMul + Add + Relu, Gemm, Softmax (batch 2)
  mlp_external.onnx  the same model with its weights in mlp_external.weights
                     (ONNX external data), as large models are stored
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def mlp(rng):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])
    w1 = numpy_helper.from_array(rng.standard_normal((16, 32)).astype(np.float32), "w1")
    b1 = numpy_helper.from_array(rng.standard_normal((32,)).astype(np.float32), "b1")
    w2 = numpy_helper.from_array(rng.standard_normal((4, 32)).astype(np.float32), "w2")
    b2 = numpy_helper.from_array(rng.standard_normal((4,)).astype(np.float32), "b2")
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h0"], name="fc1"),
        helper.make_node("Add", ["h0", "b1"], ["h1"], name="fc1_bias"),
        helper.make_node("Relu", ["h1"], ["h2"], name="relu1"),
        helper.make_node("Gemm", ["h2", "w2", "b2"], ["logits"], name="fc2", transB=1),
        helper.make_node("Softmax", ["logits"], ["y"], name="softmax", axis=-1),
    ]
    graph = helper.make_graph(nodes, "mlp", [x], [y], [w1, b1, w2, b2])
    model = helper.make_model(graph, producer_name="tuneforge-tests",
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_models.py OUT_DIR")
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    model = mlp(np.random.default_rng(20261125))
    onnx.save(model, os.path.join(out, "mlp.onnx"))
    onnx.save(model, os.path.join(out, "mlp_external.onnx"), save_as_external_data=True,
              all_tensors_to_one_file=True, location="mlp_external.weights",
              size_threshold=0)
    print("make_models.py: wrote mlp.onnx, mlp_external.onnx to", out)


if __name__ == "__main__":
    main()

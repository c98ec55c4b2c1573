#!/usr/bin/env python3
"""Writes the ONNX test models of the frontend tests into OUT_DIR (seeded weights,
nothing large committed): run by ctest with the project's venv (scripts/
install-python-deps).

  mlp.onnx           a tiny MLP: MatMul + Add + Relu, Gemm, Softmax (batch 2)
  mlp_external.onnx  the same model with its weights in mlp_external.weights
                     (ONNX external data), as large models are stored
  resblock.onnx      a ResNet basic block (conv+relu, conv+residual+relu) and a
                     depthwise conv with Clip as ReLU6
  convbn.onnx        Conv (auto_pad SAME_UPPER, stride 2) + a separate
                     BatchNormalization + Relu + MaxPool, then a Reshape whose shape
                     is computed (Shape, Gather, Unsqueeze, Concat) as exporters
                     write it, a Gemm, and a dead Sigmoid branch
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def finish(graph):
    """The model of `graph`: opset 17, IR version 8, checked."""
    model = helper.make_model(graph, producer_name="tuneforge-tests",
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


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
    return finish(graph)


def convbn(rng):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])
    f32 = lambda *s: rng.standard_normal(s).astype(np.float32)
    inits = [
        numpy_helper.from_array(f32(8, 3, 3, 3), "conv_w"),
        numpy_helper.from_array(f32(8), "conv_b"),
        numpy_helper.from_array(rng.uniform(0.5, 1.5, 8).astype(np.float32), "bn_scale"),
        numpy_helper.from_array(f32(8), "bn_bias"),
        numpy_helper.from_array(f32(8), "bn_mean"),
        numpy_helper.from_array(rng.uniform(0.5, 2.0, 8).astype(np.float32), "bn_var"),
        numpy_helper.from_array(np.array(0, dtype=np.int64), "zero"),
        numpy_helper.from_array(np.array([0], dtype=np.int64), "axes0"),
        numpy_helper.from_array(np.array([-1], dtype=np.int64), "minus_one"),
        numpy_helper.from_array(f32(10, 128), "fc_w"),
        numpy_helper.from_array(f32(10), "fc_b"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "conv_w", "conv_b"], ["c"], name="conv",
                         auto_pad="SAME_UPPER", strides=[2, 2]),
        helper.make_node("BatchNormalization", ["c", "bn_scale", "bn_bias", "bn_mean", "bn_var"],
                         ["b"], name="bn", epsilon=1e-5),
        helper.make_node("Relu", ["b"], ["r"], name="relu"),
        helper.make_node("Sigmoid", ["r"], ["unused"], name="dead"),
        helper.make_node("MaxPool", ["r"], ["p"], name="pool", kernel_shape=[2, 2],
                         strides=[2, 2]),
        helper.make_node("Shape", ["p"], ["p_shape"], name="shape"),
        helper.make_node("Gather", ["p_shape", "zero"], ["batch"], name="batch", axis=0),
        helper.make_node("Unsqueeze", ["batch", "axes0"], ["batch1"], name="unsqueeze"),
        helper.make_node("Concat", ["batch1", "minus_one"], ["flat_shape"], name="concat",
                         axis=0),
        helper.make_node("Reshape", ["p", "flat_shape"], ["flat"], name="flatten"),
        helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["y"], name="fc", transB=1),
    ]
    graph = helper.make_graph(nodes, "convbn", [x], [y], inits)
    return finish(graph)


def resblock(rng):
    """A ResNet basic block and a MobileNet depthwise layer: the conv2d tasks of
    conv1 and conv2 are the same kernel (weight 2) with different epilogues."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])
    f32 = lambda *s: (0.3 * rng.standard_normal(s)).astype(np.float32)
    inits = [
        numpy_helper.from_array(f32(8, 8, 3, 3), "w1"),
        numpy_helper.from_array(f32(8), "b1"),
        numpy_helper.from_array(f32(8, 8, 3, 3), "w2"),
        numpy_helper.from_array(f32(8), "b2"),
        numpy_helper.from_array(f32(8, 1, 3, 3), "wd"),
        numpy_helper.from_array(f32(8), "bd"),
        numpy_helper.from_array(np.array(0.0, dtype=np.float32), "zero"),
        numpy_helper.from_array(np.array(6.0, dtype=np.float32), "six"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "x"], ["s"], name="residual"),
        helper.make_node("Relu", ["s"], ["r2"], name="relu2"),
        helper.make_node("Conv", ["r2", "wd", "bd"], ["d"], name="dw", pads=[1, 1, 1, 1],
                         group=8),
        helper.make_node("Clip", ["d", "zero", "six"], ["y"], name="relu6"),
    ]
    graph = helper.make_graph(nodes, "resblock", [x], [y], inits)
    return finish(graph)


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
    onnx.save(convbn(np.random.default_rng(7)), os.path.join(out, "convbn.onnx"))
    onnx.save(resblock(np.random.default_rng(11)), os.path.join(out, "resblock.onnx"))
    print("make_models.py: wrote mlp.onnx, mlp_external.onnx, convbn.onnx, resblock.onnx to",
          out)


if __name__ == "__main__":
    main()

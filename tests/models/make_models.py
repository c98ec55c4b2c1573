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
  resnet18.onnx      ResNet-18 (1x3x224x224), each Conv followed by a separate
                     BatchNormalization as an unoptimized export has them
  mobilenetv2.onnx   MobileNetV2 (1x3x224x224): depthwise convs, Clip as ReLU6,
                     inverted residuals
  bert_layer.onnx    one BERT-base encoder layer (seq 128, hidden 768, 12 heads):
                     attention with batched MatMuls and Softmax, Gelu written with
                     Erf, LayerNormalization
Weights are seeded random numbers scaled so activations stay near 1 (He
initialization, BatchNormalization statistics near identity).
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


def unsupported(rng):
    """The mlp with a RandomUniformLike at the end: an operator tuneforge does not run
    (random numbers have no place in a compiled inference), so `model inspect` and
    `tune --model` must refuse it before doing any work."""
    model = mlp(rng)
    graph = model.graph
    graph.node[-1].output[0] = "probs"
    graph.node.append(helper.make_node("RandomUniformLike", ["probs"], ["y"], name="noise"))
    onnx.checker.check_model(model)
    return model


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


class Builder:
    """Nodes and initializers of a graph under construction, with unique names."""

    def __init__(self, rng):
        self.rng = rng
        self.nodes = []
        self.inits = []
        self.count = 0

    def name(self, base):
        self.count += 1
        return f"{base}{self.count}"

    def const(self, base, array):
        n = self.name(base)
        self.inits.append(numpy_helper.from_array(array, n))
        return n

    def node(self, op, inputs, base=None, outputs=1, **attrs):
        names = [self.name(base or op.lower()) for _ in range(outputs)]
        self.nodes.append(helper.make_node(op, inputs, names, name=names[0] + "_node", **attrs))
        return names[0] if outputs == 1 else names

    def conv_bn(self, x, cin, cout, k, stride, group=1):
        """Conv (no bias) + a separate BatchNormalization, as PyTorch exports them."""
        fan_in = cin // group * k * k
        w = (self.rng.standard_normal((cout, cin // group, k, k)) * np.sqrt(2.0 / fan_in))
        c = self.node("Conv", [x, self.const("w", w.astype(np.float32))], "conv",
                      kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4, group=group)
        f = lambda lo, hi: self.rng.uniform(lo, hi, cout).astype(np.float32)
        return self.node("BatchNormalization",
                         [c, self.const("gamma", f(0.5, 1.0)), self.const("beta", f(-0.1, 0.1)),
                          self.const("mean", f(-0.1, 0.1)), self.const("var", f(0.8, 1.2))],
                         "bn", epsilon=1e-5)

    def relu6(self, x):
        return self.node("Clip", [x, self.const("zero", np.array(0.0, np.float32)),
                                  self.const("six", np.array(6.0, np.float32))], "relu6")

    def gemm(self, x, cin, cout):
        w = (self.rng.standard_normal((cout, cin)) * np.sqrt(1.0 / cin)).astype(np.float32)
        b = (0.1 * self.rng.standard_normal(cout)).astype(np.float32)
        return self.node("Gemm", [x, self.const("fc_w", w), self.const("fc_b", b)], "fc", transB=1)

    def model(self, name, x_shape, x, y, y_shape):
        graph = helper.make_graph(
            self.nodes, name, [helper.make_tensor_value_info(x, TensorProto.FLOAT, x_shape)],
            [helper.make_tensor_value_info(y, TensorProto.FLOAT, y_shape)], self.inits)
        return finish(graph)


def resnet18(rng):
    b = Builder(rng)
    h = b.node("Relu", [b.conv_bn("x", 3, 64, 7, 2)])
    h = b.node("MaxPool", [h], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for cout, stride in [(64, 1), (128, 2), (256, 2), (512, 2)]:
        for block in range(2):
            s = stride if block == 0 else 1
            main = b.node("Relu", [b.conv_bn(h, cin, cout, 3, s)])
            main = b.conv_bn(main, cout, cout, 3, 1)
            short = b.conv_bn(h, cin, cout, 1, s) if (s != 1 or cin != cout) else h
            h = b.node("Relu", [b.node("Add", [main, short])])
            cin = cout
    h = b.node("Flatten", [b.node("GlobalAveragePool", [h])])
    y = b.gemm(h, 512, 1000)
    b.nodes[-1].output[0] = "y"
    return b.model("resnet18", [1, 3, 224, 224], "x", "y", [1, 1000])


def mobilenetv2(rng):
    b = Builder(rng)
    h = b.relu6(b.conv_bn("x", 3, 32, 3, 2))
    cin = 32
    for t, c, n, s in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                       (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]:
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = cin * t
            x = h
            if t != 1:
                x = b.relu6(b.conv_bn(x, cin, hidden, 1, 1))
            x = b.relu6(b.conv_bn(x, hidden, hidden, 3, stride, group=hidden))
            x = b.conv_bn(x, hidden, c, 1, 1)
            h = b.node("Add", [h, x]) if stride == 1 and cin == c else x
            cin = c
    h = b.relu6(b.conv_bn(h, cin, 1280, 1, 1))
    h = b.node("Flatten", [b.node("GlobalAveragePool", [h])])
    b.gemm(h, 1280, 1000)
    b.nodes[-1].output[0] = "y"
    return b.model("mobilenetv2", [1, 3, 224, 224], "x", "y", [1, 1000])


def bert_layer(rng, seq=128, hidden=768, heads=12, ffn=3072):
    b = Builder(rng)
    d = hidden // heads
    i64 = lambda v: np.array(v, dtype=np.int64)

    def dense(x, cin, cout):
        w = (rng.standard_normal((cin, cout)) * np.sqrt(1.0 / cin)).astype(np.float32)
        bias = (0.1 * rng.standard_normal(cout)).astype(np.float32)
        return b.node("Add", [b.node("MatMul", [x, b.const("w", w)]), b.const("b", bias)])

    def layer_norm(x):
        g = rng.uniform(0.8, 1.2, hidden).astype(np.float32)
        beta = (0.1 * rng.standard_normal(hidden)).astype(np.float32)
        return b.node("LayerNormalization", [x, b.const("ln_g", g), b.const("ln_b", beta)],
                      "ln", axis=-1, epsilon=1e-12)

    def heads_of(x, perm):
        r = b.node("Reshape", [x, b.const("shape", i64([1, seq, heads, d]))])
        return b.node("Transpose", [r], perm=perm)

    q = heads_of(dense("x", hidden, hidden), [0, 2, 1, 3])
    k = heads_of(dense("x", hidden, hidden), [0, 2, 3, 1])
    v = heads_of(dense("x", hidden, hidden), [0, 2, 1, 3])
    scores = b.node("Div", [b.node("MatMul", [q, k]), b.const("scale", np.array(np.sqrt(d), np.float32))])
    probs = b.node("Softmax", [scores], axis=-1)
    ctx = b.node("Transpose", [b.node("MatMul", [probs, v])], perm=[0, 2, 1, 3])
    ctx = b.node("Reshape", [ctx, b.const("shape", i64([1, seq, hidden]))])
    h = layer_norm(b.node("Add", [dense(ctx, hidden, hidden), "x"]))
    f = dense(h, hidden, ffn)
    # Gelu as exported before opset 20: x * 0.5 * (1 + erf(x / sqrt(2)))
    erf = b.node("Erf", [b.node("Div", [f, b.const("sqrt2", np.array(np.sqrt(2.0), np.float32))])])
    gelu = b.node("Mul", [b.node("Mul", [f, b.node("Add", [erf, b.const("one", np.array(1.0, np.float32))])]),
                          b.const("half", np.array(0.5, np.float32))])
    y = layer_norm(b.node("Add", [dense(gelu, ffn, hidden), h]))
    b.nodes[-1].output[0] = "y"
    return b.model("bert_layer", [1, seq, hidden], "x", "y", [1, seq, hidden])


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
    onnx.save(unsupported(np.random.default_rng(3)), os.path.join(out, "unsupported.onnx"))
    onnx.save(convbn(np.random.default_rng(7)), os.path.join(out, "convbn.onnx"))
    onnx.save(resblock(np.random.default_rng(11)), os.path.join(out, "resblock.onnx"))
    onnx.save(resnet18(np.random.default_rng(18)), os.path.join(out, "resnet18.onnx"))
    onnx.save(mobilenetv2(np.random.default_rng(2)), os.path.join(out, "mobilenetv2.onnx"))
    onnx.save(bert_layer(np.random.default_rng(768)), os.path.join(out, "bert_layer.onnx"))
    print("make_models.py: wrote mlp.onnx, mlp_external.onnx, unsupported.onnx, convbn.onnx, resblock.onnx,",
          "resnet18.onnx, mobilenetv2.onnx, bert_layer.onnx to", out)


if __name__ == "__main__":
    main()

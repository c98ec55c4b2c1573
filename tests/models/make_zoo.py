#!/usr/bin/env python3
"""Writes real-architecture models into OUT_DIR, rebuilt with seeded weights (the
ONNX model zoo's files are hundreds of megabytes and not ours to commit): the
classic zoo CNNs with the operators their exporters wrote at opsets 8-9, and a
transformer decoder block as PyTorch exports it at opset 17 with dynamic axes.

  resnet50v1.onnx   ResNet-50 v1 (MXNet export): bottlenecks, residuals as Sum
  squeezenet.onnx   SqueezeNet 1.0: fire modules (Concat), Dropout, a conv classifier
  vgg16.onnx        VGG-16: 13 convs, Dropout between the dense layers
  alexnet.onnx      AlexNet (BVLC): LRN, grouped convolutions (group 2), Dropout
  zfnet.onnx        ZFNet-512: AlexNet's layout with a 7x7 stride-2 first conv
  googlenet.onnx    GoogLeNet / Inception v1 (BVLC): LRN, inception modules, 7x7
                    AveragePool, Dropout
  inception_v2.onnx BN-Inception (Caffe2 export, opset 8, IR 3): Conv-BN-Relu
                    everywhere, 5x5 as two 3x3, average-pool branches, stride-2
                    modules with a max-pool pass-through
  densenet121.onnx  DenseNet-121: dense blocks (Concat of every layer), BN-ReLU-Conv
                    order (BatchNormalization that follows no convolution)
  shufflenet.onnx   ShuffleNet v1 (g=3): grouped 1x1 convolutions, channel shuffle
                    (Reshape, Transpose, Reshape), stride-2 units joined by Concat
  gpt2_block.onnx   a GPT-2-style decoder block (hidden 768, 12 heads): symbolic
                    batch and sequence dims, shapes computed at run time (Shape,
                    Gather, Concat), a causal mask from Where over a constant bool
                    buffer, Gelu with tanh written out (Pow, Tanh)
  bert_encoder.onnx BERT-base's 12-layer encoder over the embeddings, dynamic axes,
                    Gelu with Erf (bert_encoder2.onnx: its first two layers)
  bert_tokens.onnx  BERT-base whole as Hugging Face exports it: int64 input_ids,
                    attention_mask and token_type_ids, the embedding lookups
                    (Gather), the mask as an additive bias (bert_tokens2.onnx: two
                    layers)

  make_zoo.py OUT_DIR [--size S] [--models a,b,...]

--size sets the CNNs' input height and width (default 224, the zoo's; the tests
use a smaller one so the dense layers that follow the convolutions stay small).
The CNNs take 1x3xSxS; gpt2_block and bert_encoder take embeddings [batch,
sequence, 768], bert_tokens int64 tokens [batch, sequence].
"""
import argparse
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_models import Builder  # noqa: E402


def finish(b, name, x_shape, y_shape, opset, ir_version):
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)]
    if ir_version < 4:  # IR 3 lists every weight as a graph input too, as the old exporters did
        inputs += [helper.make_tensor_value_info(t.name, t.data_type, t.dims) for t in b.inits]
    graph = helper.make_graph(
        b.nodes, name, inputs,
        [helper.make_tensor_value_info(b.nodes[-1].output[0], TensorProto.FLOAT, y_shape)], b.inits)
    model = helper.make_model(graph, producer_name="tuneforge-zoo",
                              opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = ir_version
    onnx.checker.check_model(model)
    return model


class Zoo(Builder):
    """Builder with the layers the zoo's CNNs use, weights scaled so activations stay
    near 1."""

    def conv(self, x, cin, cout, k, stride=1, pad=None, group=1, bias=True, relu=True):
        fan_in = cin // group * k * k
        w = (self.rng.standard_normal((cout, cin // group, k, k)) * np.sqrt(2.0 / fan_in)).astype(np.float32)
        inputs = [x, self.const("w", w)]
        if bias:
            inputs.append(self.const("b", (0.05 * self.rng.standard_normal(cout)).astype(np.float32)))
        pad = k // 2 if pad is None else pad
        y = self.node("Conv", inputs, "conv", kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4,
                      group=group)
        return self.node("Relu", [y]) if relu else y

    def bn(self, x, c, relu=False):
        f = lambda lo, hi: self.rng.uniform(lo, hi, c).astype(np.float32)
        y = self.node("BatchNormalization",
                      [x, self.const("gamma", f(0.5, 1.0)), self.const("beta", f(-0.1, 0.1)),
                       self.const("mean", f(-0.1, 0.1)), self.const("var", f(0.8, 1.2))], "bn", epsilon=1e-5)
        return self.node("Relu", [y]) if relu else y

    def conv_bn(self, x, cin, cout, k, stride=1, group=1, relu=True):
        return self.bn(self.conv(x, cin, cout, k, stride, group=group, bias=False, relu=False), cout, relu)

    def pool(self, op, x, k, stride, pad=0, **attrs):
        return self.node(op, [x], op.lower(), kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4,
                         **attrs)

    def pool_ceil(self, x, size, k, stride):
        """MaxPool with ceil_mode's output size as opset-9 exporters wrote it: the
        missing end padding made explicit. Returns (output, its size)."""
        out = -(-(size - k) // stride) + 1
        end = (out - 1) * stride + k - size
        y = self.node("MaxPool", [x], "maxpool", kernel_shape=[k, k], strides=[stride, stride],
                      pads=[0, 0, end, end])
        return y, out

    def lrn(self, x):
        return self.node("LRN", [x], "lrn", size=5, alpha=1e-4, beta=0.75, bias=1.0)

    def dense(self, x, cin, cout, relu=True, dropout=False):
        y = self.gemm(x, cin, cout)
        if relu:
            y = self.node("Relu", [y])
        if dropout:
            y = self.node("Dropout", [y], "dropout", ratio=0.5)
        return y

    def flatten(self, x):
        return self.node("Flatten", [x], "flatten", axis=1)


def out_size(size, k, stride, pad=0, ceil=False):
    span = size + 2 * pad - k
    return (-(-span // stride) if ceil else span // stride) + 1


def resnet50v1(rng, size):
    b = Zoo(rng)
    h = b.conv_bn("x", 3, 64, 7, 2)
    h = b.pool("MaxPool", h, 3, 2, 1)
    cin = 64
    for width, blocks, stride in [(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)]:
        for i in range(blocks):
            s = stride if i == 0 else 1
            main = b.conv_bn(h, cin, width, 1, s)  # v1: the stride on the first 1x1
            main = b.conv_bn(main, width, width, 3)
            main = b.conv_bn(main, width, 4 * width, 1, relu=False)
            short = b.conv_bn(h, cin, 4 * width, 1, s, relu=False) if i == 0 else h
            h = b.node("Relu", [b.node("Sum", [main, short], "sum")])
            cin = 4 * width
    h = b.flatten(b.node("GlobalAveragePool", [h]))
    b.dense(h, 2048, 1000, relu=False)
    return finish(b, "resnet50v1", [1, 3, size, size], [1, 1000], 8, 3)


def squeezenet(rng, size):
    b = Zoo(rng)
    h = b.pool("MaxPool", b.conv("x", 3, 96, 7, 2, pad=0), 3, 2)
    cin = 96

    def fire(h, cin, squeeze, expand):
        s = b.conv(h, cin, squeeze, 1)
        return b.node("Concat", [b.conv(s, squeeze, expand, 1), b.conv(s, squeeze, expand, 3)], "concat", axis=1)

    for i, (squeeze, expand) in enumerate([(16, 64), (16, 64), (32, 128), (32, 128), (48, 192), (48, 192),
                                           (64, 256), (64, 256)]):
        h = fire(h, cin, squeeze, expand)
        cin = 2 * expand
        if i in (2, 6):
            h = b.pool("MaxPool", h, 3, 2)
    h = b.node("Dropout", [h], "dropout", ratio=0.5)
    h = b.conv(h, cin, 1000, 1)
    h = b.flatten(b.node("GlobalAveragePool", [h]))
    b.node("Softmax", [h], "softmax", axis=1)
    return finish(b, "squeezenet", [1, 3, size, size], [1, 1000], 9, 4)


def vgg16(rng, size):
    b = Zoo(rng)
    h, cin, s = "x", 3, size
    for width, convs in [(64, 2), (128, 2), (256, 3), (512, 3), (512, 3)]:
        for _ in range(convs):
            h = b.conv(h, cin, width, 3)
            cin = width
        h = b.pool("MaxPool", h, 2, 2)
        s //= 2
    h = b.flatten(h)
    h = b.dense(h, 512 * s * s, 4096, dropout=True)
    h = b.dense(h, 4096, 4096, dropout=True)
    b.dense(h, 4096, 1000, relu=False)
    return finish(b, "vgg16", [1, 3, size, size], [1, 1000], 9, 4)


def alexnet(rng, size, zf=False):
    b = Zoo(rng)
    if zf:  # ZFNet-512: 7x7 stride 2, then the same stages
        h = b.conv("x", 3, 96, 7, 2, pad=1)
        s = out_size(size, 7, 2, 1)
    else:
        h = b.conv("x", 3, 96, 11, 4, pad=0)
        s = out_size(size, 11, 4)
    h = b.pool("MaxPool", b.lrn(h), 3, 2)
    s = out_size(s, 3, 2)
    h = b.conv(h, 96, 256, 5, 1 if not zf else 2, pad=2, group=1 if zf else 2)
    s = out_size(s, 5, 1 if not zf else 2, 2)
    h = b.pool("MaxPool", b.lrn(h), 3, 2)
    s = out_size(s, 3, 2)
    h = b.conv(h, 256, 384, 3)
    h = b.conv(h, 384, 384, 3, group=1 if zf else 2)
    h = b.conv(h, 384, 256, 3, group=1 if zf else 2)
    h = b.pool("MaxPool", h, 3, 2)
    s = out_size(s, 3, 2)
    h = b.flatten(h)
    h = b.dense(h, 256 * s * s, 4096, dropout=True)
    h = b.dense(h, 4096, 4096, dropout=True)
    h = b.dense(h, 4096, 1000, relu=False)
    b.node("Softmax", [h], "softmax", axis=1)
    return finish(b, "zfnet" if zf else "alexnet", [1, 3, size, size], [1, 1000], 9, 4)


def googlenet(rng, size):
    b = Zoo(rng)
    h, s = b.pool_ceil(b.conv("x", 3, 64, 7, 2, pad=3), out_size(size, 7, 2, 3), 3, 2)
    h = b.conv(b.conv(b.lrn(h), 64, 64, 1), 64, 192, 3)
    h, s = b.pool_ceil(b.lrn(h), s, 3, 2)
    cin = 192

    def inception(h, cin, c1, c3r, c3, c5r, c5, cp):
        a = b.conv(h, cin, c1, 1)
        m = b.conv(b.conv(h, cin, c3r, 1), c3r, c3, 3)
        f = b.conv(b.conv(h, cin, c5r, 1), c5r, c5, 5)
        p = b.conv(b.pool("MaxPool", h, 3, 1, 1), cin, cp, 1)
        return b.node("Concat", [a, m, f, p], "concat", axis=1), c1 + c3 + c5 + cp

    for i, cfg in enumerate([(64, 96, 128, 16, 32, 32), (128, 128, 192, 32, 96, 64), None,
                             (192, 96, 208, 16, 48, 64), (160, 112, 224, 24, 64, 64), (128, 128, 256, 24, 64, 64),
                             (112, 144, 288, 32, 64, 64), (256, 160, 320, 32, 128, 128), None,
                             (256, 160, 320, 32, 128, 128), (384, 192, 384, 48, 128, 128)]):
        if cfg is None:
            h, s = b.pool_ceil(h, s, 3, 2)
            continue
        h, cin = inception(h, cin, *cfg)
    h = b.node("AveragePool", [h], "avgpool", kernel_shape=[s, s], strides=[1, 1])
    h = b.node("Dropout", [h], "dropout", ratio=0.4)
    h = b.dense(b.flatten(h), cin, 1000, relu=False)
    b.node("Softmax", [h], "softmax", axis=1)
    return finish(b, "googlenet", [1, 3, size, size], [1, 1000], 9, 4)


def inception_v2(rng, size):
    """BN-Inception (Inception v2) as the zoo's Caffe2 export wrote it (opset 8, IR 3):
    every convolution followed by BatchNormalization and Relu, 5x5 branches as two
    3x3, average-pool branches, stride-2 modules with a max-pool pass-through, ceil
    mode pools as explicit end padding."""
    b = Zoo(rng)
    h = b.conv_bn("x", 3, 64, 7, 2)
    h, s = b.pool_ceil(h, out_size(size, 7, 2, 3), 3, 2)
    h = b.conv_bn(b.conv_bn(h, 64, 64, 1), 64, 192, 3)
    h, s = b.pool_ceil(h, s, 3, 2)
    cin = 192

    def module(h, cin, s, c1, c3r, c3, d3r, d3, pool, cp):
        """pool: 'avg' or 'max' with a 1x1 projection of cp channels, or 'pass' (a
        stride-2 module: no 1x1 branch, the 3x3s and the max pool at stride 2)."""
        stride = 2 if pool == "pass" else 1
        parts = [b.conv_bn(h, cin, c1, 1)] if c1 else []
        parts.append(b.conv_bn(b.conv_bn(h, cin, c3r, 1), c3r, c3, 3, stride))
        parts.append(b.conv_bn(b.conv_bn(b.conv_bn(h, cin, d3r, 1), d3r, d3, 3), d3, d3, 3, stride))
        if pool == "pass":
            p, s = b.pool_ceil(h, s, 3, 2)
            parts.append(p)
            width = c3 + d3 + cin
        else:
            op = "AveragePool" if pool == "avg" else "MaxPool"
            p = b.pool(op, h, 3, 1, 1, **({"count_include_pad": 1} if pool == "avg" else {}))
            parts.append(b.conv_bn(p, cin, cp, 1))
            width = c1 + c3 + d3 + cp
        return b.node("Concat", parts, "concat", axis=1), width, s

    for cfg in [(64, 64, 64, 64, 96, "avg", 32), (64, 64, 96, 64, 96, "avg", 64), (0, 128, 160, 64, 96, "pass", 0),
                (224, 64, 96, 96, 128, "avg", 128), (192, 96, 128, 96, 128, "avg", 128),
                (160, 128, 160, 128, 160, "avg", 128), (96, 128, 192, 160, 192, "avg", 128),
                (0, 128, 192, 192, 256, "pass", 0), (352, 192, 320, 160, 224, "avg", 128),
                (352, 192, 320, 192, 224, "max", 128)]:
        h, cin, s = module(h, cin, s, *cfg)
    h = b.node("AveragePool", [h], "avgpool", kernel_shape=[s, s], strides=[1, 1])
    h = b.dense(b.flatten(h), cin, 1000, relu=False)
    b.node("Softmax", [h], "softmax", axis=1)
    return finish(b, "inception_v2", [1, 3, size, size], [1, 1000], 8, 3)


def densenet121(rng, size):
    b = Zoo(rng)
    h = b.pool("MaxPool", b.conv_bn("x", 3, 64, 7, 2), 3, 2, 1)
    c = 64
    growth = 32
    for i, layers in enumerate([6, 12, 24, 16]):
        for _ in range(layers):
            y = b.conv(b.bn(h, c, relu=True), c, 4 * growth, 1, bias=False, relu=False)
            y = b.conv(b.bn(y, 4 * growth, relu=True), 4 * growth, growth, 3, bias=False, relu=False)
            h = b.node("Concat", [h, y], "concat", axis=1)
            c += growth
        if i < 3:  # transition: BN-ReLU-Conv 1x1 halving the channels, 2x2 average pool
            h = b.conv(b.bn(h, c, relu=True), c, c // 2, 1, bias=False, relu=False)
            c //= 2
            h = b.pool("AveragePool", h, 2, 2)
    h = b.flatten(b.node("GlobalAveragePool", [b.bn(h, c, relu=True)]))
    b.dense(h, c, 1000, relu=False)
    return finish(b, "densenet121", [1, 3, size, size], [1, 1000], 9, 4)


def shufflenet(rng, size, groups=3):
    b = Zoo(rng)
    h = b.pool("MaxPool", b.conv("x", 3, 24, 3, 2), 3, 2, 1)
    s = out_size(out_size(size, 3, 2, 1), 3, 2, 1)
    cin = 24

    def shuffle(x, c, s):
        shape = lambda *d: b.const("shape", np.array(d, dtype=np.int64))
        y = b.node("Reshape", [x, shape(1, groups, c // groups, s, s)], "reshape")
        y = b.node("Transpose", [y], "transpose", perm=[0, 2, 1, 3, 4])
        return b.node("Reshape", [y, shape(1, c, s, s)], "reshape")

    for stage, (cout, units) in enumerate([(240, 4), (480, 8), (960, 4)]):
        for u in range(units):
            stride = 2 if u == 0 else 1
            out = cout - cin if stride == 2 else cout
            mid = cout // 4
            g1 = 1 if stage == 0 and u == 0 else groups  # the first 1x1 of the network is not grouped
            y = b.conv_bn(h, cin, mid, 1, group=g1)
            y = shuffle(y, mid, s)
            y = b.conv_bn(y, mid, mid, 3, stride, group=mid, relu=False)
            s2 = out_size(s, 3, stride, 1)
            y = b.conv_bn(y, mid, out, 1, group=groups, relu=False)
            if stride == 2:
                short = b.pool("AveragePool", h, 3, 2, 1)
                h = b.node("Relu", [b.node("Concat", [short, y], "concat", axis=1)])
            else:
                h = b.node("Relu", [b.node("Add", [h, y], "add")])
            cin, s = cout, s2
    h = b.flatten(b.node("GlobalAveragePool", [h]))
    b.dense(h, cin, 1000, relu=False)
    return finish(b, "shufflenet", [1, 3, size, size], [1, 1000], 9, 4)


class Transformer(Builder):
    """The pieces of a transformer layer as torch.onnx.export writes them at opset 17
    with dynamic batch and sequence axes: the head split's shapes come from Shape/
    Gather/Concat of the layer's input at run time (folded once the axes are bound)."""

    def __init__(self, rng, hidden, heads):
        super().__init__(rng)
        self.hidden, self.heads, self.d = hidden, heads, hidden // heads

    def i64(self, *v):
        return self.const("c", np.array(v, dtype=np.int64))

    def f32(self, v):
        return self.const("f", np.array(v, dtype=np.float32))

    def weight(self, *shape):
        return (0.02 * self.rng.standard_normal(shape)).astype(np.float32)

    def layer_norm(self, x):
        g = (1 + 0.1 * self.rng.standard_normal(self.hidden)).astype(np.float32)
        b = (0.1 * self.rng.standard_normal(self.hidden)).astype(np.float32)
        return self.node("LayerNormalization", [x, self.const("ln_g", g), self.const("ln_b", b)], "ln", axis=-1,
                         epsilon=1e-5)

    def linear(self, x, cin, cout):  # x @ W + b
        return self.node("Add", [self.node("MatMul", [x, self.const("w", self.weight(cin, cout))]),
                                 self.const("b", self.weight(cout))])

    def shapes(self, x):
        """([batch, seq, heads, d], [batch, seq, hidden], seq as a 1-element tensor) of x."""
        shape = self.node("Shape", [x])
        scalar = lambda v: self.const("c", np.array(v, dtype=np.int64))
        batch = self.node("Gather", [shape, scalar(0)], "gather", axis=0)  # 0-d: a scalar dimension
        seq = self.node("Gather", [shape, scalar(1)], "gather", axis=0)
        unsq = lambda t: self.node("Unsqueeze", [t, self.i64(0)], "unsqueeze")
        heads_shape = self.node("Concat", [unsq(batch), unsq(seq), self.i64(self.heads), self.i64(self.d)], "concat",
                                axis=0)
        merged_shape = self.node("Concat", [unsq(batch), unsq(seq), self.i64(self.hidden)], "concat", axis=0)
        return heads_shape, merged_shape, unsq(seq)

    def attention(self, h, x_for_shapes, causal_ctx=0, additive_mask=None):
        """Multi-head self-attention of h; with causal_ctx, GPT-2's mask: a slice of a
        constant lower-triangular [ctx, ctx] bool buffer selecting the scores or the
        dtype's minimum through Where."""
        heads_shape, merged_shape, seq1 = self.shapes(x_for_shapes)
        hidden = self.hidden
        qkv = self.linear(h, hidden, 3 * hidden)
        q, k, v = self.node("Split", [qkv, self.i64(hidden, hidden, hidden)], "split", outputs=3, axis=2)
        split = lambda t, perm: self.node("Transpose", [self.node("Reshape", [t, heads_shape])], "transpose",
                                          perm=perm)
        q, k, v = split(q, [0, 2, 1, 3]), split(k, [0, 2, 3, 1]), split(v, [0, 2, 1, 3])
        scores = self.node("Div", [self.node("MatMul", [q, k]), self.f32(np.sqrt(self.d))])
        if causal_ctx:
            tril = np.tril(np.ones((causal_ctx, causal_ctx), dtype=bool)).reshape(1, 1, causal_ctx, causal_ctx)
            zero = self.i64(0)
            mask = self.node("Slice", [self.const("bias", tril), self.node("Concat", [zero, zero], "concat", axis=0),
                                       self.node("Concat", [seq1, seq1], "concat", axis=0), self.i64(2, 3)], "slice")
            scores = self.node("Where", [mask, scores, self.f32(np.finfo(np.float32).min)], "where")
        if additive_mask:
            scores = self.node("Add", [scores, additive_mask])
        probs = self.node("Softmax", [scores], "softmax", axis=-1)
        merged = self.node("Reshape", [self.node("Transpose", [self.node("MatMul", [probs, v])], "transpose",
                                                 perm=[0, 2, 1, 3]), merged_shape])
        return self.linear(merged, hidden, hidden)

    def model(self, name, y):
        graph = helper.make_graph(
            self.nodes, name,
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "sequence", self.hidden])],
            [helper.make_tensor_value_info(y, TensorProto.FLOAT, ["batch", "sequence", self.hidden])], self.inits)
        model = helper.make_model(graph, producer_name="tuneforge-zoo", opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        onnx.checker.check_model(model)
        return model


def gpt2_block(rng, hidden=768, heads=12, ctx=1024):
    """One GPT-2 decoder block (pre-LayerNorm, causal attention, the tanh Gelu
    written out: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))))."""
    b = Transformer(rng, hidden, heads)
    h = b.node("Add", ["x", b.attention(b.layer_norm("x"), "x", causal_ctx=ctx)])
    m = b.linear(b.layer_norm(h), hidden, 4 * hidden)
    cube = b.node("Pow", [m, b.f32(3.0)])
    inner = b.node("Mul", [b.node("Add", [m, b.node("Mul", [cube, b.f32(0.044715)])]), b.f32(np.sqrt(2 / np.pi))])
    gelu = b.node("Mul", [b.node("Mul", [m, b.f32(0.5)]), b.node("Add", [b.node("Tanh", [inner]), b.f32(1.0)])])
    y = b.node("Add", [h, b.linear(gelu, 4 * hidden, hidden)], "y")
    return b.model("gpt2_block", y)


def bert_encoder(rng, layers=12, hidden=768, heads=12, ffn=3072):
    """BERT-base's encoder (12 post-LayerNorm layers, Gelu with Erf written out as
    torch exports nn.GELU at opset 17) over the embeddings [batch, sequence, 768]:
    the part of a Hugging Face BERT export that follows the int64 token lookup."""
    b = Transformer(rng, hidden, heads)
    h = "x"
    for _ in range(layers):
        h = b.layer_norm(b.node("Add", [h, b.attention(h, "x")]))
        m = b.linear(h, hidden, ffn)
        erf = b.node("Erf", [b.node("Div", [m, b.f32(np.sqrt(2.0))])])
        gelu = b.node("Mul", [b.node("Mul", [m, b.node("Add", [erf, b.f32(1.0)])]), b.f32(0.5)])
        h = b.layer_norm(b.node("Add", [h, b.linear(gelu, ffn, hidden)]))
    return b.model("bert_encoder" if layers == 12 else f"bert_encoder{layers}", h)


def bert_tokens(rng, layers=12, hidden=768, heads=12, ffn=3072, vocab=30522, positions=512):
    """BERT-base whole, as a Hugging Face export at opset 17 has it: int64
    input_ids, attention_mask and token_type_ids [batch, sequence]; word, position
    (a slice of a constant position_ids buffer) and token-type embeddings looked up
    by Gather, summed and normalized; the mask turned into an additive bias, (1 -
    mask) * float32 min, on every layer's scores."""
    b = Transformer(rng, hidden, heads)
    word = b.node("Gather", [b.const("word_emb", b.weight(vocab, hidden)), "input_ids"], "gather")
    seq = b.node("Unsqueeze", [b.node("Gather", [b.node("Shape", ["input_ids"]), b.const("c", np.array(1, np.int64))],
                                      "gather", axis=0), b.i64(0)], "unsqueeze")
    position_ids = b.node("Slice", [b.const("position_ids", np.arange(positions, dtype=np.int64).reshape(1, -1)),
                                    b.i64(0), seq, b.i64(1)], "slice")
    pos = b.node("Gather", [b.const("pos_emb", b.weight(positions, hidden)), position_ids], "gather")
    typ = b.node("Gather", [b.const("type_emb", b.weight(2, hidden)), "token_type_ids"], "gather")
    h = b.layer_norm(b.node("Add", [b.node("Add", [word, pos]), typ]))
    mask = b.node("Cast", [b.node("Unsqueeze", ["attention_mask", b.i64(1, 2)], "unsqueeze")], "cast",
                  to=TensorProto.FLOAT)
    bias = b.node("Mul", [b.node("Sub", [b.f32(1.0), mask]), b.f32(np.finfo(np.float32).min)])
    for _ in range(layers):
        h = b.layer_norm(b.node("Add", [h, b.attention(h, h, additive_mask=bias)]))
        m = b.linear(h, hidden, ffn)
        erf = b.node("Erf", [b.node("Div", [m, b.f32(np.sqrt(2.0))])])
        gelu = b.node("Mul", [b.node("Mul", [m, b.node("Add", [erf, b.f32(1.0)])]), b.f32(0.5)])
        h = b.layer_norm(b.node("Add", [h, b.linear(gelu, ffn, hidden)]))
    h = b.node("Identity", [h], "last_hidden_state")
    tokens = lambda name: helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "sequence"])
    graph = helper.make_graph(
        b.nodes, "bert_tokens", [tokens("input_ids"), tokens("attention_mask"), tokens("token_type_ids")],
        [helper.make_tensor_value_info(h, TensorProto.FLOAT, ["batch", "sequence", hidden])], b.inits)
    model = helper.make_model(graph, producer_name="tuneforge-zoo", opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


MODELS = {
    "resnet50v1": resnet50v1, "squeezenet": squeezenet, "vgg16": vgg16, "alexnet": alexnet,
    "zfnet": lambda rng, size: alexnet(rng, size, zf=True), "googlenet": googlenet, "densenet121": densenet121,
    "shufflenet": shufflenet, "gpt2_block": lambda rng, size: gpt2_block(rng),
    "bert_encoder": lambda rng, size: bert_encoder(rng),
    "bert_encoder2": lambda rng, size: bert_encoder(rng, layers=2),  # the tests' two-layer cut
    "bert_tokens": lambda rng, size: bert_tokens(rng),
    "bert_tokens2": lambda rng, size: bert_tokens(rng, layers=2),
    "inception_v2": inception_v2,
}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--models", default=",".join(MODELS))
    a = p.parse_args()
    names = a.models.split(",")
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        p.error(f"unknown models {unknown}; known: {', '.join(MODELS)}")
    os.makedirs(a.out, exist_ok=True)
    for i, name in enumerate(names):
        model = MODELS[name](np.random.default_rng(100 + i), a.size)
        path = os.path.join(a.out, name + ".onnx")
        onnx.save(model, path)
        print(f"make_zoo.py: {path} ({os.path.getsize(path) / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

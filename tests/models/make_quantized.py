#!/usr/bin/env python3
"""Writes the quantized test models into OUT_DIR, made by onnxruntime's own
quantization tool from the float models of make_models.py and make_zoo.py (the
int8 work, docs/int8.md), and checks each against its float model in onnxruntime:

  resnet18.qdq.onnx     ResNet-18, static QDQ: QuantizeLinear/DequantizeLinear around
                        float operators, uint8 activations, int8 weights per channel
  mobilenetv2.qdq.onnx  MobileNetV2, static QDQ, the same settings
  resnet50.qdq.onnx     ResNet-50 v1 (make_zoo.py at --size), static QDQ
  resnet18.qop.onnx     ResNet-18, static QOperator form (QLinearConv, QLinearAdd,
                        QLinearGlobalAveragePool, QGemm, MaxPool on uint8)
  mobilenetv2.qop.onnx  MobileNetV2, static QOperator form (depthwise QLinearConv too)
  bert_layer.dyn.onnx   one BERT-base encoder layer, dynamic: DynamicQuantizeLinear and
                        MatMulInteger for the dense layers, int8 weights
  resblock.dyn.onnx     the residual block of make_models.py, dynamic: ConvInteger
                        (padded, and a depthwise one), uint8 weights (onnxruntime's
                        ConvInteger takes no int8 ones)

Each float model first goes through onnxruntime's quant_pre_process (shape inference
and graph optimization: BatchNormalization folded into the Conv before it), as
onnxruntime's guide has it. Static models are calibrated (MinMax) on seeded random
inputs, so the files are the same on every machine with the same pinned onnxruntime. The float models must be in
OUT_DIR already (make_models.py OUT_DIR) except ResNet-50, which is made here.

  make_quantized.py OUT_DIR [--size 224] [--models resnet18,...]
"""
import argparse
import os
import sys
import tempfile

import numpy as np
import onnx
import onnx.version_converter
import onnxruntime as ort
from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType, quantize_dynamic,
                                      quantize_static)
from onnxruntime.quantization.shape_inference import quant_pre_process

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_zoo  # noqa: E402


class RandomInputs(CalibrationDataReader):
    """`count` seeded inputs for the model's one input, standard normal (the test
    models' activations stay near 1)."""

    def __init__(self, model_path, count, seed):
        model = onnx.load(model_path, load_external_data=False)
        value = model.graph.input[0]
        shape = [d.dim_value for d in value.type.tensor_type.shape.dim]
        rng = np.random.default_rng(seed)
        self.name = value.name
        self.samples = [rng.standard_normal(shape).astype(np.float32) for _ in range(count)]

    def get_next(self):
        return {self.name: self.samples.pop()} if self.samples else None


def quantize(source, target, form, calibration):
    # onnxruntime's guide first runs its pre-processing (shape inference, and its graph
    # optimizations, which fold each BatchNormalization into the Conv before it).
    prepared = os.path.abspath("prepared.onnx")
    quant_pre_process(source, prepared, skip_symbolic_shape=not form.startswith("dynamic"))
    if form.startswith("dynamic"):
        # onnxruntime runs ConvInteger with uint8 weights only ("dynamic-u8").
        quantize_dynamic(prepared, target, weight_type=QuantType.QUInt8 if form == "dynamic-u8" else QuantType.QInt8)
        return
    quantize_static(prepared, target, RandomInputs(prepared, calibration, seed=7),
                    quant_format=QuantFormat.QDQ if form == "qdq" else QuantFormat.QOperator,
                    per_channel=True, activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)


def check(float_path, quantized_path, expect_ops):
    """The quantized model has the operators of its form and stays near the float one."""
    ops = {n.op_type for n in onnx.load(quantized_path, load_external_data=False).graph.node}
    missing = sorted(set(expect_ops) - ops)
    if missing:
        sys.exit(f"make_quantized.py: {quantized_path} lacks {missing} (has {sorted(ops)})")
    x = RandomInputs(float_path, 1, seed=11).get_next()
    run = lambda p: ort.InferenceSession(p, providers=["CPUExecutionProvider"]).run(None, x)[0]
    want, got = run(float_path), run(quantized_path)
    error = float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-12))
    if not np.isfinite(error) or error > 0.5:
        sys.exit(f"make_quantized.py: {quantized_path} is far from its float model (relative error {error:.3f})")
    return error


MODELS = {
    # name: (float model file, form, operators the quantized file must have)
    "resnet18.qdq": ("resnet18.onnx", "qdq", ["QuantizeLinear", "DequantizeLinear", "Conv"]),
    "mobilenetv2.qdq": ("mobilenetv2.onnx", "qdq", ["QuantizeLinear", "DequantizeLinear", "Conv"]),
    "resnet50.qdq": ("resnet50v1.onnx", "qdq", ["QuantizeLinear", "DequantizeLinear", "Conv"]),
    "resnet18.qop": ("resnet18.onnx", "qop", ["QLinearConv", "QLinearAdd", "QuantizeLinear"]),
    "mobilenetv2.qop": ("mobilenetv2.onnx", "qop", ["QLinearConv", "QLinearAdd", "QuantizeLinear"]),
    "bert_layer.dyn": ("bert_layer.onnx", "dynamic", ["DynamicQuantizeLinear", "MatMulInteger"]),
    "resblock.dyn": ("resblock.onnx", "dynamic-u8", ["DynamicQuantizeLinear", "ConvInteger"]),
}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    p.add_argument("--size", type=int, default=224, help="ResNet-50's input size")
    p.add_argument("--models", default=",".join(MODELS))
    a = p.parse_args()
    names = a.models.split(",")
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        p.error(f"unknown models {unknown}; known: {', '.join(MODELS)}")
    for name in names:
        source_name, form, ops = MODELS[name]
        source = os.path.abspath(os.path.join(a.out, source_name))
        if source_name == "resnet50v1.onnx" and not os.path.exists(source):
            # The zoo's export is opset 8; per-channel DequantizeLinear needs 13.
            model = make_zoo.MODELS["resnet50v1"](np.random.default_rng(50), a.size)
            onnx.save(onnx.version_converter.convert_version(model, 13), source)
        if not os.path.exists(source):
            sys.exit(f"make_quantized.py: {source} is missing (run make_models.py {a.out} first)")
        target = os.path.abspath(os.path.join(a.out, name + ".onnx"))
        with tempfile.TemporaryDirectory() as scratch:  # the tool's calibration files
            cwd = os.getcwd()
            os.chdir(scratch)
            try:
                quantize(source, target, form, calibration=4)
            finally:
                os.chdir(cwd)
        error = check(source, target, ops)
        print(f"make_quantized.py: {target} ({os.path.getsize(target) / 1e6:.1f} MB, "
              f"relative error against the float model {error:.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

// Quantized ONNX models in the QDQ form (QuantizeLinear/DequantizeLinear around float
// operators, what onnxruntime's quantize_static writes by default; docs/int8.md),
// rewritten at read time into float operators the importer already runs:
//
//   DequantizeLinear(constant q, constant scale[, constant zero][, axis])
//       -> a float32 initializer (q - zero) * scale, per tensor or per `axis` channel
//          (the weights and the int32 biases);
//   QuantizeLinear(x, s, z) whose outputs all feed DequantizeLinear(., s, z)
//       -> (clamp(round(x / s) + z, lo, hi) - z) * s as Div, Round, Add, Clip, Sub, Mul
//          (the activations: the same rounding half to even and saturation to the zero
//          point's type, uint8 0..255 or int8 -128..127, in float32).
//
//   DynamicQuantizeLinear(x) -> the reductions and rounding its definition computes
//       (scale = (max(0, max x) - min(0, min x)) / 255, or 1 when that is 0; zero point
//       and values rounded half to even, saturated to uint8), the integers in float32;
//   MatMulInteger(A, constant B, a_zero, constant b_zero)
//       -> MatMul(A - a_zero, float(B - b_zero)) (the dynamic form onnxruntime's
//          quantize_dynamic writes; exact while the sums stay below 2^24).
//
// So a QDQ model means in float32 what it means quantized. The rewrite records what it
// took out (OnnxModel::quantized_tensors and quantized_constants), so that task
// extraction can run the quantized convolutions on the int8 kernels (graph/tasks.h,
// TaskUse::quantized; docs/int8.md).
//
// Refused with the node named: a QuantizeLinear feeding anything but matching
// DequantizeLinears (or a graph output), per-axis activation scales, a
// DequantizeLinear of a run-time value that no QuantizeLinear made, scales or zero
// points that are not initializers, zero points of types other than uint8 and int8
// (int32 for biases), the float8/int4 forms (saturate, block_size, output_dtype).
// MatMulInteger with weights computed at run time is refused.
//
// The QOperator form (QLinearConv, QLinearMatMul, com.microsoft's QLinearAdd,
// QLinearGlobalAveragePool and QGemm; MaxPool, Flatten, Reshape, Transpose, Squeeze,
// Unsqueeze and Identity on their integer tensors) is first expanded into the QDQ
// form: DequantizeLinear of each integer input, the float operator, QuantizeLinear of
// the output (docs/int8.md). Another operator reading an integer tensor is refused,
// named. ConvInteger(x, constant w, x_zero, constant w_zero) -> Conv(x - x_zero,
// float(w - w_zero)), as MatMulInteger.
#pragma once

#include "absl/status/status.h"
#include "compiler/frontend/onnx_reader.h"

namespace tuneforge::frontend {

// Rewrites `model`'s QDQ pairs and constant dequantizations in place (see above); a
// model without QuantizeLinear and DequantizeLinear is left unchanged. Errors name the
// file and the node.
absl::Status RewriteQdq(OnnxModel* model);

}  // namespace tuneforge::frontend

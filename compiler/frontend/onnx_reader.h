// Reading ONNX models (issue 17, first part): the file, its external-data weights and
// the checks that make every unsupported input a clear error instead of a silent
// fallback. The graph IR built from a model comes after this.
//
// Supported: IR versions kMinIrVersion..kMaxIrVersion, the default operator set
// ("" or "ai.onnx") versions kMinOpset..kMaxOpset (up to ONNX 1.23, the vendored
// onnx/onnx.proto), float32 tensors, static shapes, and the operators of
// SupportedOnnxOperators(). IR 11+'s multi-device annotations (device
// configurations, sharding specs) are ignored: they say how to split the work
// across devices, not what it computes, and tuneforge runs a model on one CPU.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "onnx/onnx.pb.h"

namespace tuneforge::frontend {

inline constexpr int64_t kMinIrVersion = 3;   // ONNX 1.0 with opset imports
inline constexpr int64_t kMaxIrVersion = 14;  // ONNX 1.23
inline constexpr int64_t kMinOpset = 7;
inline constexpr int64_t kMaxOpset = 28;      // ONNX 1.23

// What the QDQ rewrite (qdq.h) took out of a quantized model, by tensor name, for
// running its layers on int8 kernels: the quantization of each round trip's output
// (its values are exactly scale x (q - zero) for an integer q in low..high), and the
// per-channel scales of each dequantized constant along `axis` (its int8 values are
// round(value / scale), exactly).
struct QuantizedTensor {
  double scale = 0, zero = 0, low = 0, high = 0;
};
struct QuantizedConstant {
  std::vector<double> scales;  // one (per tensor) or one per index of `axis`
  int64_t axis = 0;
};
// A MatMulInteger of the dynamic form whose A is a DynamicQuantizeLinear's output (its
// a_zero_point that node's zero point) and whose B is an int8 constant of zero point
// 0, by the name of the rewrite's MatMul output: the float32 tensor the
// DynamicQuantizeLinear quantized and the name of that node's scale output, so that
// the layer can run on an int8 kernel that quantizes its input itself.
struct DynamicMatmul {
  std::string source, scale;
};

struct OnnxModel {
  std::string path;
  onnx::ModelProto proto;  // external data already loaded into raw_data
  int64_t opset = 0;       // version of the default operator set
  bool had_external_data = false;  // some weights were in other files (now in `proto`)
  std::map<std::string, QuantizedTensor> quantized_tensors;
  std::map<std::string, QuantizedConstant> quantized_constants;
  std::map<std::string, DynamicMatmul> dynamic_matmuls;
};

// Reads `path`. Errors (each naming the file, and the node, operator or tensor where
// there is one): a file that cannot be read; one that is not an ONNX model (not a
// protobuf, truncated, or a protobuf without a graph); an IR version or operator set
// out of range, or an operator set of another domain; external data that is missing,
// out of the file's range, or outside the model's directory.
absl::StatusOr<OnnxModel> ReadOnnxModel(const std::string& path);
// The same from the file's bytes (`path` names it in errors and locates external data).
absl::StatusOr<OnnxModel> ParseOnnxModel(const std::string& bytes, const std::string& path);

// Values for a model's symbolic input dimensions: by name (`--dim batch_size=1`, for
// every input dimension named so) or whole input shapes (`--shape x=1,3,224,224`).
struct DimBindings {
  std::map<std::string, int64_t> dims;
  std::map<std::string, std::vector<int64_t>> shapes;
  bool empty() const { return dims.empty() && shapes.empty(); }
  // "batch_size=1 x=1,3,224,224": for provenance and messages.
  std::string ToString() const;
};
// Parses one `--dim` value (NAME=N, or several comma-separated) or `--shape` value
// (INPUT=D0,D1,...) into `b`. Sizes are 1..2^31-1; a name given twice is an error.
absl::Status ParseDimBinding(const std::string& text, DimBindings* b);
absl::Status ParseShapeBinding(const std::string& text, DimBindings* b);
// Gives the model's graph inputs the bound sizes. A --shape must match the input's
// rank and its fixed sizes; a binding that names no input dimension is an error (a
// typo must not pass silently); dimensions left symbolic are reported by
// CheckSupported.
absl::Status BindDimensions(OnnxModel* model, const DimBindings& b);

// The operators tuneforge imports (the `Constant`-folded ones included), sorted.
const std::vector<std::string>& SupportedOnnxOperators();

// Every node's operator is supported, and every initializer and graph input is a
// float32 (or, for shapes and indices, int64) tensor with a static shape. The error
// names the node (by name and index) and the operator, or the tensor.
absl::Status CheckSupported(const OnnxModel& model);

}  // namespace tuneforge::frontend

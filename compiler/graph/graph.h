// The graph IR of a whole model (issue 17): typed tensors with static shapes and the
// operator nodes between them, imported from ONNX with every output's shape inferred
// and checked, shape computations folded into constants, BatchNormalization folded
// into the convolution before it, and nodes that feed no output removed. Printable
// (`tuneforge model inspect --print-graph`), like the loop IR.
//
// Fusion into tuning tasks and the executor build on this; docs/models.md says what
// exists.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/frontend/onnx_reader.h"

namespace tuneforge::graph {

// kBool: the result of a comparison or logic operator, a mask. Its elements are
// stored as float32 0 and 1 (in Tensor::f32 when constant, in a float32 buffer at run
// time), so the elementwise kernels read and write them like any float tensor; the
// dtype keeps the graph's types honest (a bool is not fed where a float is expected).
enum class DType { kFloat32, kInt64, kBool };
const char* DTypeName(DType t);

// The product of v[from, to): an element count of a shape or of some of its axes.
inline int64_t Product(const std::vector<int64_t>& v, size_t from = 0, size_t to = SIZE_MAX) {
  int64_t p = 1;
  for (size_t i = from; i < v.size() && i < to; ++i) p *= v[i];
  return p;
}

struct Tensor {
  std::string name;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  // A constant (a weight, or a value folded at import): its data, in row-major order,
  // in i64 for int64, in f32 for float32 and bool (0 and 1). Tensors computed when the
  // model runs have neither.
  bool constant = false;
  std::vector<float> f32;
  std::vector<int64_t> i64;
  int64_t NumElements() const;  // saturates at INT64_MAX; -1 for a negative dimension
};

// One attribute of a node, as ONNX gives it (ints and floats, one or a list, or text).
struct Attribute {
  std::vector<int64_t> ints;
  std::vector<float> floats;
  std::string text;
};

struct Node {
  std::string name;
  std::string op;              // the ONNX operator, e.g. "Conv"
  std::vector<int> inputs;     // tensor ids; -1 for an omitted optional input
  std::vector<int> outputs;    // tensor ids
  std::map<std::string, Attribute> attrs;
  // Integer attribute `key`, or `fallback` when absent.
  int64_t Int(const std::string& key, int64_t fallback) const;
  float Float(const std::string& key, float fallback) const;
  // Text attribute `key` (auto_pad, mode, ...), or `fallback` when absent.
  std::string Text(const std::string& key, const std::string& fallback) const;
  std::vector<int64_t> Ints(const std::string& key, std::vector<int64_t> fallback = {}) const;
};

struct Graph {
  std::vector<Tensor> tensors;
  std::vector<Node> nodes;     // in execution order
  std::vector<int> inputs;     // the model's run-time inputs
  std::vector<int> outputs;
  int64_t opset = 0;           // the model's default operator set
  // A quantized (QDQ) model's quantization, by tensor name (frontend::OnnxModel).
  std::map<std::string, frontend::QuantizedTensor> quantized_tensors;
  std::map<std::string, frontend::QuantizedConstant> quantized_constants;
  std::map<std::string, frontend::DynamicMatmul> dynamic_matmuls;
  int Find(const std::string& name) const;  // -1 when absent
};

// Operators of one float input whose output has its shape, computed element by
// element (Relu, Exp, Sin, LeakyRelu, Gelu, ...): the importer infers their shape,
// the executor's kernels (kernels.h) compute them, alone or fused into chains.
bool IsUnaryElementwiseOp(const std::string& op);
// ReduceSum, ReduceMean, ReduceMax, ... (one float input, axes as an attribute or a
// constant second input, keepdims).
bool IsReduceOp(const std::string& op);

// The largest matrix Det takes: the kernel eliminates in a local copy of M * M floats.
constexpr int64_t kMaxDetSize = 64;
// Less, Greater, LessOrEqual, GreaterOrEqual, Equal (two inputs of one type, a bool
// result) and Not, And, Or, Xor (bool inputs): elementwise with broadcasting.
bool IsComparisonOrLogicOp(const std::string& op);

// The input index that output index `o` of an axis padded by `begin` and `end` around
// its `n` input elements reads, for Pad's modes: constant (-1 where the pad value
// goes), reflect (mirrored about the first and last element, as numpy.pad), edge (the
// nearest element) and wrap (periodic). Negative pads crop first, and the other
// modes extend what is kept (as onnxruntime does).
int64_t PadSource(int64_t o, int64_t begin, int64_t end, int64_t n, const std::string& mode);

// Imports a model that passed frontend::CheckSupported. Errors name the node, its
// operator and the attribute or input at fault (an attribute value out of range,
// shapes that do not broadcast, a Reshape to a shape of another size, ...).
absl::StatusOr<Graph> ImportOnnx(const frontend::OnnxModel& model);

// One line per node: "name = Op(inputs) attrs -> outputs [shapes]", constants
// summarized.
std::string PrintGraph(const Graph& graph);

}  // namespace tuneforge::graph

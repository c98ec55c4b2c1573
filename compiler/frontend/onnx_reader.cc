// ONNX files: reading, IR/opset checks, symbolic dimensions bound, support checks.
#include "compiler/frontend/onnx_reader.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "compiler/frontend/qdq.h"
#include "compiler/support/files.h"
#include "compiler/support/status.h"

namespace tuneforge::frontend {

namespace {

namespace fs = std::filesystem;

absl::Status Bad(const std::string& path, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
}

std::string NodeLabel(const onnx::NodeProto& node, int index) {
  return absl::StrCat("node '", node.name().empty() ? "(unnamed)" : node.name(), "' (#", index,
                      ", ", node.op_type(), ")");
}

// Loads one initializer's external data (ONNX's "location", "offset", "length" keys,
// the location relative to the model's directory) into raw_data.
absl::Status LoadExternalData(const std::string& model_path, onnx::TensorProto* tensor) {
  std::string location;
  int64_t offset = 0;
  int64_t length = -1;
  for (const onnx::StringStringEntryProto& entry : tensor->external_data()) {
    if (entry.key() == "location") {
      location = entry.value();
    } else if (entry.key() == "offset" || entry.key() == "length") {
      int64_t v = 0;
      if (!absl::SimpleAtoi(entry.value(), &v) || v < 0) {
        return Bad(model_path, absl::StrCat("tensor '", tensor->name(), "': external data ",
                                            entry.key(), " '", entry.value(), "' is not a size"));
      }
      (entry.key() == "offset" ? offset : length) = v;
    }
  }
  const std::string where = absl::StrCat("tensor '", tensor->name(), "': external data");
  if (location.empty()) return Bad(model_path, where + " has no location");
  // Weights come from beside the model, never from elsewhere on the machine (a model
  // is input from users: "../../etc/shadow" must not be read into a tensor).
  fs::path relative = fs::path(location).lexically_normal();
  if (relative.is_absolute() || relative.empty() || *relative.begin() == "..") {
    return Bad(model_path, absl::StrCat(where, " location '", location,
                                        "' is outside the model's directory"));
  }
  fs::path file = fs::path(model_path).parent_path() / relative;
  // Nor through a symlink that points out of it, and only a regular file (a
  // directory opens as a stream whose size is nonsense).
  std::error_code ec;
  const fs::path dir = fs::canonical(fs::absolute(fs::path(model_path)).parent_path(), ec);
  const fs::path real = ec ? fs::path() : fs::canonical(file, ec);
  if (ec) return Bad(model_path, absl::StrCat(where, " file ", file.string(), " cannot be read"));
  const auto [dir_end, real_it] = std::mismatch(dir.begin(), dir.end(), real.begin(), real.end());
  if (dir_end != dir.end()) {
    return Bad(model_path, absl::StrCat(where, " file ", file.string(), " leads to ", real.string(),
                                        ", outside the model's directory"));
  }
  if (!fs::is_regular_file(real, ec)) {
    return Bad(model_path, absl::StrCat(where, " file ", file.string(), " is not a regular file"));
  }
  std::ifstream in(real, std::ios::binary);
  if (!in) return Bad(model_path, absl::StrCat(where, " file ", file.string(), " cannot be read"));
  in.seekg(0, std::ios::end);
  const int64_t size = static_cast<int64_t>(in.tellg());
  if (length < 0) length = size - offset;
  if (offset > size || length > size - offset) {
    return Bad(model_path, absl::StrCat(where, " [", offset, ", +", length, ") is past the end of ",
                                        file.string(), " (", size, " bytes)"));
  }
  std::string bytes(static_cast<size_t>(length), '\0');
  in.seekg(offset);
  in.read(bytes.data(), length);
  if (!in) return Bad(model_path, absl::StrCat(where, " cannot be read from ", file.string()));
  tensor->set_raw_data(std::move(bytes));
  tensor->clear_external_data();
  tensor->set_data_location(onnx::TensorProto::DEFAULT);
  return absl::OkStatus();
}

bool IsDefaultDomain(const std::string& domain) { return domain.empty() || domain == "ai.onnx"; }

// Constants (initializers) may also be bool masks and int32 axes or counts (read as
// int64); run-time values are float32 or int64.
absl::Status CheckTensorType(const std::string& path, const std::string& what, int32_t elem_type,
                             bool constant = false) {
  if (elem_type == onnx::TensorProto::FLOAT || elem_type == onnx::TensorProto::INT64 ||
      (constant && (elem_type == onnx::TensorProto::BOOL || elem_type == onnx::TensorProto::INT32))) {
    return absl::OkStatus();
  }
  const std::string name = onnx::TensorProto::DataType_IsValid(elem_type)
                               ? onnx::TensorProto::DataType_Name(
                                     static_cast<onnx::TensorProto::DataType>(elem_type))
                               : absl::StrCat("type ", elem_type);
  return Bad(path, absl::StrCat(what, " is ", name, "; only FLOAT (and INT64 for shapes and "
                                      "indices) is supported"));
}

}  // namespace

absl::StatusOr<OnnxModel> ReadOnnxModel(const std::string& path) {
  absl::StatusOr<std::string> bytes = ReadFile(path);
  if (!bytes.ok()) {
    return absl::NotFoundError(absl::StrCat("cannot read ONNX model ", path, ": ",
                                            bytes.status().message()));
  }
  return ParseOnnxModel(*bytes, path);
}

absl::StatusOr<OnnxModel> ParseOnnxModel(const std::string& bytes, const std::string& path) {
  if (bytes.size() > static_cast<size_t>(std::numeric_limits<int>::max())) {
    return Bad(path, "larger than 2 GiB; store the weights as external data");
  }
  OnnxModel model;
  model.path = path;
  if (bytes.empty() || !model.proto.ParseFromString(bytes)) {
    return Bad(path, "not an ONNX model (not a valid protobuf: truncated or corrupt?)");
  }
  // Any bytes that happen to parse (a text file can) lack a graph and an IR version.
  if (!model.proto.has_graph() || model.proto.ir_version() == 0) {
    return Bad(path, "not an ONNX model (no graph or no ir_version)");
  }
  if (model.proto.ir_version() < kMinIrVersion || model.proto.ir_version() > kMaxIrVersion) {
    return Bad(path, absl::StrCat("IR version ", model.proto.ir_version(), " is not supported (",
                                  kMinIrVersion, "..", kMaxIrVersion, ")"));
  }
  // Other domains' operator sets may be imported (onnxruntime's tools list several
  // whether or not a node uses them); a node of another domain is refused by
  // CheckSupported.
  for (const onnx::OperatorSetIdProto& set : model.proto.opset_import()) {
    if (IsDefaultDomain(set.domain())) model.opset = set.version();
  }
  if (model.opset < kMinOpset || model.opset > kMaxOpset) {
    return Bad(path, absl::StrCat("opset ", model.opset, " is not supported (", kMinOpset, "..",
                                  kMaxOpset, ")"));
  }
  for (onnx::TensorProto& tensor : *model.proto.mutable_graph()->mutable_initializer()) {
    if (tensor.data_location() == onnx::TensorProto::EXTERNAL) {
      RETURN_IF_ERROR(LoadExternalData(path, &tensor));
      model.had_external_data = true;
    }
  }
  RETURN_IF_ERROR(RewriteQdq(&model));
  return model;
}

namespace {

// Every supported operator with the attributes the importer and the executor read
// (all opsets kMinOpset..kMaxOpset). An attribute not listed is refused: one that
// was silently ignored would change what the node computes.
const std::map<std::string, std::set<std::string>>& SupportedAttributes() {
  static const auto* const table = new std::map<std::string, std::set<std::string>>{
      {"Abs", {}},
      {"And", {}},
      {"Equal", {}},
      {"Greater", {}},
      {"GreaterOrEqual", {}},
      {"Less", {}},
      {"LessOrEqual", {}},
      {"Not", {}},
      {"Or", {}},
      {"Where", {}},
      {"Xor", {}},
      {"Acos", {}},
      {"Acosh", {}},
      {"Add", {}},
      {"Asin", {}},
      {"Asinh", {}},
      {"Atan", {}},
      {"Atanh", {}},
      {"Cast", {"round_mode", "saturate", "to"}},  // round_mode: opset 25+, for float8e8m0 targets only
      {"CastLike", {"round_mode", "saturate"}},
      {"Ceil", {}},
      {"Celu", {"alpha"}},
      {"ConvTranspose",
       {"auto_pad", "dilations", "group", "kernel_shape", "output_padding", "output_shape", "pads", "strides"}},
      {"Cos", {}},
      {"Cosh", {}},
      {"Dropout", {"ratio", "seed"}},
      {"Elu", {"alpha"}},
      {"Exp", {}},
      {"Expand", {}},
      {"DFT", {"axis", "inverse", "onesided"}},  // axis: an input from opset 20
      {"Det", {}},
      {"DeformConv", {"dilations", "group", "kernel_shape", "offset_group", "pads", "strides"}},
      {"ScatterND", {"reduction"}},
      {"TopK", {"axis", "k", "largest", "sorted"}},  // k: an attribute before opset 10
      {"Einsum", {"equation"}},
      {"ArgMax", {"axis", "keepdims", "select_last_index"}},
      {"ArgMin", {"axis", "keepdims", "select_last_index"}},
      {"CumSum", {"exclusive", "reverse"}},
      {"LpNormalization", {"axis", "p"}},
      {"Pad", {"mode", "pads", "paddings", "value"}},  // pads/value: attributes before opset 11
      {"Tile", {}},
      {"Trilu", {"upper"}},
      {"Floor", {}},
      {"Gelu", {"approximate"}},
      {"HardSigmoid", {"alpha", "beta"}},
      {"Hardmax", {"axis"}},
      {"HardSwish", {}},
      {"LeakyRelu", {"alpha"}},
      {"Log", {}},
      {"LogSoftmax", {"axis"}},
      {"Max", {}},
      {"Mean", {}},
      {"Min", {}},
      {"Mish", {}},
      {"Neg", {}},
      {"PRelu", {}},
      {"Reciprocal", {}},
      {"Resize",
       {"antialias", "axes", "coordinate_transformation_mode", "cubic_coeff_a", "exclude_outside",
        "extrapolation_value", "keep_aspect_ratio_policy", "mode", "nearest_mode"}},
      {"Round", {}},
      {"Selu", {"alpha", "gamma"}},
      {"Shrink", {"bias", "lambd"}},
      {"Sign", {}},
      {"Sin", {}},
      {"Sinh", {}},
      {"Softplus", {}},
      {"Softsign", {}},
      {"Sum", {}},
      {"Tan", {}},
      {"ThresholdedRelu", {"alpha"}},
      {"AveragePool",
       {"auto_pad", "ceil_mode", "count_include_pad", "dilations", "kernel_shape", "pads", "strides"}},
      {"BatchNormalization", {"epsilon", "momentum", "spatial", "training_mode"}},
      {"Clip", {"min", "max"}},
      {"Concat", {"axis"}},
      {"Constant", {"value", "value_float", "value_floats", "value_int", "value_ints"}},
      {"ConstantOfShape", {"value"}},
      {"Conv", {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"}},
      {"DepthToSpace", {"blocksize", "mode"}},
      {"Div", {}},
      {"Erf", {}},
      {"Flatten", {"axis"}},
      {"Gather", {"axis"}},
      {"GatherElements", {"axis"}},
      {"Gemm", {"alpha", "beta", "transA", "transB"}},
      {"GlobalAveragePool", {}},
      {"GlobalMaxPool", {}},
      {"GridSample", {"align_corners", "mode", "padding_mode"}},
      {"GroupNormalization", {"epsilon", "num_groups", "stash_type"}},
      {"Identity", {}},
      {"InstanceNormalization", {"epsilon"}},
      {"LRN", {"alpha", "beta", "bias", "size"}},
      {"LayerNormalization", {"axis", "epsilon", "stash_type"}},
      {"LpPool", {"auto_pad", "ceil_mode", "dilations", "kernel_shape", "p", "pads", "strides"}},
      {"MatMul", {}},
      {"MeanVarianceNormalization", {"axes"}},
      {"MaxPool",
       {"auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads", "storage_order", "strides"}},
      {"Mod", {"fmod"}},
      {"Mul", {}},
      {"OneHot", {"axis"}},
      {"Pow", {}},
      {"Range", {}},
      {"ReduceL1", {"axes", "keepdims", "noop_with_empty_axes"}},
      {"ReduceL2", {"axes", "keepdims", "noop_with_empty_axes"}},
      {"ReduceLogSum", {"axes", "keepdims", "noop_with_empty_axes"}},
      {"ReduceLogSumExp", {"axes", "keepdims", "noop_with_empty_axes"}},
      {"ReduceMax", {"axes", "keepdims", "noop_with_empty_axes"}},
      {"ReduceMean", {"axes", "keepdims", "noop_with_empty_axes"}},
      {"ReduceMin", {"axes", "keepdims", "noop_with_empty_axes"}},
      {"ReduceProd", {"axes", "keepdims", "noop_with_empty_axes"}},
      {"ReduceSum", {"axes", "keepdims", "noop_with_empty_axes"}},
      {"ReduceSumSquare", {"axes", "keepdims", "noop_with_empty_axes"}},
      {"Relu", {}},
      {"Reshape", {"allowzero"}},
      {"Shape", {"start", "end"}},
      {"Sigmoid", {}},
      {"Slice", {}},  // opset 10+: starts, ends, axes and steps are inputs
      {"Size", {}},
      {"Softmax", {"axis"}},
      {"SpaceToDepth", {"blocksize", "mode"}},  // mode: opset 28
      {"Split", {"axis", "split", "num_outputs"}},
      {"Sqrt", {}},
      {"Squeeze", {"axes"}},
      {"Sub", {}},
      {"Tanh", {}},
      {"Transpose", {"perm"}},
      {"Unsqueeze", {"axes"}},
      {"Upsample", {"mode", "scales"}},
  };
  return *table;
}

}  // namespace

std::string DimBindings::ToString() const {
  std::vector<std::string> parts;
  for (const auto& [name, size] : dims) parts.push_back(absl::StrCat(name, "=", size));
  for (const auto& [name, shape] : shapes) parts.push_back(absl::StrCat(name, "=", absl::StrJoin(shape, ",")));
  return absl::StrJoin(parts, " ");
}

namespace {

absl::StatusOr<int64_t> ParseSize(const std::string& text, const std::string& what) {
  int64_t v = 0;
  if (!absl::SimpleAtoi(text, &v) || v < 1 || v > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": '", text, "' is not a size (1..2147483647)"));
  }
  return v;
}

}  // namespace

absl::Status ParseDimBinding(const std::string& text, DimBindings* b) {
  for (const std::string& item : std::vector<std::string>(absl::StrSplit(text, ','))) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0) {
      return absl::InvalidArgumentError("--dim wants NAME=N[,NAME=N...], got '" + text + "'");
    }
    const std::string name = item.substr(0, eq);
    ASSIGN_OR_RETURN(int64_t size, ParseSize(item.substr(eq + 1), "--dim " + name));
    if (!b->dims.emplace(name, size).second) return absl::InvalidArgumentError("--dim " + name + " given twice");
  }
  return absl::OkStatus();
}

absl::Status ParseShapeBinding(const std::string& text, DimBindings* b) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size()) {
    return absl::InvalidArgumentError("--shape wants INPUT=D0,D1,..., got '" + text + "'");
  }
  const std::string name = text.substr(0, eq);
  std::vector<int64_t> shape;
  for (const std::string& d : std::vector<std::string>(absl::StrSplit(text.substr(eq + 1), ','))) {
    ASSIGN_OR_RETURN(int64_t size, ParseSize(d, "--shape " + name));
    shape.push_back(size);
  }
  if (!b->shapes.emplace(name, shape).second) return absl::InvalidArgumentError("--shape " + name + " given twice");
  return absl::OkStatus();
}

absl::Status BindDimensions(OnnxModel* model, const DimBindings& b) {
  onnx::GraphProto* graph = model->proto.mutable_graph();
  std::set<std::string> initializers, used_dims, used_shapes;
  for (const onnx::TensorProto& t : graph->initializer()) initializers.insert(t.name());
  for (onnx::ValueInfoProto& input : *graph->mutable_input()) {
    if (initializers.count(input.name()) || !input.type().has_tensor_type()) continue;
    onnx::TensorShapeProto* shape = input.mutable_type()->mutable_tensor_type()->mutable_shape();
    auto given = b.shapes.find(input.name());
    if (given != b.shapes.end()) {
      used_shapes.insert(input.name());
      if (input.type().tensor_type().has_shape() && shape->dim_size() != static_cast<int>(given->second.size())) {
        return Bad(model->path, absl::StrCat("--shape ", input.name(), " has ", given->second.size(),
                                             " sizes; the input has rank ", shape->dim_size()));
      }
      for (int d = 0; d < shape->dim_size(); ++d) {
        const onnx::TensorShapeProto::Dimension& dim = shape->dim(d);
        if (dim.has_dim_value() && dim.dim_value() != given->second[static_cast<size_t>(d)]) {
          return Bad(model->path, absl::StrCat("--shape ", input.name(), ": dimension ", d, " is ",
                                               dim.dim_value(), " in the model, not ",
                                               given->second[static_cast<size_t>(d)]));
        }
      }
      shape->clear_dim();
      for (int64_t size : given->second) shape->add_dim()->set_dim_value(size);
      continue;
    }
    for (onnx::TensorShapeProto::Dimension& dim : *shape->mutable_dim()) {
      if (!dim.has_dim_param()) continue;
      auto it = b.dims.find(dim.dim_param());
      if (it == b.dims.end()) continue;
      used_dims.insert(it->first);
      dim.set_dim_value(it->second);
    }
  }
  for (const auto& [name, size] : b.dims) {
    if (!used_dims.count(name)) {
      return Bad(model->path, absl::StrCat("--dim ", name, ": no graph input has a dimension named '", name, "'"));
    }
  }
  for (const auto& [name, shape] : b.shapes) {
    if (!used_shapes.count(name)) {
      return Bad(model->path, absl::StrCat("--shape ", name, ": the model has no graph input named '", name, "'"));
    }
  }
  return absl::OkStatus();
}

const std::vector<std::string>& SupportedOnnxOperators() {
  static const std::vector<std::string>* const ops = [] {
    auto* list = new std::vector<std::string>;
    for (const auto& [op, attributes] : SupportedAttributes()) list->push_back(op);
    return list;  // sorted: the map's order
  }();
  return *ops;
}

// 2^34 float32 elements (64 GiB): more than any machine that runs tuneforge holds.
constexpr int64_t kMaxInputElements = int64_t{1} << 34;

absl::Status CheckSupported(const OnnxModel& model) {
  const onnx::GraphProto& graph = model.proto.graph();
  const std::vector<std::string>& ops = SupportedOnnxOperators();
  // QuantizeLinear/DequantizeLinear left after reading (RewriteQdq takes the QDQ form
  // only when every other operator is supported): the other operators are named first.
  int quantize = -1;
  for (int i = 0; i < graph.node_size(); ++i) {
    const onnx::NodeProto& node = graph.node(i);
    if (!IsDefaultDomain(node.domain())) {
      return Bad(model.path, absl::StrCat(NodeLabel(node, i), ": operator domain '", node.domain(),
                                          "' is not supported"));
    }
    if (node.op_type() == "QuantizeLinear" || node.op_type() == "DequantizeLinear") {
      if (quantize < 0) quantize = i;
      continue;
    }
    if (!std::binary_search(ops.begin(), ops.end(), node.op_type())) {
      return Bad(model.path, absl::StrCat(NodeLabel(node, i), ": operator '", node.op_type(),
                                          "' is not supported (supported: ",
                                          absl::StrJoin(ops, ", "), ")"));
    }
    const std::set<std::string>& known = SupportedAttributes().at(node.op_type());
    for (const onnx::AttributeProto& a : node.attribute()) {
      if (known.count(a.name()) == 0) {
        return Bad(model.path,
                   absl::StrCat(NodeLabel(node, i), ": attribute '", a.name(), "' of ", node.op_type(),
                                " is not supported",
                                known.empty() ? std::string(" (it takes none)")
                                              : absl::StrCat(" (supported: ", absl::StrJoin(known, ", "), ")")));
      }
    }
  }
  if (quantize >= 0) {
    return Bad(model.path, absl::StrCat(NodeLabel(graph.node(quantize), quantize), ": operator '",
                                        graph.node(quantize).op_type(),
                                        "' is supported only in the QDQ form (QuantizeLinear/DequantizeLinear "
                                        "pairs around supported operators; docs/int8.md)"));
  }
  for (const onnx::TensorProto& tensor : graph.initializer()) {
    RETURN_IF_ERROR(
        CheckTensorType(model.path, absl::StrCat("initializer '", tensor.name(), "'"),
                        tensor.data_type(), /*constant=*/true));
  }
  std::set<std::string> initializers;
  for (const onnx::TensorProto& tensor : graph.initializer()) initializers.insert(tensor.name());
  for (const onnx::ValueInfoProto& input : graph.input()) {
    if (initializers.count(input.name())) continue;  // IR < 4 lists weights as inputs too
    const std::string what = absl::StrCat("graph input '", input.name(), "'");
    if (!input.type().has_tensor_type()) return Bad(model.path, what + " is not a tensor");
    const onnx::TypeProto::Tensor& t = input.type().tensor_type();
    RETURN_IF_ERROR(CheckTensorType(model.path, what, t.elem_type()));
    if (!t.has_shape()) return Bad(model.path, what + " has no shape (static shapes only)");
    int64_t elements = 1;
    for (int d = 0; d < t.shape().dim_size(); ++d) {
      const onnx::TensorShapeProto::Dimension& dim = t.shape().dim(d);
      if (dim.has_dim_value() && dim.dim_value() > 0 &&
          (__builtin_mul_overflow(elements, dim.dim_value(), &elements) || elements > kMaxInputElements)) {
        return Bad(model.path, absl::StrCat(what, " has more than ", kMaxInputElements, " elements"));
      }
      if (dim.has_dim_value() && dim.dim_value() == 0) continue;  // empty: see the graph importer
      if (!dim.has_dim_value() || dim.dim_value() < 1) {
        return Bad(model.path,
                   absl::StrCat(what, " dimension ", d, " is ",
                                dim.has_dim_param() ? "'" + dim.dim_param() + "'" : "unknown",
                                dim.has_dim_param()
                                    ? absl::StrCat("; bind it: --dim ", dim.dim_param(), "=N (or --shape ",
                                                   input.name(), "=D0,D1,...)")
                                    : absl::StrCat("; give the input's shape: --shape ", input.name(), "=D0,D1,...")));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace tuneforge::frontend

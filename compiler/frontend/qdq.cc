// QDQ models rewritten into float operators at read time (qdq.h).
#include "compiler/frontend/qdq.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/support/status.h"

namespace tuneforge::frontend {
namespace {

using onnx::TensorProto;

// The numbers of an initializer of the types a quantized model's constants have.
absl::StatusOr<std::vector<double>> Numbers(const TensorProto& t) {
  constexpr int64_t kMaxElements = int64_t{1} << 31;
  int64_t count = 1;
  for (int64_t d : t.dims()) {
    if (d < 0 || __builtin_mul_overflow(count, d, &count) || count > kMaxElements) {
      return absl::InvalidArgumentError(absl::StrCat("initializer '", t.name(), "' has a bad shape"));
    }
  }
  std::vector<double> out;
  out.reserve(static_cast<size_t>(count));
  const std::string& raw = t.raw_data();
  auto from_raw = [&](auto sample) -> absl::Status {
    using T = decltype(sample);
    if (raw.size() != static_cast<size_t>(count) * sizeof(T)) {
      return absl::InvalidArgumentError(absl::StrCat("initializer '", t.name(), "' has ", raw.size(),
                                                     " bytes for ", count, " elements"));
    }
    for (int64_t i = 0; i < count; ++i) {
      T v;
      std::memcpy(&v, raw.data() + i * sizeof(T), sizeof(T));
      out.push_back(static_cast<double>(v));
    }
    return absl::OkStatus();
  };
  switch (t.data_type()) {
    case TensorProto::FLOAT:
      if (!raw.empty()) RETURN_IF_ERROR(from_raw(float{}));
      for (float v : t.float_data()) out.push_back(v);
      break;
    case TensorProto::UINT8:
      if (!raw.empty()) RETURN_IF_ERROR(from_raw(uint8_t{}));
      for (int32_t v : t.int32_data()) out.push_back(static_cast<uint8_t>(v));
      break;
    case TensorProto::INT8:
      if (!raw.empty()) RETURN_IF_ERROR(from_raw(int8_t{}));
      for (int32_t v : t.int32_data()) out.push_back(static_cast<int8_t>(v));
      break;
    case TensorProto::INT32:
      if (!raw.empty()) RETURN_IF_ERROR(from_raw(int32_t{}));
      for (int32_t v : t.int32_data()) out.push_back(v);
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("initializer '", t.name(), "' is ", TensorProto::DataType_Name(
                                                               static_cast<TensorProto::DataType>(t.data_type())),
                       "; a quantized model's constants are float32, uint8, int8 or int32"));
  }
  if (static_cast<int64_t>(out.size()) != count) {
    return absl::InvalidArgumentError(absl::StrCat("initializer '", t.name(), "' has ", out.size(),
                                                   " values for ", count, " elements"));
  }
  return out;
}

TensorProto FloatTensor(const std::string& name, const std::vector<int64_t>& dims, const std::vector<double>& values) {
  TensorProto t;
  t.set_name(name);
  t.set_data_type(TensorProto::FLOAT);
  for (int64_t d : dims) t.add_dims(d);
  std::string raw(values.size() * sizeof(float), '\0');
  for (size_t i = 0; i < values.size(); ++i) {
    const float v = static_cast<float>(values[i]);
    std::memcpy(raw.data() + i * sizeof(float), &v, sizeof(float));
  }
  t.set_raw_data(std::move(raw));
  return t;
}

class Rewriter {
 public:
  explicit Rewriter(OnnxModel* model) : model_(model), graph_(model->proto.mutable_graph()) {
    for (int i = 0; i < graph_->initializer_size(); ++i) initializers_[graph_->initializer(i).name()] = i;
  }

  absl::Status Run() {
    RETURN_IF_ERROR(ExpandQOperators());
    bool any = false;
    const std::vector<std::string>& supported = SupportedOnnxOperators();
    for (const onnx::NodeProto& n : graph_->node()) {
      const bool qdq = n.op_type() == "QuantizeLinear" || n.op_type() == "DequantizeLinear" ||
                       n.op_type() == "DynamicQuantizeLinear" || n.op_type() == "MatMulInteger" ||
                       n.op_type() == "ConvInteger";
      any |= qdq;
      // Operators the importer does not run (QLinearConv, MatMulInteger, another
      // domain's): left as they are, so that CheckSupported names them.
      if (!qdq && (!(n.domain().empty() || n.domain() == "ai.onnx") ||
                   !std::binary_search(supported.begin(), supported.end(), n.op_type()))) {
        return absl::OkStatus();
      }
    }
    if (!any) return absl::OkStatus();
    for (int i = 0; i < graph_->node_size(); ++i) {
      const onnx::NodeProto& n = graph_->node(i);
      if ((n.op_type() == "QuantizeLinear" || n.op_type() == "DequantizeLinear") &&
          (n.input_size() < 2 || n.input_size() > 3 || n.output_size() != 1 || n.input(0).empty())) {
        return Error(n, i, "needs an input, a scale, an optional zero point and one output");
      }
    }
    for (int i = 0; i < graph_->node_size(); ++i) {
      for (const std::string& in : graph_->node(i).input()) consumers_[in].push_back(i);
    }
    std::set<std::string> outputs;
    for (const onnx::ValueInfoProto& v : graph_->output()) outputs.insert(v.name());

    std::vector<onnx::NodeProto> kept;
    std::set<int> dropped;  // DequantizeLinears that a QuantizeLinear's rewrite replaced
    for (int i = 0; i < graph_->node_size(); ++i) {
      const onnx::NodeProto& n = graph_->node(i);
      if (dropped.count(i)) continue;
      if (n.op_type() == "DynamicQuantizeLinear") {
        ASSIGN_OR_RETURN(std::vector<onnx::NodeProto> steps, DynamicQuantize(n, i));
        for (onnx::NodeProto& step : steps) kept.push_back(std::move(step));
        continue;
      }
      if (n.op_type() == "ConvInteger") {
        ASSIGN_OR_RETURN(std::vector<onnx::NodeProto> steps, ConvInteger(n, i));
        for (onnx::NodeProto& step : steps) kept.push_back(std::move(step));
        continue;
      }
      if (n.op_type() == "MatMulInteger") {
        ASSIGN_OR_RETURN(std::vector<onnx::NodeProto> steps, MatMulInteger(n, i));
        for (onnx::NodeProto& step : steps) kept.push_back(std::move(step));
        continue;
      }
      if (n.op_type() == "DequantizeLinear") {
        if (!initializers_.count(n.input(0))) {
          return Error(n, i, "reads '" + n.input(0) + "', which is neither a constant nor the output of a "
                             "QuantizeLinear whose outputs all feed matching DequantizeLinears");
        }
        RETURN_IF_ERROR(DequantizeConstant(n, i));
        continue;
      }
      if (n.op_type() != "QuantizeLinear") {
        kept.push_back(n);
        continue;
      }
      // Every consumer a DequantizeLinear with the same scale and zero point.
      ASSIGN_OR_RETURN(const Quantization q, QuantizationOf(n, i));
      if (q.scale.size() != 1) return Error(n, i, "has per-axis scales on a run-time value (activations are per tensor)");
      if (q.low < -128) return Error(n, i, "quantizes to int32, not supported");
      if (outputs.count(n.output(0))) return Error(n, i, "makes graph output '" + n.output(0) + "' (uint8/int8 outputs)");
      std::vector<int> pairs;
      for (int c : consumers_[n.output(0)]) {
        const onnx::NodeProto& d = graph_->node(c);
        if (d.op_type() != "DequantizeLinear" || d.input(0) != n.output(0)) {
          return Error(n, i, "feeds node '" + d.name() + "' (" + d.op_type() +
                                 "), not a DequantizeLinear: only QuantizeLinear/DequantizeLinear pairs are supported");
        }
        ASSIGN_OR_RETURN(const Quantization dq, QuantizationOf(d, c));
        if (dq.scale != q.scale || dq.zero != q.zero || dq.low != q.low) {
          return Error(d, c, "dequantizes with another scale or zero point than the QuantizeLinear before it");
        }
        pairs.push_back(c);
      }
      if (pairs.empty()) continue;  // feeds nothing: dead
      // The round trip, once, into the first DequantizeLinear's output; the others'
      // readers read that.
      const std::string out = graph_->node(pairs.front()).output(0);
      for (onnx::NodeProto& step : RoundTrip(n, q, out)) kept.push_back(std::move(step));
      for (int c : pairs) {
        dropped.insert(c);
        if (graph_->node(c).output(0) != out) renamed_[graph_->node(c).output(0)] = out;
      }
    }
    graph_->clear_node();
    for (onnx::NodeProto& n : kept) {
      for (std::string& in : *n.mutable_input()) {
        auto it = renamed_.find(in);
        if (it != renamed_.end()) in = it->second;
      }
      *graph_->add_node() = std::move(n);
    }
    for (onnx::ValueInfoProto& v : *graph_->mutable_output()) {
      auto it = renamed_.find(v.name());
      if (it != renamed_.end()) {
        // Another DequantizeLinear of the same pair named this output: copy the value.
        onnx::NodeProto* copy = graph_->add_node();
        copy->set_name(v.name() + ".qdq_copy");
        copy->set_op_type("Identity");
        copy->add_input(it->second);
        copy->add_output(v.name());
      }
    }
    // Shapes recorded for the integer tensors that are gone.
    google::protobuf::RepeatedPtrField<onnx::ValueInfoProto> infos;
    for (onnx::ValueInfoProto& v : *graph_->mutable_value_info()) {
      const int32_t type = v.type().tensor_type().elem_type();
      if (type != TensorProto::UINT8 && type != TensorProto::INT8 && type != TensorProto::INT32) infos.Add(std::move(v));
    }
    graph_->mutable_value_info()->Swap(&infos);
    // The integer constants nothing reads any more, and the float ones made here.
    std::set<std::string> read;
    for (const onnx::NodeProto& n : graph_->node())
      for (const std::string& in : n.input()) read.insert(in);
    google::protobuf::RepeatedPtrField<TensorProto> initializers;
    for (TensorProto& t : *graph_->mutable_initializer()) {
      if (read.count(t.name()) || t.data_type() == TensorProto::FLOAT || t.data_type() == TensorProto::INT64) {
        initializers.Add(std::move(t));
      }
    }
    for (TensorProto& t : added_) initializers.Add(std::move(t));
    graph_->mutable_initializer()->Swap(&initializers);
    return absl::OkStatus();
  }

 private:
  struct Quantization {
    std::vector<double> scale, zero;
    double low = 0, high = 255;  // the zero point type's range
  };

  absl::Status Error(const onnx::NodeProto& n, int index, const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat(model_->path, ": node '", n.name().empty() ? "(unnamed)" : n.name(),
                                                   "' (#", index, ", ", n.op_type(), ") ", what));
  }

  const TensorProto* Initializer(const std::string& name) const {
    auto it = initializers_.find(name);
    return it == initializers_.end() ? nullptr : &graph_->initializer(it->second);
  }

  // Scale, zero point and range of a QuantizeLinear or DequantizeLinear node.
  absl::StatusOr<Quantization> QuantizationOf(const onnx::NodeProto& n, int index) const {
    for (const onnx::AttributeProto& a : n.attribute()) {
      if (a.name() != "axis") return Error(n, index, "has attribute '" + a.name() + "' (float8/int4 forms), not supported");
    }
    Quantization q;
    const TensorProto* scale = n.input_size() > 1 ? Initializer(n.input(1)) : nullptr;
    if (!scale) return Error(n, index, "has a scale that is not an initializer");
    if (scale->data_type() != TensorProto::FLOAT) return Error(n, index, "has a scale that is not float32");
    ASSIGN_OR_RETURN(q.scale, Numbers(*scale));
    if (q.scale.empty()) return Error(n, index, "has no scale values");
    for (double v : q.scale) {
      if (!(v > 0) || !std::isfinite(v)) return Error(n, index, "has a scale that is not a positive finite number");
    }
    q.zero.assign(q.scale.size(), 0.0);
    if (n.input_size() > 2 && !n.input(2).empty()) {
      const TensorProto* zero = Initializer(n.input(2));
      if (!zero) return Error(n, index, "has a zero point that is not an initializer");
      if (zero->data_type() == TensorProto::INT8) {
        q.low = -128, q.high = 127;
      } else if (zero->data_type() == TensorProto::INT32) {
        q.low = -2147483648.0, q.high = 2147483647.0;
      } else if (zero->data_type() != TensorProto::UINT8) {
        return Error(n, index, "has a zero point of a type other than uint8, int8 and int32");
      }
      ASSIGN_OR_RETURN(q.zero, Numbers(*zero));
      if (q.zero.size() != q.scale.size()) return Error(n, index, "has scales and zero points of different sizes");
    }
    return q;
  }

  // DequantizeLinear of a constant: a float initializer under the node's output name.
  absl::Status DequantizeConstant(const onnx::NodeProto& n, int index) {
    ASSIGN_OR_RETURN(const Quantization q, QuantizationOf(n, index));
    const TensorProto& data = *Initializer(n.input(0));
    ASSIGN_OR_RETURN(const std::vector<double> values, Numbers(data));
    std::vector<int64_t> dims(data.dims().begin(), data.dims().end());
    int64_t axis = 1;
    for (const onnx::AttributeProto& a : n.attribute())
      if (a.name() == "axis") axis = a.i();
    const int64_t rank = static_cast<int64_t>(dims.size());
    if (axis < 0) axis += rank;
    int64_t inner = 1, channels = static_cast<int64_t>(q.scale.size());
    if (channels > 1) {
      if (axis < 0 || axis >= rank || dims[static_cast<size_t>(axis)] != channels) {
        return Error(n, index, absl::StrCat("has ", channels, " scales for axis ", axis, " of a rank-", rank, " tensor"));
      }
      for (int64_t d = axis + 1; d < rank; ++d) inner *= dims[static_cast<size_t>(d)];
    }
    std::vector<double> out(values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      const size_t c = channels > 1 ? static_cast<size_t>((static_cast<int64_t>(i) / inner) % channels) : 0;
      // In float32 as the operator's definition computes it: (x - zero) * scale.
      out[i] = static_cast<float>(static_cast<float>(values[i] - q.zero[c]) * static_cast<float>(q.scale[c]));
    }
    added_.push_back(FloatTensor(n.output(0), dims, out));
    model_->quantized_constants[n.output(0)] = QuantizedConstant{q.scale, channels > 1 ? axis : 0};
    return absl::OkStatus();
  }

  // (clamp(round(x / s) + z, low, high) - z) * s into `out`, as float operators.
  std::vector<onnx::NodeProto> RoundTrip(const onnx::NodeProto& q_node, const Quantization& q, const std::string& out) {
    const std::string base = out + ".qdq";
    auto constant = [&](const std::string& what, double v) {
      added_.push_back(FloatTensor(base + "." + what, {}, {v}));
      return base + "." + what;
    };
    const std::string scale = constant("scale", q.scale[0]), zero = constant("zero", q.zero[0]);
    std::vector<onnx::NodeProto> nodes;
    auto step = [&](const std::string& op, std::vector<std::string> inputs, const std::string& output) {
      onnx::NodeProto n;
      n.set_name(base + "." + op);
      n.set_op_type(op);
      for (std::string& in : inputs) n.add_input(std::move(in));
      n.add_output(output);
      nodes.push_back(std::move(n));
      return output;
    };
    std::string t = step("Div", {q_node.input(0), scale}, base + ".scaled");
    t = step("Round", {t}, base + ".rounded");
    t = step("Add", {t, zero}, base + ".shifted");
    if (model_->opset >= 11) {
      t = step("Clip", {t, constant("low", q.low), constant("high", q.high)}, base + ".clipped");
    } else {
      t = step("Clip", {t}, base + ".clipped");
      onnx::AttributeProto* low = nodes.back().add_attribute();
      low->set_name("min");
      low->set_type(onnx::AttributeProto::FLOAT);
      low->set_f(static_cast<float>(q.low));
      onnx::AttributeProto* high = nodes.back().add_attribute();
      high->set_name("max");
      high->set_type(onnx::AttributeProto::FLOAT);
      high->set_f(static_cast<float>(q.high));
    }
    t = step("Sub", {t, zero}, base + ".centered");
    step("Mul", {t, scale}, out);
    model_->quantized_tensors[out] = QuantizedTensor{q.scale[0], q.zero[0], q.low, q.high};
    return nodes;
  }

  // A node of the rewrite: `op` over `inputs` into `output`, named after it.
  static onnx::NodeProto Step(const std::string& op, std::vector<std::string> inputs, const std::string& output) {
    onnx::NodeProto n;
    n.set_name(output + "." + op);
    n.set_op_type(op);
    for (std::string& in : inputs) n.add_input(std::move(in));
    n.add_output(output);
    return n;
  }

  // A new float32 initializer `name` of `values` ([] or [n]).
  void AddInitializer(const std::string& name, const std::vector<double>& values) {
    *graph_->add_initializer() =
        FloatTensor(name, values.size() == 1 ? std::vector<int64_t>{} : std::vector<int64_t>{static_cast<int64_t>(values.size())},
                    values);
    initializers_[name] = graph_->initializer_size() - 1;
  }

  // The QOperator form expanded into the QDQ form, which the rewrite below takes as it
  // takes quantize_static's QDQ models: QLinearConv, QLinearMatMul and com.microsoft's
  // QLinearAdd, QLinearGlobalAveragePool and QGemm become DequantizeLinear of each
  // integer input (weights along their output channels), the float operator (int32
  // biases dequantized with input scale x weight scales, as the operators define
  // them), and QuantizeLinear of the output with its scale and zero point. Operators
  // that only move or select values (MaxPool, Flatten, Reshape, Transpose, Squeeze,
  // Unsqueeze, Identity) reading an integer tensor run on its dequantized values and
  // quantize their output the same way (exact: they move values, never make new ones).
  // Any other operator reading an integer tensor is refused, named.
  absl::Status ExpandQOperators() {
    struct Quant {
      std::string scale, zero;
    };
    std::map<std::string, Quant> quant;        // integer tensors -> their quantization
    std::map<std::string, std::string> dq;     // (tensor|scale|zero|axis) -> its DequantizeLinear's output
    std::vector<onnx::NodeProto> out;
    bool changed = false;
    auto int_attr = [](onnx::NodeProto* n, const std::string& name, int64_t v) {
      onnx::AttributeProto* a = n->add_attribute();
      a->set_name(name);
      a->set_type(onnx::AttributeProto::INT);
      a->set_i(v);
    };
    auto dequantize = [&](const std::string& t, const std::string& scale, const std::string& zero, int64_t axis) {
      const std::string key = absl::StrCat(t, "|", scale, "|", zero, "|", axis);
      auto it = dq.find(key);
      if (it != dq.end()) return it->second;
      const std::string name = absl::StrCat(t, ".qop", dq.size(), ".f");
      onnx::NodeProto d = Step("DequantizeLinear", zero.empty() ? std::vector<std::string>{t, scale}
                                                                : std::vector<std::string>{t, scale, zero},
                               name);
      if (axis >= 0) int_attr(&d, "axis", axis);
      out.push_back(std::move(d));
      dq[key] = name;
      return name;
    };
    auto quantize = [&](const std::string& f, const std::string& scale, const std::string& zero,
                        const std::string& output) {
      out.push_back(Step("QuantizeLinear", zero.empty() ? std::vector<std::string>{f, scale}
                                                        : std::vector<std::string>{f, scale, zero},
                         output));
      quant[output] = Quant{scale, zero};
    };
    // The scale of an int32 bias: input scale x weight scale(s), in float32.
    auto bias_scale = [&](const onnx::NodeProto& n, int index, const std::string& in_scale,
                          const std::string& w_scale, const std::string& name) -> absl::StatusOr<std::string> {
      const TensorProto* a = Initializer(in_scale);
      const TensorProto* b = Initializer(w_scale);
      if (!a || !b) return Error(n, index, "has scales that are not initializers");
      ASSIGN_OR_RETURN(const std::vector<double> av, Numbers(*a));
      ASSIGN_OR_RETURN(std::vector<double> bv, Numbers(*b));
      if (av.size() != 1 || bv.empty()) return Error(n, index, "has an input scale that is not one value");
      for (double& v : bv) v = static_cast<float>(static_cast<float>(av[0]) * static_cast<float>(v));
      AddInitializer(name, bv);
      return name;
    };
    auto arg = [](const onnx::NodeProto& n, int k) { return k < n.input_size() ? n.input(k) : std::string(); };
    // Only a model with QOperator nodes: a QDQ model is the rewrite's as it stands.
    bool qoperator = false;
    for (const onnx::NodeProto& n : graph_->node()) {
      const bool standard = n.domain().empty() || n.domain() == "ai.onnx";
      qoperator |= (standard && (n.op_type() == "QLinearConv" || n.op_type() == "QLinearMatMul")) ||
                   (n.domain() == "com.microsoft" &&
                    (n.op_type() == "QLinearAdd" || n.op_type() == "QLinearGlobalAveragePool" || n.op_type() == "QGemm"));
    }
    if (!qoperator) return absl::OkStatus();
    for (int i = 0; i < graph_->node_size(); ++i) {
      const onnx::NodeProto& n = graph_->node(i);
      const std::string& op = n.op_type();
      const bool standard = n.domain().empty() || n.domain() == "ai.onnx";
      const bool microsoft = n.domain() == "com.microsoft";
      const std::string y = n.output_size() > 0 ? n.output(0) : "";
      const std::string f = y + ".qop.y";
      if (standard && (op == "QLinearConv" || op == "QLinearMatMul")) {
        if (n.input_size() < 8 || n.output_size() != 1) return Error(n, i, "needs 8 inputs (9 with a bias) and one output");
        const std::string x = dequantize(n.input(0), n.input(1), n.input(2), -1);
        const bool conv = op == "QLinearConv";
        const std::string w = dequantize(n.input(3), n.input(4), n.input(5), conv ? 0 : -1);
        std::vector<std::string> inputs = {x, w};
        if (conv && !arg(n, 8).empty()) {
          ASSIGN_OR_RETURN(const std::string s, bias_scale(n, i, n.input(1), n.input(4), y + ".qop.bias_scale"));
          inputs.push_back(dequantize(n.input(8), s, "", 0));
        }
        onnx::NodeProto fl = Step(conv ? "Conv" : "MatMul", inputs, f);
        for (const onnx::AttributeProto& a : n.attribute()) *fl.add_attribute() = a;
        out.push_back(std::move(fl));
        quantize(f, n.input(6), n.input(7), y);
        changed = true;
        continue;
      }
      if (microsoft && op == "QLinearAdd") {
        if (n.input_size() < 7 || n.output_size() != 1) return Error(n, i, "needs 7 or 8 inputs and one output");
        out.push_back(Step("Add", {dequantize(n.input(0), n.input(1), n.input(2), -1),
                                   dequantize(n.input(3), n.input(4), n.input(5), -1)},
                           f));
        quantize(f, n.input(6), arg(n, 7), y);
        changed = true;
        continue;
      }
      if (microsoft && op == "QLinearGlobalAveragePool") {
        if (n.input_size() < 4 || n.output_size() != 1) return Error(n, i, "needs 4 or 5 inputs and one output");
        for (const onnx::AttributeProto& a : n.attribute()) {
          if (a.name() == "channels_last" && a.i() != 0) return Error(n, i, "has channels_last = 1 (NHWC), not supported");
        }
        out.push_back(Step("GlobalAveragePool", {dequantize(n.input(0), n.input(1), n.input(2), -1)}, f));
        quantize(f, n.input(3), arg(n, 4), y);
        changed = true;
        continue;
      }
      if (microsoft && op == "QGemm") {
        if (n.input_size() < 6 || n.output_size() != 1) return Error(n, i, "needs A, B, their scales and zero points");
        int64_t trans_b = 0;
        onnx::NodeProto gemm = Step("Gemm", {}, arg(n, 7).empty() ? y : f);
        for (const onnx::AttributeProto& a : n.attribute()) {
          if (a.name() == "transB") trans_b = a.i();
          if (a.name() != "alpha" && a.name() != "transA" && a.name() != "transB") {
            return Error(n, i, "has attribute '" + a.name() + "', not supported");
          }
          *gemm.add_attribute() = a;
        }
        gemm.add_input(dequantize(n.input(0), n.input(1), n.input(2), -1));
        gemm.add_input(dequantize(n.input(3), n.input(4), n.input(5), trans_b ? 0 : 1));
        if (!arg(n, 6).empty()) {
          ASSIGN_OR_RETURN(const std::string s, bias_scale(n, i, n.input(1), n.input(4), y + ".qop.bias_scale"));
          gemm.add_input(dequantize(n.input(6), s, "", 0));
        }
        out.push_back(std::move(gemm));
        if (!arg(n, 7).empty()) quantize(f, n.input(7), arg(n, 8), y);
        changed = true;
        continue;
      }
      // Operators that move values, on an integer tensor.
      static const std::set<std::string> kMovers = {"MaxPool", "Flatten", "Reshape", "Transpose",
                                                    "Squeeze", "Unsqueeze", "Identity"};
      auto q = n.input_size() > 0 ? quant.find(n.input(0)) : quant.end();
      if (standard && kMovers.count(op) && q != quant.end()) {
        if (n.output_size() != 1) return Error(n, i, "on an integer tensor has more than one output (MaxPool's indices)");
        const Quant qt = q->second;
        onnx::NodeProto moved = n;
        moved.set_input(0, dequantize(n.input(0), qt.scale, qt.zero, -1));
        moved.set_output(0, f);
        out.push_back(std::move(moved));
        quantize(f, qt.scale, qt.zero, y);
        changed = true;
        continue;
      }
      if (standard && op == "QuantizeLinear" && n.input_size() > 1 && n.output_size() == 1) {
        quant[y] = Quant{n.input(1), arg(n, 2)};
      } else if (op != "DequantizeLinear") {
        for (const std::string& in : n.input()) {
          if (quant.count(in)) {
            return Error(n, i, "reads the quantized tensor '" + in + "': of the QOperator form, only QLinearConv, "
                               "QLinearMatMul, QLinearAdd, QLinearGlobalAveragePool, QGemm, DequantizeLinear and "
                               "operators that move values (MaxPool, Flatten, Reshape, Transpose, Squeeze, "
                               "Unsqueeze, Identity) are supported");
          }
        }
      }
      out.push_back(n);
    }
    if (!changed) return absl::OkStatus();
    graph_->clear_node();
    for (onnx::NodeProto& n : out) *graph_->add_node() = std::move(n);
    return absl::OkStatus();
  }

  // DynamicQuantizeLinear(x) -> y, y_scale, y_zero_point (uint8) as float operators,
  // the operator's definition: y_scale = (max(0, max x) - min(0, min x)) / 255 (1 when
  // that range is 0: x is all zeros, as onnxruntime does), y_zero_point =
  // clamp(round(-min(0, min x) / y_scale), 0, 255), y = clamp(round(x / y_scale) +
  // y_zero_point, 0, 255); the integers held as float32.
  absl::StatusOr<std::vector<onnx::NodeProto>> DynamicQuantize(const onnx::NodeProto& n, int index) {
    if (n.input_size() != 1 || n.output_size() < 1 || n.output_size() > 3 || n.input(0).empty()) {
      return Error(n, index, "needs one input and up to three outputs");
    }
    if (n.attribute_size() > 0) return Error(n, index, "has attributes; DynamicQuantizeLinear takes none");
    const std::string base = (n.name().empty() ? n.output(0) : n.name()) + ".dql";
    auto constant = [&](const std::string& what, double v) {
      added_.push_back(FloatTensor(base + "." + what, {}, {v}));
      return base + "." + what;
    };
    const std::string zero = constant("zero", 0), qmax = constant("qmax", 255), one = constant("one", 1);
    auto out = [&](int i, const std::string& fallback) {
      return i < n.output_size() && !n.output(i).empty() ? n.output(i) : base + "." + fallback;
    };
    const std::string y = out(0, "y"), scale = out(1, "scale"), zp = out(2, "zero_point");
    std::vector<onnx::NodeProto> nodes;
    nodes.push_back(Step("ReduceMax", {n.input(0)}, base + ".max"));
    nodes.push_back(Step("ReduceMin", {n.input(0)}, base + ".min"));
    for (int i : {0, 1}) {
      onnx::AttributeProto* keep = nodes[static_cast<size_t>(i)].add_attribute();
      keep->set_name("keepdims");
      keep->set_type(onnx::AttributeProto::INT);
      keep->set_i(0);
    }
    nodes.push_back(Step("Max", {base + ".max", zero}, base + ".hi"));
    nodes.push_back(Step("Min", {base + ".min", zero}, base + ".lo"));
    nodes.push_back(Step("Sub", {base + ".hi", base + ".lo"}, base + ".range"));
    nodes.push_back(Step("Div", {base + ".range", qmax}, base + ".step"));
    nodes.push_back(Step("Equal", {base + ".range", zero}, base + ".flat"));
    nodes.push_back(Step("Where", {base + ".flat", one, base + ".step"}, scale));
    nodes.push_back(Step("Sub", {zero, base + ".lo"}, base + ".neg_lo"));
    nodes.push_back(Step("Div", {base + ".neg_lo", scale}, base + ".zp_real"));
    nodes.push_back(Step("Round", {base + ".zp_real"}, base + ".zp_rounded"));
    nodes.push_back(Step("Clip", {base + ".zp_rounded", zero, qmax}, zp));
    nodes.push_back(Step("Div", {n.input(0), scale}, base + ".scaled"));
    nodes.push_back(Step("Round", {base + ".scaled"}, base + ".rounded"));
    nodes.push_back(Step("Add", {base + ".rounded", zp}, base + ".shifted"));
    nodes.push_back(Step("Clip", {base + ".shifted", zero, qmax}, y));
    dynamic_[y] = Dynamic{n.input(0), scale, zp};
    return nodes;
  }

  // MatMulInteger(A, B, a_zero_point, b_zero_point) with B and its zero point
  // constants: MatMul(A - a_zero_point, float(B - b_zero_point)) in float32 (A holds
  // integers as float32, a DynamicQuantizeLinear's rewrite). Exact while the sums stay
  // below 2^24; beyond, within float32's rounding of them.
  absl::StatusOr<std::vector<onnx::NodeProto>> MatMulInteger(const onnx::NodeProto& n, int index) {
    ASSIGN_OR_RETURN(IntegerProductRewrite r, IntegerProduct(n, index, /*conv=*/false));
    // A of a DynamicQuantizeLinear with its zero point, B int8 with zero point 0: an
    // int8 kernel can compute the layer (tasks.cc).
    auto dq = dynamic_.find(n.input(0));
    if (dq != dynamic_.end() && n.input_size() > 2 && n.input(2) == dq->second.zero && r.int8_weights &&
        r.zero_weight_zero_point) {
      model_->dynamic_matmuls[n.output(0)] = DynamicMatmul{dq->second.source, dq->second.scale};
    }
    return std::move(r.nodes);
  }

  // ConvInteger(x, constant w, x_zero_point, constant w_zero_point): Conv(x - x_zero_point,
  // float(w - w_zero_point[k])) in float32 with the node's attributes; padding adds
  // zeros to the centred input, i.e. the zero point to the integer one. Exact while
  // the sums stay below 2^24, as for MatMulInteger.
  absl::StatusOr<std::vector<onnx::NodeProto>> ConvInteger(const onnx::NodeProto& n, int index) {
    ASSIGN_OR_RETURN(IntegerProductRewrite r, IntegerProduct(n, index, /*conv=*/true));
    return std::move(r.nodes);
  }

  struct IntegerProductRewrite {
    std::vector<onnx::NodeProto> nodes;
    bool int8_weights = false, zero_weight_zero_point = false;
  };
  // MatMulInteger (`conv` false: B [K, N], zero points per column) or ConvInteger
  // (`conv`: w [K, C, ...], zero points per output channel) as the float32 product of
  // the zero-point-centred integers.
  absl::StatusOr<IntegerProductRewrite> IntegerProduct(const onnx::NodeProto& n, int index, bool conv) {
    const std::string a_name = conv ? "x" : "A", b_name = conv ? "w" : "B";
    const std::string a_zero_name = conv ? "x_zero_point" : "a_zero_point", b_zero_name = conv ? "w_zero_point" : "b_zero_point";
    if (n.input_size() < 2 || n.input_size() > 4 || n.output_size() != 1 || n.input(0).empty() || n.input(1).empty()) {
      return Error(n, index, "needs " + a_name + ", " + b_name + ", optional zero points and one output");
    }
    const TensorProto* b = Initializer(n.input(1));
    if (!b || (b->data_type() != TensorProto::INT8 && b->data_type() != TensorProto::UINT8) ||
        (conv ? b->dims_size() < 3 : b->dims_size() != 2)) {
      return Error(n, index, "has a " + b_name + " that is not " +
                                 (conv ? "an int8 or uint8 initializer of rank 3 or more" : "a 2-D int8 or uint8 initializer") +
                                 " (weights computed at run time)");
    }
    ASSIGN_OR_RETURN(const std::vector<double> values, Numbers(*b));
    // Zero points per output channel: w's first dimension, B's columns.
    const int64_t channels = conv ? b->dims(0) : b->dims(1);
    const int64_t per_channel = static_cast<int64_t>(values.size()) / channels;
    auto channel_of = [&](size_t i) {
      return conv ? i / static_cast<size_t>(per_channel) : i % static_cast<size_t>(channels);
    };
    std::vector<double> b_zero(static_cast<size_t>(channels), 0.0);
    if (n.input_size() > 3 && !n.input(3).empty()) {
      const TensorProto* z = Initializer(n.input(3));
      if (!z || z->data_type() != b->data_type()) {
        return Error(n, index, "has a " + b_zero_name + " that is not a constant of " + b_name + "'s type");
      }
      ASSIGN_OR_RETURN(const std::vector<double> zs, Numbers(*z));
      if (zs.size() == 1) {
        b_zero.assign(static_cast<size_t>(channels), zs[0]);
      } else if (static_cast<int64_t>(zs.size()) == channels) {
        b_zero = zs;
      } else {
        return Error(n, index, "has a " + b_zero_name + " that is neither a scalar nor one per " +
                                   (conv ? "output channel" : "column"));
      }
    }
    std::vector<double> centered(values.size());
    for (size_t i = 0; i < values.size(); ++i) centered[i] = values[i] - b_zero[channel_of(i)];
    const std::string base = (n.name().empty() ? n.output(0) : n.name()) + (conv ? ".convi" : ".mmi");
    const std::string weights = base + (conv ? ".w" : ".b");
    added_.push_back(FloatTensor(weights, std::vector<int64_t>(b->dims().begin(), b->dims().end()), centered));
    IntegerProductRewrite r;
    r.int8_weights = b->data_type() == TensorProto::INT8;
    r.zero_weight_zero_point = std::all_of(b_zero.begin(), b_zero.end(), [](double z) { return z == 0; });
    std::string a = n.input(0);
    if (n.input_size() > 2 && !n.input(2).empty()) {
      const TensorProto* z = Initializer(n.input(2));
      if (z && z->data_type() != TensorProto::UINT8 && z->data_type() != TensorProto::INT8) {
        return Error(n, index, "has an " + a_zero_name + " that is not uint8 or int8");
      }
      std::string zero = n.input(2);
      if (z) {  // a constant zero point: as a float one
        ASSIGN_OR_RETURN(const std::vector<double> zs, Numbers(*z));
        if (zs.size() != 1) {
          return Error(n, index, std::string("has a ") + (conv ? "per-channel " : "per-row ") + a_zero_name +
                                     " (not supported)");
        }
        added_.push_back(FloatTensor(base + "." + (conv ? "x" : "a") + "_zero", {}, zs));
        zero = base + "." + (conv ? "x" : "a") + "_zero";
      }
      r.nodes.push_back(Step("Sub", {a, zero}, base + (conv ? ".x" : ".a")));
      a = base + (conv ? ".x" : ".a");
    }
    onnx::NodeProto product = Step(conv ? "Conv" : "MatMul", {a, weights}, n.output(0));
    if (conv) {
      for (const onnx::AttributeProto& attr : n.attribute()) *product.add_attribute() = attr;
    }
    r.nodes.push_back(std::move(product));
    integer_outputs_.insert(n.output(0));
    return r;
  }

  // A DynamicQuantizeLinear's outputs, by the name of its quantized output.
  struct Dynamic {
    std::string source, scale, zero;
  };
  std::map<std::string, Dynamic> dynamic_;

  OnnxModel* model_;
  onnx::GraphProto* graph_;
  std::set<std::string> integer_outputs_;  // MatMulInteger outputs, now float32
  std::map<std::string, int> initializers_;
  std::map<std::string, std::vector<int>> consumers_;
  std::map<std::string, std::string> renamed_;
  std::vector<TensorProto> added_;
};

}  // namespace

absl::Status RewriteQdq(OnnxModel* model) {
  Rewriter rewriter(model);
  return rewriter.Run();
}

}  // namespace tuneforge::frontend

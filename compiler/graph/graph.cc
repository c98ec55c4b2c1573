// ONNX -> Graph: every operator's importer, constant folding and shape inference.
#include "compiler/graph/graph.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "compiler/support/status.h"

namespace tuneforge::graph {

const char* DTypeName(DType t) {
  switch (t) {
    case DType::kFloat32: return "float32";
    case DType::kInt64: return "int64";
    case DType::kBool: return "bool";
  }
  return "?";
}

int64_t Tensor::NumElements() const {
  // Saturating: a model's shapes are untrusted input, and a product past int64 must
  // read as "too large" to the checks that follow, not wrap.
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return -1;
    if (__builtin_mul_overflow(n, d, &n)) return std::numeric_limits<int64_t>::max();
  }
  return n;
}

int64_t Node::Int(const std::string& key, int64_t fallback) const {
  auto it = attrs.find(key);
  return it == attrs.end() || it->second.ints.empty() ? fallback : it->second.ints[0];
}

std::string Node::Text(const std::string& key, const std::string& fallback) const {
  auto it = attrs.find(key);
  return it == attrs.end() ? fallback : it->second.text;
}

float Node::Float(const std::string& key, float fallback) const {
  auto it = attrs.find(key);
  return it == attrs.end() || it->second.floats.empty() ? fallback : it->second.floats[0];
}

std::vector<int64_t> Node::Ints(const std::string& key, std::vector<int64_t> fallback) const {
  auto it = attrs.find(key);
  return it == attrs.end() ? fallback : it->second.ints;
}

int Graph::Find(const std::string& name) const {
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

namespace {

std::string ShapeText(const std::vector<int64_t>& s) { return "[" + absl::StrJoin(s, ", ") + "]"; }

// The `n` values of an ONNX tensor, from raw_data (little-endian) or its typed field.
template <typename T, typename Field>
absl::Status DecodeValues(const onnx::TensorProto& p, int64_t n, const char* type,
                          const Field& typed, std::vector<T>* out) {
  if (!p.raw_data().empty()) {
    if (n < 0 || p.raw_data().size() % sizeof(T) != 0 ||
        static_cast<uint64_t>(p.raw_data().size() / sizeof(T)) != static_cast<uint64_t>(n)) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", p.name(), "' has ",
                                                     p.raw_data().size(), " bytes for ", n, " ",
                                                     type, " elements"));
    }
    out->resize(static_cast<size_t>(n));
    std::memcpy(out->data(), p.raw_data().data(), p.raw_data().size());
  } else {
    out->assign(typed.begin(), typed.end());
  }
  if (static_cast<int64_t>(out->size()) != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", p.name(), "' has ", out->size(), " values for ", n, " elements"));
  }
  return absl::OkStatus();
}

// Decodes an ONNX tensor (raw_data or the typed fields) into a constant Tensor.
absl::StatusOr<Tensor> FromProto(const onnx::TensorProto& p) {
  Tensor t;
  t.name = p.name();
  t.constant = true;
  t.shape.assign(p.dims().begin(), p.dims().end());
  const int64_t n = t.NumElements();
  if (p.data_type() == onnx::TensorProto::FLOAT) {
    t.dtype = DType::kFloat32;
    RETURN_IF_ERROR(DecodeValues(p, n, "float32", p.float_data(), &t.f32));
  } else if (p.data_type() == onnx::TensorProto::INT64) {
    t.dtype = DType::kInt64;
    RETURN_IF_ERROR(DecodeValues(p, n, "int64", p.int64_data(), &t.i64));
  } else if (p.data_type() == onnx::TensorProto::INT32) {
    // Axes and counts some exporters write as int32 (CumSum's axis): widened to int64,
    // the one integer type the graph computes with (losslessly).
    t.dtype = DType::kInt64;
    std::vector<int32_t> values;
    RETURN_IF_ERROR(DecodeValues(p, n, "int32", p.int32_data(), &values));
    t.i64.assign(values.begin(), values.end());
  } else if (p.data_type() == onnx::TensorProto::BOOL) {
    // One byte per element in raw_data, one int32 per element in int32_data.
    t.dtype = DType::kBool;
    const int64_t count = p.raw_data().empty() ? p.int32_data_size() : static_cast<int64_t>(p.raw_data().size());
    if (count != n) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", p.name(), "' has ", count, " values for ", n, " bool elements"));
    }
    for (int64_t i = 0; i < n; ++i) {
      const bool b = p.raw_data().empty() ? p.int32_data(static_cast<int>(i)) != 0
                                          : p.raw_data()[static_cast<size_t>(i)] != 0;
      t.f32.push_back(b ? 1.0f : 0.0f);
    }
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", p.name(), "': only float32, int64, int32 (read as int64) and bool tensors are supported"));
  }
  return t;
}

// numpy broadcasting of two shapes, or an error.
absl::StatusOr<std::vector<int64_t>> Broadcast(const std::vector<int64_t>& a,
                                               const std::vector<int64_t>& b) {
  const size_t rank = std::max(a.size(), b.size());
  std::vector<int64_t> out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("shapes ", ShapeText(a), " and ", ShapeText(b), " do not broadcast"));
    }
    out[i] = std::max(da, db);
  }
  return out;
}

// Row-major strides of `shape` aligned to `rank` dims, 0 for broadcast dimensions.
std::vector<int64_t> BroadcastStrides(const std::vector<int64_t>& shape,
                                      const std::vector<int64_t>& out) {
  std::vector<int64_t> strides(out.size(), 0);
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    size_t o = i + (out.size() - shape.size());
    strides[o] = shape[i] == 1 ? 0 : s;
    s *= shape[i];
  }
  return strides;
}

int64_t NormalizeAxis(int64_t axis, int64_t rank) { return axis < 0 ? axis + rank : axis; }

// The importer: tensors by name, nodes appended as they are imported.
// Two-operand Einsum as exporters write it (attention's "bhid,bhjd->bhij", a linear
// layer's "bid,jd->bij"): each letter is a batch axis (both operands and the
// output), a contracted one (both operands, not the output), or a free axis of one
// operand (kept in the output). The operands are transposed to [batch, free,
// contracted] and [batch, contracted, free], viewed as [batch, M, K] and
// [batch, K, N], multiplied, and the product viewed and transposed to the output.
struct EinsumPlan {
  std::vector<int64_t> perm_a, perm_b;      // the operands' axes in matmul order
  std::vector<int64_t> a3, b3, product;     // [batch..., M, K], [batch..., K, N], [batch..., M, N]
  std::vector<int64_t> split;               // the product viewed as [batch..., free a..., free b...]
  std::vector<int64_t> perm_out;            // from `split`'s axes to the output's
  std::vector<int64_t> out_shape;
};

absl::StatusOr<EinsumPlan> PlanEinsum(std::string eq, const std::vector<int64_t>& sa, const std::vector<int64_t>& sb) {
  eq.erase(std::remove(eq.begin(), eq.end(), ' '), eq.end());
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("equation '", eq, "': ", why));
  };
  if (eq.find("...") != std::string::npos) return bad("ellipsis (...) is not supported");
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  const size_t comma = lhs.find(',');
  if (comma == std::string::npos || lhs.find(',', comma + 1) != std::string::npos) {
    return bad("only two operands are supported");
  }
  const std::string ta = lhs.substr(0, comma), tb = lhs.substr(comma + 1);
  std::string out;
  if (arrow != std::string::npos) {
    out = eq.substr(arrow + 2);
  } else {  // implicit: the letters that appear once, in alphabetical order
    for (char c = 'A'; c <= 'z'; ++c) {
      if (std::count(lhs.begin(), lhs.end(), c) == 1) out.push_back(c);
    }
  }
  for (const std::string* term : {&ta, &tb, static_cast<const std::string*>(&out)}) {
    for (char c : *term) {
      if (!std::isalpha(static_cast<unsigned char>(c))) return bad(absl::StrCat("'", std::string(1, c), "' is not a letter"));
      if (std::count(term->begin(), term->end(), c) > 1) {
        return bad(absl::StrCat("letter ", std::string(1, c), " repeats within a term (a diagonal): not supported"));
      }
    }
  }
  if (ta.size() != sa.size() || tb.size() != sb.size()) {
    return bad(absl::StrCat("the operands have ranks ", sa.size(), " and ", sb.size()));
  }
  std::map<char, int64_t> size;
  for (size_t i = 0; i < ta.size(); ++i) size[ta[i]] = sa[i];
  for (size_t i = 0; i < tb.size(); ++i) {
    if (size.count(tb[i]) && size[tb[i]] != sb[i]) {
      return bad(absl::StrCat("letter ", std::string(1, tb[i]), " has sizes ", size[tb[i]], " and ", sb[i]));
    }
    size[tb[i]] = sb[i];
  }
  std::string batch, free_a, free_b, contracted;
  for (char c : out) {
    const bool in_a = ta.find(c) != std::string::npos, in_b = tb.find(c) != std::string::npos;
    if (!in_a && !in_b) return bad(absl::StrCat("output letter ", std::string(1, c), " is in no operand"));
    (in_a && in_b ? batch : in_a ? free_a : free_b).push_back(c);
  }
  for (char c : ta) {
    if (out.find(c) != std::string::npos) continue;
    if (tb.find(c) == std::string::npos) {
      return bad(absl::StrCat("letter ", std::string(1, c), " is summed within one operand: not supported"));
    }
    contracted.push_back(c);
  }
  for (char c : tb) {
    if (out.find(c) == std::string::npos && ta.find(c) == std::string::npos) {
      return bad(absl::StrCat("letter ", std::string(1, c), " is summed within one operand: not supported"));
    }
  }
  EinsumPlan plan;
  auto prod = [&](const std::string& letters) {
    int64_t p = 1;
    for (char c : letters) p *= size[c];
    return p;
  };
  for (char c : batch + free_a + contracted) plan.perm_a.push_back(static_cast<int64_t>(ta.find(c)));
  for (char c : batch + contracted + free_b) plan.perm_b.push_back(static_cast<int64_t>(tb.find(c)));
  for (char c : batch) {
    plan.a3.push_back(size[c]);
    plan.split.push_back(size[c]);
  }
  plan.b3 = plan.a3;
  plan.product = plan.a3;
  plan.a3.insert(plan.a3.end(), {prod(free_a), prod(contracted)});
  plan.b3.insert(plan.b3.end(), {prod(contracted), prod(free_b)});
  plan.product.insert(plan.product.end(), {prod(free_a), prod(free_b)});
  const std::string split_letters = batch + free_a + free_b;
  for (char c : free_a + free_b) plan.split.push_back(size[c]);
  for (char c : out) {
    plan.perm_out.push_back(static_cast<int64_t>(split_letters.find(c)));
    plan.out_shape.push_back(size[c]);
  }
  return plan;
}

class Importer {
 public:
  explicit Importer(const frontend::OnnxModel& model) : model_(model) {}

  absl::StatusOr<Graph> Run() {
    const onnx::GraphProto& g = model_.proto.graph();
    graph_.opset = model_.opset;
    graph_.quantized_tensors = model_.quantized_tensors;
    graph_.quantized_constants = model_.quantized_constants;
    graph_.dynamic_matmuls = model_.dynamic_matmuls;
    for (const onnx::TensorProto& p : g.initializer()) {
      ASSIGN_OR_RETURN(Tensor t, FromProto(p));
      Add(std::move(t));
    }
    for (const onnx::ValueInfoProto& v : g.input()) {
      if (graph_.Find(v.name()) >= 0) continue;  // an initializer listed as input (IR < 4)
      Tensor t;
      t.name = v.name();
      t.dtype = v.type().tensor_type().elem_type() == onnx::TensorProto::INT64 ? DType::kInt64
                                                                               : DType::kFloat32;
      for (const auto& d : v.type().tensor_type().shape().dim()) t.shape.push_back(d.dim_value());
      // An empty input (a zero dimension) has no values: a constant with no data, so
      // that what is computed from it is known at import (ImportNode).
      t.constant = t.NumElements() == 0;
      graph_.inputs.push_back(Add(std::move(t)));
      if (T(graph_.inputs.back()).constant) empty_values_.insert(graph_.inputs.back());
    }
    for (int i = 0; i < g.node_size(); ++i) {
      absl::Status s = ImportNode(g.node(i), i);
      if (!s.ok()) {
        const onnx::NodeProto& n = g.node(i);
        return absl::InvalidArgumentError(
            absl::StrCat(model_.path, ": node '", n.name().empty() ? "(unnamed)" : n.name(),
                         "' (#", i, ", ", n.op_type(), "): ", s.message()));
      }
    }
    for (const onnx::ValueInfoProto& v : g.output()) {
      int id = graph_.Find(v.name());
      if (id < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(model_.path, ": graph output '", v.name(), "' is produced by no node"));
      }
      graph_.outputs.push_back(id);
    }
    LowerEinsums();
    SumsOfTwoAsAdds();
    FoldPadsIntoConvs();
    FoldBatchNorms();
    RemoveDeadNodes();
    return std::move(graph_);
  }

 private:
  int Add(Tensor t) {
    graph_.tensors.push_back(std::move(t));
    return static_cast<int>(graph_.tensors.size()) - 1;
  }
  Tensor& T(int id) { return graph_.tensors[static_cast<size_t>(id)]; }
  const Tensor& T(int id) const { return graph_.tensors[static_cast<size_t>(id)]; }

  // The empty graph inputs and node outputs (constants with no data). An empty
  // initializer is not one of them: exporters write those for an optional input
  // left out (Resize's roi), which the operators read as absent.
  std::set<int> empty_values_;

  absl::Status ImportNode(const onnx::NodeProto& p, int index) {
    if (p.op_type() == "BatchNormalization") {
      for (const onnx::AttributeProto& a : p.attribute()) {
        if (a.name() == "training_mode" && a.i() != 0) return ImportTrainingBatchNorm(p, index);
      }
    }
    pending_constant_.reset();
    split_outputs_ = p.output_size();
    Node node;
    node.name = p.name().empty() ? absl::StrCat(p.op_type(), "_", index) : p.name();
    node.op = p.op_type();
    for (const std::string& in : p.input()) {
      if (in.empty()) {
        node.inputs.push_back(-1);
        continue;
      }
      int id = graph_.Find(in);
      if (id < 0) return absl::InvalidArgumentError(absl::StrCat("input '", in, "' is not defined"));
      node.inputs.push_back(id);
    }
    for (const onnx::AttributeProto& a : p.attribute()) {
      Attribute attr;
      if (a.has_i()) attr.ints.push_back(a.i());
      attr.ints.insert(attr.ints.end(), a.ints().begin(), a.ints().end());
      if (a.has_f()) attr.floats.push_back(a.f());
      attr.floats.insert(attr.floats.end(), a.floats().begin(), a.floats().end());
      if (a.has_s()) attr.text = a.s();
      if (a.has_t()) {
        ASSIGN_OR_RETURN(Tensor value, FromProto(a.t()));
        pending_constant_ = std::move(value);
      }
      node.attrs[a.name()] = std::move(attr);
    }
    std::vector<Tensor> outs;
    ASSIGN_OR_RETURN(outs, Infer(node));
    if (static_cast<int>(outs.size()) < p.output_size()) {
      return absl::InvalidArgumentError(
          absl::StrCat(p.output_size(), " outputs given, ", outs.size(), " supported"));
    }
    // An empty output (a zero dimension) has no values to compute: it is a constant
    // with no data, whatever the inputs (a Slice past the end, a Split into parts of
    // size 0).
    for (Tensor& t : outs) {
      if (t.NumElements() == 0) t.constant = true;
    }
    bool all_constant = true;
    for (int i = 0; i < p.output_size(); ++i) {
      outs[static_cast<size_t>(i)].name = p.output(i);
      all_constant &= outs[static_cast<size_t>(i)].constant;
    }
    for (int i = 0; i < p.output_size(); ++i) {
      if (p.output(i).empty()) {
        // Node::outputs holds the outputs in order, so a kernel knows output k as
        // outputs[k]: an optional output skipped before a used one would shift them.
        for (int later = i + 1; later < p.output_size(); ++later) {
          if (!p.output(later).empty()) {
            return absl::InvalidArgumentError(absl::StrCat(
                "output ", i, " is left out while output ", later, " ('", p.output(later),
                "') is used: not supported"));
          }
        }
        continue;
      }
      if (graph_.Find(p.output(i)) >= 0) {
        return absl::InvalidArgumentError(absl::StrCat("output '", p.output(i), "' is defined twice"));
      }
      const bool empty = outs[static_cast<size_t>(i)].NumElements() == 0;
      node.outputs.push_back(Add(std::move(outs[static_cast<size_t>(i)])));
      if (empty) empty_values_.insert(node.outputs.back());
    }
    // A node whose outputs are all known now is folded away: its outputs are constants.
    if (!all_constant) {
      // Kernels are not written for empty operands; a node whose result depends on
      // run-time values and reads an empty tensor (a Concat with an empty part) is
      // refused rather than run.
      for (size_t i = 0; i < node.inputs.size(); ++i) {
        if (node.inputs[i] >= 0 && empty_values_.count(node.inputs[i])) {
          return absl::UnimplementedError(absl::StrCat(
              "input ", i, " ('", T(node.inputs[i]).name, "') is empty (shape ", ShapeText(T(node.inputs[i]).shape),
              ") and the result depends on run-time values: not supported (an empty tensor is "
              "supported where the result is known at import: a reduction over it, an empty output)"));
        }
      }
      for (size_t i = 0; i < node.outputs.size(); ++i) {
        if (T(node.outputs[i]).NumElements() == 0) {
          return absl::UnimplementedError(absl::StrCat(
              "output ", i, " ('", T(node.outputs[i]).name, "') is empty (shape ", ShapeText(T(node.outputs[i]).shape),
              ") while another output is computed at run time: not supported"));
        }
      }
      RETURN_IF_ERROR(CheckRunTimeInts(node));
      graph_.nodes.push_back(std::move(node));
    }
    return absl::OkStatus();
  }

  // BatchNormalization with training_mode=1 (opset 14+): normalized by the batch's
  // own statistics, as an exporter leaves a model saved in training mode. Imported
  // as the nodes of its definition (the ONNX reference's formula):
  //   mean = ReduceMean(x) and var = ReduceMean((x - mean)^2) over every axis but 1,
  //   Y = (x - mean) / sqrt(var + epsilon) * scale + B,
  //   running_mean = input_mean * momentum + mean * (1 - momentum), running_var alike.
  absl::Status ImportTrainingBatchNorm(const onnx::NodeProto& p, int index) {
    if (p.input_size() != 5) return absl::InvalidArgumentError("5 inputs needed");
    if (p.output_size() != 1 && p.output_size() != 3) {
      return absl::InvalidArgumentError(absl::StrCat(
          "training_mode=1 with ", p.output_size(), " outputs: 1 (Y) or 3 (Y, running_mean, running_var) supported"));
    }
    float epsilon = 1e-5f, momentum = 0.9f;
    for (const onnx::AttributeProto& a : p.attribute()) {
      if (a.name() == "epsilon") {
        epsilon = a.f();
      } else if (a.name() == "momentum") {
        momentum = a.f();
      } else if (a.name() != "training_mode") {
        return absl::InvalidArgumentError(absl::StrCat("attribute ", a.name(), " is not supported"));
      }
    }
    std::vector<int> ids;
    for (const std::string& in : p.input()) {
      const int id = in.empty() ? -1 : graph_.Find(in);
      if (id < 0) return absl::InvalidArgumentError(absl::StrCat("input '", in, "' is not defined"));
      if (T(id).dtype != DType::kFloat32) return absl::InvalidArgumentError("float32 inputs only");
      ids.push_back(id);
    }
    const std::vector<int64_t> x = T(ids[0]).shape;
    if (x.size() < 2) return absl::InvalidArgumentError("input must be N x C x ...");
    for (size_t i = 1; i < 5; ++i) {
      if (T(ids[i]).shape != std::vector<int64_t>{x[1]}) {
        return absl::InvalidArgumentError(
            absl::StrCat("input ", i, " must have shape [", x[1], "], got ", ShapeText(T(ids[i]).shape)));
      }
    }
    const std::string stem = absl::StrCat(p.output(0), "/batch_norm_training/");
    int step = 0;
    auto node = [&](const std::string& op, std::vector<std::string> inputs, std::string output) {
      onnx::NodeProto n;
      n.set_name(absl::StrCat(stem, step++));
      n.set_op_type(op);
      for (std::string& in : inputs) n.add_input(std::move(in));
      n.add_output(output.empty() ? absl::StrCat(stem, "t", step) : std::move(output));
      return n;
    };
    auto constant = [&](std::vector<float> floats, std::vector<int64_t> ints, std::vector<int64_t> dims) {
      onnx::NodeProto n = node("Constant", {}, "");
      onnx::AttributeProto* a = n.add_attribute();
      a->set_name("value");
      a->set_type(onnx::AttributeProto::TENSOR);
      onnx::TensorProto* t = a->mutable_t();
      for (int64_t d : dims) t->add_dims(d);
      t->set_data_type(ints.empty() ? onnx::TensorProto::FLOAT : onnx::TensorProto::INT64);
      for (float f : floats) t->add_float_data(f);
      for (int64_t i : ints) t->add_int64_data(i);
      return n;
    };
    auto mean_over_batch = [&](const std::string& in) {
      onnx::NodeProto n = node("ReduceMean", {in}, "");
      onnx::AttributeProto* a = n.add_attribute();
      a->set_name("axes");
      a->set_type(onnx::AttributeProto::INTS);
      for (size_t d = 0; d < x.size(); ++d) {
        if (d != 1) a->add_ints(static_cast<int64_t>(d));
      }
      return n;
    };
    std::vector<onnx::NodeProto> nodes;
    auto emit = [&](onnx::NodeProto n) {
      nodes.push_back(std::move(n));
      return nodes.back().output(0);
    };
    std::vector<int64_t> per_channel(x.size() - 1, 1);  // [C, 1, ...]: broadcasts over N x C x ...
    per_channel[0] = x[1];
    const std::string x_name = p.input(0);
    const std::string mean = emit(mean_over_batch(x_name));
    const std::string centred = emit(node("Sub", {x_name, mean}, ""));
    const std::string var = emit(mean_over_batch(emit(node("Mul", {centred, centred}, ""))));
    const std::string eps = emit(constant({epsilon}, {}, {}));
    const std::string inv_std = emit(node("Sqrt", {emit(node("Add", {var, eps}, ""))}, ""));
    const std::string normalized = emit(node("Div", {centred, inv_std}, ""));
    const std::string shape = emit(constant({}, per_channel, {static_cast<int64_t>(per_channel.size())}));
    const std::string scale = emit(node("Reshape", {p.input(1), shape}, ""));
    const std::string bias = emit(node("Reshape", {p.input(2), shape}, ""));
    emit(node("Add", {emit(node("Mul", {normalized, scale}, "")), bias}, p.output(0)));
    if (p.output_size() == 3) {
      const std::string channels = emit(constant({}, {x[1]}, {1}));
      const std::string keep = emit(constant({momentum}, {}, {}));
      const std::string take = emit(constant({1.0f - momentum}, {}, {}));
      for (int k = 0; k < 2; ++k) {
        if (p.output(1 + k).empty()) continue;
        const std::string batch = emit(node("Reshape", {k == 0 ? mean : var, channels}, ""));
        const std::string old_part = emit(node("Mul", {p.input(3 + k), keep}, ""));
        emit(node("Add", {old_part, emit(node("Mul", {batch, take}, ""))}, p.output(1 + k)));
      }
    }
    for (const onnx::NodeProto& n : nodes) {
      absl::Status s = ImportNode(n, index);
      if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat("in its expansion (", n.op_type(), "): ", s.message()));
    }
    return absl::OkStatus();
  }

  // int64 tensors computed at run time (token ids, attention masks and what is
  // computed from them) live in float32 buffers holding their whole-number values,
  // exact up to 2^24 (the executor checks the inputs). Only operators that are exact
  // on such values take them: data movement, Gather, Cast, and the elementwise Add,
  // Sub, Mul, Neg, Abs, Sign, Max, Min, comparisons and Where; Div and Mod would round
  // where integer division truncates, and the rest are float operators.
  absl::Status CheckRunTimeInts(const Node& n) const {
    static const std::set<std::string> exact = {
        "Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Concat", "Split", "Slice",
        "Expand",   "Tile",    "Pad",     "Gather",  "GatherElements", "ScatterND", "Cast",      "CastLike",  "Add",    "Sub",   "Mul", "Trilu",
        "Neg",      "Abs",     "Sign",    "Max",     "Min",       "Where",     "Equal",  "Less",  "Greater",
        "LessOrEqual", "GreaterOrEqual"};
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      if (!Has(n, i) || In(n, i).constant || In(n, i).dtype != DType::kInt64 || exact.count(n.op)) continue;
      return absl::InvalidArgumentError(absl::StrCat(
          "input ", i, " '", In(n, i).name, "' is int64 computed at run time; ", n.op,
          " takes int64 only as a constant (run-time int64 values go through data movement, Gather, Cast, "
          "Add, Sub, Mul, Neg, Abs, Sign, Max, Min, comparisons and Where)"));
    }
    return absl::OkStatus();
  }

  const Tensor& In(const Node& n, size_t i) const {
    return graph_.tensors[static_cast<size_t>(n.inputs[i])];
  }
  bool Has(const Node& n, size_t i) const { return i < n.inputs.size() && n.inputs[i] >= 0; }
  // The first `count` inputs (all when 0) must be float32 tensors.
  absl::Status NeedFloat(const Node& n, size_t count = 0) const {
    for (size_t i = 0; i < (count == 0 ? n.inputs.size() : std::min(count, n.inputs.size())); ++i) {
      if (Has(n, i) && In(n, i).dtype != DType::kFloat32) {
        return absl::InvalidArgumentError(absl::StrCat("input ", i, " '", In(n, i).name, "' is ",
                                                       DTypeName(In(n, i).dtype), "; only float32 is supported"));
      }
    }
    return absl::OkStatus();
  }
  // Inputs first..end-1 hold one value per channel of input 0 (its dimension 1).
  absl::Status NeedPerChannel(const Node& n, size_t first, size_t end) const {
    const int64_t channels = In(n, 0).shape[1];
    for (size_t i = first; i < end; ++i) {
      if (In(n, i).shape != std::vector<int64_t>{channels}) {
        return absl::InvalidArgumentError(absl::StrCat("input ", i, " must have shape [", channels, "]"));
      }
    }
    return absl::OkStatus();
  }
  static absl::Status Need(const Node& n, size_t lo, size_t hi) {
    if (n.inputs.size() < lo || n.inputs.size() > hi) {
      return absl::InvalidArgumentError(
          absl::StrCat("takes ", lo, lo == hi ? "" : absl::StrCat("..", hi), " inputs, got ",
                       n.inputs.size()));
    }
    for (size_t i = 0; i < lo; ++i) {
      if (n.inputs[i] < 0) return absl::InvalidArgumentError(absl::StrCat("input ", i, " is required"));
    }
    return absl::OkStatus();
  }
  // A constant int64 input (axes, shapes, indices): exported graphs compute them from
  // static shapes, so they are constants after folding.
  absl::StatusOr<std::vector<int64_t>> ConstInts(const Node& n, size_t i, const char* what) const {
    const Tensor& t = In(n, i);
    if (!t.constant || t.dtype != DType::kInt64) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " '", t.name, "' must be a constant int64 tensor"));
    }
    return t.i64;
  }
  static Tensor Like(const Tensor& t, std::vector<int64_t> shape) {
    Tensor out;
    out.dtype = t.dtype;
    out.shape = std::move(shape);
    return out;
  }

  absl::StatusOr<std::vector<Tensor>> Infer(Node& n) {
    const std::string& op = n.op;
    if (op == "Constant") return InferConstant(n);
    if (op == "Identity") {
      RETURN_IF_ERROR(Need(n, 1, 1));
      Tensor t = In(n, 0);
      return std::vector<Tensor>{std::move(t)};
    }
    if (op == "Shape") {
      RETURN_IF_ERROR(Need(n, 1, 1));
      const std::vector<int64_t>& s = In(n, 0).shape;
      const int64_t rank = static_cast<int64_t>(s.size());
      int64_t start = std::clamp<int64_t>(NormalizeAxis(n.Int("start", 0), rank), 0, rank);
      int64_t end = std::clamp<int64_t>(NormalizeAxis(n.Int("end", rank), rank), 0, rank);
      Tensor t;
      t.dtype = DType::kInt64;
      t.constant = true;
      for (int64_t i = start; i < end; ++i) t.i64.push_back(s[static_cast<size_t>(i)]);
      t.shape = {static_cast<int64_t>(t.i64.size())};
      return std::vector<Tensor>{std::move(t)};
    }
    if (IsUnaryElementwiseOp(op) && Has(n, 0) && In(n, 0).constant && In(n, 0).dtype == DType::kInt64 &&
        (op == "Neg" || op == "Abs" || op == "Sign")) {  // shape arithmetic
      RETURN_IF_ERROR(Need(n, 1, 1));
      Tensor out = In(n, 0);
      for (int64_t& v : out.i64) {
        if (v == std::numeric_limits<int64_t>::min()) return absl::InvalidArgumentError("int64 overflow");
        v = op == "Neg" ? -v : op == "Abs" ? std::abs(v) : (v > 0) - (v < 0);
      }
      return std::vector<Tensor>{std::move(out)};
    }
    if (IsComparisonOrLogicOp(op)) return InferComparisonOrLogic(n);
    if (op == "Where") return InferWhere(n);
    if (IsUnaryElementwiseOp(op)) {
      RETURN_IF_ERROR(Need(n, 1, 1));
      if (op != "Neg" && op != "Abs" && op != "Sign") RETURN_IF_ERROR(NeedFloat(n));  // exact on whole numbers
      return std::vector<Tensor>{Like(In(n, 0), In(n, 0).shape)};
    }
    if (op == "PRelu") {  // the slope broadcasts to X
      RETURN_IF_ERROR(Need(n, 2, 2));
      RETURN_IF_ERROR(NeedFloat(n));
      ASSIGN_OR_RETURN(std::vector<int64_t> shape, Broadcast(In(n, 1).shape, In(n, 0).shape));
      if (shape != In(n, 0).shape) {
        return absl::InvalidArgumentError(absl::StrCat("slope ", ShapeText(In(n, 1).shape),
                                                       " does not broadcast to X ", ShapeText(In(n, 0).shape)));
      }
      return std::vector<Tensor>{Like(In(n, 0), shape)};
    }
    if (op == "Sum" || op == "Max" || op == "Min" || op == "Mean") return InferSum(n);
    if (op == "Dropout") {  // inference: the identity
      RETURN_IF_ERROR(Need(n, 1, 3));
      RETURN_IF_ERROR(NeedFloat(n, 1));
      if (Has(n, 2)) {
        const Tensor& training = In(n, 2);
        if (!training.constant || training.NumElements() != 1 ||
            (training.dtype == DType::kFloat32 ? training.f32[0] != 0.0f : training.i64[0] != 0)) {
          return absl::InvalidArgumentError("training_mode must be a constant false (inference only)");
        }
      }
      return std::vector<Tensor>{Like(In(n, 0), In(n, 0).shape)};
    }
    if (op == "Clip") {
      RETURN_IF_ERROR(Need(n, 1, 3));
      RETURN_IF_ERROR(NeedFloat(n));
      for (size_t i = 1; i < n.inputs.size(); ++i) {
        if (Has(n, i) && In(n, i).NumElements() != 1) {
          return absl::InvalidArgumentError("min and max must be scalars");
        }
      }
      return std::vector<Tensor>{Like(In(n, 0), In(n, 0).shape)};
    }
    if (op == "Cast" || op == "CastLike") return InferCast(n);
    if (op == "Size") {
      RETURN_IF_ERROR(Need(n, 1, 1));
      Tensor t;
      t.dtype = DType::kInt64;
      t.constant = true;
      t.i64 = {In(n, 0).NumElements()};
      return std::vector<Tensor>{std::move(t)};
    }
    if (op == "ConstantOfShape") return InferConstantOfShape(n);
    if (op == "Mod") return InferMod(n);
    if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div" || op == "Pow") {
      RETURN_IF_ERROR(Need(n, 2, 2));
      ASSIGN_OR_RETURN(std::vector<int64_t> shape, Broadcast(In(n, 0).shape, In(n, 1).shape));
      if (In(n, 0).dtype != In(n, 1).dtype && op != "Pow") {
        return absl::InvalidArgumentError("inputs of different types");
      }
      Tensor out = Like(In(n, 0), shape);
      if (In(n, 0).constant && In(n, 1).constant) FoldBinary(op, In(n, 0), In(n, 1), &out);
      return std::vector<Tensor>{std::move(out)};
    }
    if (op == "MatMul") return InferMatMul(n);
    if (op == "Gemm") return InferGemm(n);
    if (op == "Conv") return InferConv(n);
    if (op == "ConvTranspose") return InferConvTranspose(n);
    if (op == "MaxPool" || op == "AveragePool" || op == "LpPool") return InferPool(n);
    if (op == "LRN") {
      RETURN_IF_ERROR(Need(n, 1, 1));
      RETURN_IF_ERROR(NeedFloat(n));
      if (In(n, 0).shape.size() < 3) return absl::InvalidArgumentError("input must be N x C x spatial");
      if (n.Int("size", 0) < 1) return absl::InvalidArgumentError("attribute size must be >= 1");
      return std::vector<Tensor>{Like(In(n, 0), In(n, 0).shape)};
    }
    if (op == "InstanceNormalization") {
      RETURN_IF_ERROR(Need(n, 3, 3));
      RETURN_IF_ERROR(NeedFloat(n));
      const auto& x = In(n, 0).shape;
      if (x.size() < 3) return absl::InvalidArgumentError("input must be N x C x spatial");
      RETURN_IF_ERROR(NeedPerChannel(n, 1, 3));
      return std::vector<Tensor>{Like(In(n, 0), x)};
    }
    if (op == "GroupNormalization") return InferGroupNormalization(n);
    if (op == "GlobalAveragePool" || op == "GlobalMaxPool") {
      RETURN_IF_ERROR(Need(n, 1, 1));
      std::vector<int64_t> s = In(n, 0).shape;
      if (s.size() < 3) return absl::InvalidArgumentError("input must be N x C x spatial");
      for (size_t i = 2; i < s.size(); ++i) s[i] = 1;
      return std::vector<Tensor>{Like(In(n, 0), s)};
    }
    if (op == "BatchNormalization") {
      RETURN_IF_ERROR(Need(n, 5, 5));  // training_mode=1 is imported by ImportTrainingBatchNorm
      if (n.Int("spatial", 1) != 1) {
        return absl::InvalidArgumentError("attribute spatial=0 (statistics per element, opset < 9) is not supported");
      }
      const auto& x = In(n, 0).shape;
      if (x.size() < 2) return absl::InvalidArgumentError("input must be N x C x ...");
      RETURN_IF_ERROR(NeedPerChannel(n, 1, 5));
      return std::vector<Tensor>{Like(In(n, 0), x)};
    }
    if (op == "Flatten") {
      RETURN_IF_ERROR(Need(n, 1, 1));
      const auto& s = In(n, 0).shape;
      const int64_t rank = static_cast<int64_t>(s.size());
      const int64_t axis = NormalizeAxis(n.Int("axis", 1), rank);
      if (axis < 0 || axis > rank) return absl::InvalidArgumentError("attribute axis out of range");
      int64_t outer = 1, inner = 1;
      for (int64_t i = 0; i < rank; ++i) (i < axis ? outer : inner) *= s[static_cast<size_t>(i)];
      return Reshaped(In(n, 0), {outer, inner});
    }
    if (op == "Reshape") return InferReshape(n);
    if (op == "Squeeze" || op == "Unsqueeze") return InferSqueeze(n);
    if (op == "Resize" || op == "Upsample") return InferResize(n);
    if (op == "Range") return InferRange(n);
    if (op == "OneHot") return InferOneHot(n);
    if (op == "MeanVarianceNormalization") return InferMeanVarianceNormalization(n);
    if (op == "GridSample") return InferGridSample(n);
    if (op == "DepthToSpace" || op == "SpaceToDepth") return InferDepthToSpace(n);
    if (op == "Transpose") return InferTranspose(n);
    if (op == "Pad") return InferPad(n);
    if (op == "Expand") return InferExpand(n);
    if (op == "Tile") return InferTile(n);
    if (op == "Trilu") return InferTrilu(n);
    if (op == "CumSum") return InferCumSum(n);
    if (op == "Einsum") {
      RETURN_IF_ERROR(Need(n, 2, 2));
      RETURN_IF_ERROR(NeedFloat(n));
      ASSIGN_OR_RETURN(EinsumPlan plan, PlanEinsum(n.Text("equation", ""), In(n, 0).shape, In(n, 1).shape));
      return std::vector<Tensor>{Like(In(n, 0), plan.out_shape)};
    }
    if (op == "DeformConv") return InferDeformConv(n);
    if (op == "Det") {  // the determinant of each square matrix in the last two axes
      RETURN_IF_ERROR(Need(n, 1, 1));
      RETURN_IF_ERROR(NeedFloat(n));
      const std::vector<int64_t>& s = In(n, 0).shape;
      if (s.size() < 2 || s[s.size() - 1] != s[s.size() - 2]) {
        return absl::InvalidArgumentError(
            absl::StrCat("input of shape ", ShapeText(s), " is not a batch of square matrices [..., M, M]"));
      }
      if (s.back() > kMaxDetSize) {
        return absl::UnimplementedError(
            absl::StrCat("a determinant of a ", s.back(), " x ", s.back(), " matrix (at most ", kMaxDetSize, ")"));
      }
      return std::vector<Tensor>{Like(In(n, 0), std::vector<int64_t>(s.begin(), s.end() - 2))};
    }
    if (op == "DFT") return InferDFT(n);
    if (op == "TopK") return InferTopK(n);
    if (op == "ScatterND") return InferScatterND(n);
    if (op == "GatherElements") return InferGatherElements(n);
    if (op == "ArgMax" || op == "ArgMin") return InferArgMax(n);
    if (op == "LpNormalization") {
      RETURN_IF_ERROR(Need(n, 1, 1));
      RETURN_IF_ERROR(NeedFloat(n));
      const int64_t rank = static_cast<int64_t>(In(n, 0).shape.size());
      const int64_t axis = NormalizeAxis(n.Int("axis", -1), rank);
      if (axis < 0 || axis >= rank) return absl::InvalidArgumentError("attribute axis out of range");
      if (n.Int("p", 2) != 1 && n.Int("p", 2) != 2) return absl::InvalidArgumentError("attribute p must be 1 or 2");
      n.attrs["tf_axis"].ints = {axis};
      return std::vector<Tensor>{Like(In(n, 0), In(n, 0).shape)};
    }
    if (op == "Concat") return InferConcat(n);
    if (op == "Gather") return InferGather(n);
    if (op == "Slice") return InferSlice(n);
    if (op == "Split") return InferSplit(n);
    if (op == "Softmax" || op == "LogSoftmax" || op == "Hardmax") {
      RETURN_IF_ERROR(Need(n, 1, 1));
      RETURN_IF_ERROR(NeedFloat(n));
      const int64_t rank = static_cast<int64_t>(In(n, 0).shape.size());
      const int64_t axis = NormalizeAxis(n.Int("axis", model_.opset >= 13 ? -1 : 1), rank);
      if (axis < 0 || axis >= rank) return absl::InvalidArgumentError("attribute axis out of range");
      return std::vector<Tensor>{Like(In(n, 0), In(n, 0).shape)};
    }
    if (op == "LayerNormalization") return InferLayerNormalization(n);
    if (IsReduceOp(op)) {
      RETURN_IF_ERROR(Need(n, 1, 2));
      RETURN_IF_ERROR(NeedFloat(n, 1));
      std::vector<int64_t> axes = n.Ints("axes");
      if (Has(n, 1)) {
        ASSIGN_OR_RETURN(axes, ConstInts(n, 1, "axes"));
      }
      const auto& s = In(n, 0).shape;
      const int64_t rank = static_cast<int64_t>(s.size());
      std::set<int64_t> reduce;
      for (int64_t a : axes) {
        int64_t axis = NormalizeAxis(a, rank);
        if (axis < 0 || axis >= rank) return absl::InvalidArgumentError("axes out of range");
        reduce.insert(axis);
      }
      if (axes.empty() && n.Int("noop_with_empty_axes", 0) != 0) {  // the input, unchanged
        n.op = "Identity";
        n.inputs.resize(1);
        return Reshaped(In(n, 0), s);
      }
      if (axes.empty()) {
        for (int64_t i = 0; i < rank; ++i) reduce.insert(i);
      }
      const bool keep = n.Int("keepdims", 1) != 0;
      std::vector<int64_t> out;
      for (int64_t i = 0; i < rank; ++i) {
        if (!reduce.count(i)) {
          out.push_back(s[static_cast<size_t>(i)]);
        } else if (keep) {
          out.push_back(1);
        }
      }
      Tensor result = Like(In(n, 0), out);
      if (In(n, 0).NumElements() == 0 && result.NumElements() > 0) {
        // A reduction over an empty set: each result is the reduction's identity, as
        // the ONNX operators define it (opset 18): 0 for the sums, 1 for the product,
        // -inf for the max and the logs of a sum, +inf for the min. The mean of
        // nothing is 0 / 0: onnxruntime answers 0, the ONNX reference NaN.
        if (op == "ReduceMean") {
          return absl::UnimplementedError(absl::StrCat(
              "ReduceMean over an empty axis (input shape ", ShapeText(s),
              ") is 0 / 0, which onnxruntime and the ONNX reference answer differently: not supported"));
        }
        const float inf = std::numeric_limits<float>::infinity();
        float identity = 0.0f;
        if (op == "ReduceProd") identity = 1.0f;
        if (op == "ReduceMax" || op == "ReduceLogSum" || op == "ReduceLogSumExp") identity = -inf;
        if (op == "ReduceMin") identity = inf;
        result.constant = true;
        result.f32.assign(static_cast<size_t>(result.NumElements()), identity);
      }
      return std::vector<Tensor>{std::move(result)};
    }
    return absl::InvalidArgumentError("operator has no shape inference");  // CheckSupported lists all
  }

  absl::StatusOr<std::vector<Tensor>> InferConstant(Node& n) {
    if (pending_constant_.has_value()) {
      Tensor t = std::move(*pending_constant_);
      pending_constant_.reset();
      return std::vector<Tensor>{std::move(t)};
    }
    auto it = n.attrs.find("value_float");
    auto its = n.attrs.find("value_floats");
    auto iti = n.attrs.find("value_int");
    auto itis = n.attrs.find("value_ints");
    Tensor t;
    t.constant = true;
    if (it != n.attrs.end() || its != n.attrs.end()) {
      t.f32 = (it != n.attrs.end() ? it : its)->second.floats;
      if (its != n.attrs.end()) t.shape = {static_cast<int64_t>(t.f32.size())};
    } else if (iti != n.attrs.end() || itis != n.attrs.end()) {
      t.dtype = DType::kInt64;
      t.i64 = (iti != n.attrs.end() ? iti : itis)->second.ints;
      if (itis != n.attrs.end()) t.shape = {static_cast<int64_t>(t.i64.size())};
    } else {
      return absl::InvalidArgumentError(
          "only the value, value_float(s) and value_int(s) attributes are supported");
    }
    return std::vector<Tensor>{std::move(t)};
  }

  // Sum, Max, Min, Mean.
  absl::StatusOr<std::vector<Tensor>> InferSum(Node& n) {
    const std::string& op = n.op;
    if (n.inputs.empty()) return absl::InvalidArgumentError("takes 1 or more inputs, got 0");
    RETURN_IF_ERROR(Need(n, n.inputs.size(), n.inputs.size()));
    const bool ints = In(n, 0).dtype == DType::kInt64 && (op == "Max" || op == "Min");
    bool constant = true;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      if (ints && In(n, i).dtype != DType::kInt64) return absl::InvalidArgumentError("inputs of different types");
      constant &= In(n, i).constant;
    }
    if (!ints) RETURN_IF_ERROR(NeedFloat(n));
    std::vector<int64_t> shape = In(n, 0).shape;
    for (size_t i = 1; i < n.inputs.size(); ++i) {
      ASSIGN_OR_RETURN(shape, Broadcast(shape, In(n, i).shape));
    }
    Tensor out = Like(In(n, 0), shape);
    if (ints && constant) {  // shape arithmetic
      std::vector<const Tensor*> ins;
      for (size_t i = 0; i < n.inputs.size(); ++i) ins.push_back(&In(n, i));
      FoldElementwise(ins, &out, [&](const std::vector<size_t>& at) {
        int64_t v = ins[0]->i64[at[0]];
        for (size_t i = 1; i < ins.size(); ++i) {
          v = op == "Max" ? std::max(v, ins[i]->i64[at[i]]) : std::min(v, ins[i]->i64[at[i]]);
        }
        out.i64.push_back(v);
      });
    }
    return std::vector<Tensor>{std::move(out)};
  }

  absl::StatusOr<std::vector<Tensor>> InferConstantOfShape(Node& n) {
    RETURN_IF_ERROR(Need(n, 1, 1));
    ASSIGN_OR_RETURN(std::vector<int64_t> shape, ConstInts(n, 0, "shape"));
    Tensor t;
    t.constant = true;
    t.shape = shape;
    for (int64_t d : shape) {
      if (d < 0) return absl::InvalidArgumentError("shape has a negative dimension");
    }
    if (pending_constant_.has_value()) {  // the `value` attribute: one element
      if (pending_constant_->NumElements() != 1) {
        return absl::InvalidArgumentError("attribute value must have one element");
      }
      t.dtype = pending_constant_->dtype;
    }
    const int64_t count = t.NumElements();
    if (count > (int64_t{1} << 28)) return absl::InvalidArgumentError("the constant is too large to fold");
    if (t.dtype == DType::kFloat32) {
      t.f32.assign(static_cast<size_t>(count), pending_constant_ ? pending_constant_->f32[0] : 0.0f);
    } else {
      t.i64.assign(static_cast<size_t>(count), pending_constant_->i64[0]);
    }
    pending_constant_.reset();
    return std::vector<Tensor>{std::move(t)};
  }

  absl::StatusOr<std::vector<Tensor>> InferMod(Node& n) {
    RETURN_IF_ERROR(Need(n, 2, 2));
    const bool fmod = n.Int("fmod", 0) != 0;
    if (In(n, 0).dtype != In(n, 1).dtype) return absl::InvalidArgumentError("inputs of different types");
    if (In(n, 0).dtype == DType::kFloat32 && !fmod && model_.opset < 28) {
      return absl::InvalidArgumentError("float Mod needs attribute fmod=1 before opset 28");
    }
    ASSIGN_OR_RETURN(std::vector<int64_t> shape, Broadcast(In(n, 0).shape, In(n, 1).shape));
    Tensor out = Like(In(n, 0), shape);
    if (In(n, 0).constant && In(n, 1).constant) {
      const Tensor& a = In(n, 0);
      const Tensor& b = In(n, 1);
      bool zero = false;
      FoldElementwise({&a, &b}, &out, [&](const std::vector<size_t>& at) {
        if (out.dtype == DType::kFloat32) {
          float r = std::fmod(a.f32[at[0]], b.f32[at[1]]);
          if (!fmod && r != 0 && ((r < 0) != (b.f32[at[1]] < 0))) r += b.f32[at[1]];
          out.f32.push_back(r);
          return;
        }
        const int64_t x = a.i64[at[0]], y = b.i64[at[1]];
        zero |= y == 0;
        int64_t r = y == 0 ? 0 : x % y;
        if (!fmod && r != 0 && ((r < 0) != (y < 0))) r += y;  // the divisor's sign, as Python's %
        out.i64.push_back(r);
      });
      if (zero) return absl::InvalidArgumentError("integer Mod by zero");
    } else if (In(n, 0).dtype != DType::kFloat32) {
      return absl::InvalidArgumentError("integer Mod is only folded (both inputs constant)");
    }
    return std::vector<Tensor>{std::move(out)};
  }

  absl::StatusOr<std::vector<Tensor>> InferMatMul(Node& n) {
    RETURN_IF_ERROR(Need(n, 2, 2));
    std::vector<int64_t> a = In(n, 0).shape, b = In(n, 1).shape;
    if (a.empty() || b.empty()) return absl::InvalidArgumentError("scalar operands");
    const bool a1 = a.size() == 1, b1 = b.size() == 1;
    if (a1) a.insert(a.begin(), 1);
    if (b1) b.push_back(1);
    if (a.back() != b[b.size() - 2]) {
      return absl::InvalidArgumentError(absl::StrCat("inner dimensions differ: ", ShapeText(In(n, 0).shape),
                                                     " x ", ShapeText(In(n, 1).shape)));
    }
    ASSIGN_OR_RETURN(std::vector<int64_t> batch,
                     Broadcast(std::vector<int64_t>(a.begin(), a.end() - 2),
                               std::vector<int64_t>(b.begin(), b.end() - 2)));
    if (!a1) batch.push_back(a[a.size() - 2]);
    if (!b1) batch.push_back(b.back());
    return std::vector<Tensor>{Like(In(n, 0), batch)};
  }

  absl::StatusOr<std::vector<Tensor>> InferGemm(Node& n) {
    RETURN_IF_ERROR(Need(n, 2, 3));
    const auto& a = In(n, 0).shape;
    const auto& b = In(n, 1).shape;
    if (a.size() != 2 || b.size() != 2) return absl::InvalidArgumentError("A and B must be 2-D");
    const bool ta = n.Int("transA", 0) != 0, tb = n.Int("transB", 0) != 0;
    int64_t m = ta ? a[1] : a[0], k = ta ? a[0] : a[1];
    int64_t kb = tb ? b[1] : b[0], nn = tb ? b[0] : b[1];
    if (k != kb) {
      return absl::InvalidArgumentError(absl::StrCat("inner dimensions differ: A ", ShapeText(a),
                                                     " (transA ", ta, "), B ", ShapeText(b),
                                                     " (transB ", tb, ")"));
    }
    if (Has(n, 2)) {
      ASSIGN_OR_RETURN(std::vector<int64_t> c, Broadcast(In(n, 2).shape, {m, nn}));
      if (c != std::vector<int64_t>{m, nn}) {
        return absl::InvalidArgumentError("C does not broadcast to the output");
      }
    }
    return std::vector<Tensor>{Like(In(n, 0), {m, nn})};
  }

  // scale and bias per group before opset 21, per channel since
  absl::StatusOr<std::vector<Tensor>> InferGroupNormalization(Node& n) {
    RETURN_IF_ERROR(Need(n, 3, 3));
    RETURN_IF_ERROR(NeedFloat(n));
    const auto& x = In(n, 0).shape;
    if (x.size() < 3) return absl::InvalidArgumentError("input must be N x C x spatial");
    const int64_t groups = n.Int("num_groups", 0);
    if (groups < 1 || x[1] % groups != 0) {
      return absl::InvalidArgumentError(absl::StrCat("attribute num_groups ", groups, " does not divide the ",
                                                     x[1], " channels"));
    }
    if (n.Int("stash_type", 1) != 1) {
      return absl::InvalidArgumentError("attribute stash_type other than 1 (float32) is not supported");
    }
    const int64_t per = model_.opset >= 21 ? x[1] : groups;
    for (size_t i = 1; i < 3; ++i) {
      if (In(n, i).shape != std::vector<int64_t>{per}) {
        return absl::InvalidArgumentError(absl::StrCat("input ", i, " must have shape [", per, "] (one value per ",
                                                       model_.opset >= 21 ? "channel" : "group", " at opset ",
                                                       model_.opset, ")"));
      }
    }
    return std::vector<Tensor>{Like(In(n, 0), x)};
  }

  absl::StatusOr<std::vector<Tensor>> InferReshape(Node& n) {
    RETURN_IF_ERROR(Need(n, 2, 2));
    ASSIGN_OR_RETURN(std::vector<int64_t> want, ConstInts(n, 1, "shape"));
    const Tensor& x = In(n, 0);
    const bool allowzero = n.Int("allowzero", 0) != 0;
    int64_t known = 1;
    int infer = -1;
    for (size_t i = 0; i < want.size(); ++i) {
      if (want[i] == 0 && !allowzero) {
        if (i >= x.shape.size()) return absl::InvalidArgumentError("shape copies a missing dimension");
        want[i] = x.shape[i];
      }
      if (want[i] == -1) {
        if (infer >= 0) return absl::InvalidArgumentError("shape has two -1 dimensions");
        infer = static_cast<int>(i);
        continue;
      }
      if (want[i] < 0) return absl::InvalidArgumentError("shape has a negative dimension");
      if (__builtin_mul_overflow(known, want[i], &known))
        return absl::InvalidArgumentError(absl::StrCat("shape ", ShapeText(want), " has more than 2^63 elements"));
    }
    if (infer >= 0) {
      if (known == 0 || x.NumElements() % known != 0) {
        return absl::InvalidArgumentError(absl::StrCat("cannot reshape ", ShapeText(x.shape), " to ",
                                                       ShapeText(want)));
      }
      want[static_cast<size_t>(infer)] = x.NumElements() / known;
      known *= want[static_cast<size_t>(infer)];
    }
    if (known != x.NumElements()) {
      return absl::InvalidArgumentError(absl::StrCat("cannot reshape ", ShapeText(x.shape), " (",
                                                     x.NumElements(), " elements) to ",
                                                     ShapeText(want)));
    }
    return Reshaped(x, want);
  }

  // Squeeze, Unsqueeze.
  absl::StatusOr<std::vector<Tensor>> InferSqueeze(Node& n) {
    const std::string& op = n.op;
    RETURN_IF_ERROR(Need(n, 1, 2));
    std::vector<int64_t> axes = n.Ints("axes");
    if (Has(n, 1)) {
      ASSIGN_OR_RETURN(axes, ConstInts(n, 1, "axes"));
    }
    const Tensor& x = In(n, 0);
    std::vector<int64_t> s = x.shape;
    if (op == "Squeeze") {
      const int64_t rank = static_cast<int64_t>(s.size());
      std::set<int64_t> drop;
      for (int64_t a : axes) drop.insert(NormalizeAxis(a, rank));
      std::vector<int64_t> out;
      for (int64_t i = 0; i < rank; ++i) {
        const bool squeeze = axes.empty() ? s[static_cast<size_t>(i)] == 1 : drop.count(i) > 0;
        if (squeeze && s[static_cast<size_t>(i)] != 1) {
          return absl::InvalidArgumentError(absl::StrCat("cannot squeeze dimension ", i, " of size ",
                                                         s[static_cast<size_t>(i)]));
        }
        if (!squeeze) out.push_back(s[static_cast<size_t>(i)]);
      }
      return Reshaped(x, out);
    }
    const int64_t rank = static_cast<int64_t>(s.size() + axes.size());
    std::vector<int64_t> sorted;
    for (int64_t a : axes) sorted.push_back(NormalizeAxis(a, rank));
    std::sort(sorted.begin(), sorted.end());
    for (int64_t a : sorted) {
      if (a < 0 || a > static_cast<int64_t>(s.size())) {
        return absl::InvalidArgumentError("attribute axes out of range");
      }
      s.insert(s.begin() + a, 1);
    }
    return Reshaped(x, s);
  }

  // folded: its bounds must be constants (the output's length is their function)
  absl::StatusOr<std::vector<Tensor>> InferRange(Node& n) {
    RETURN_IF_ERROR(Need(n, 3, 3));
    for (size_t i = 0; i < 3; ++i) {
      if (!In(n, i).constant || In(n, i).NumElements() != 1 || In(n, i).dtype != In(n, 0).dtype ||
          In(n, i).dtype == DType::kBool) {
        return absl::InvalidArgumentError("start, limit and delta must be constant scalars of one type "
                                          "(the output's length depends on them)");
      }
    }
    Tensor out = Like(In(n, 0), {});
    out.constant = true;
    const bool ints = In(n, 0).dtype == DType::kInt64;
    auto value = [&](size_t i) {
      return ints ? static_cast<double>(In(n, i).i64[0]) : static_cast<double>(In(n, i).f32[0]);
    };
    const double start = value(0), limit = value(1), delta = value(2);
    if (delta == 0 || !std::isfinite(start) || !std::isfinite(limit) || !std::isfinite(delta)) {
      return absl::InvalidArgumentError("delta must be nonzero and the bounds finite");
    }
    const double count = std::max(0.0, std::ceil((limit - start) / delta));
    if (count > (1 << 24)) return absl::InvalidArgumentError("the range is too long to fold");
    out.shape = {static_cast<int64_t>(count)};
    for (int64_t i = 0; i < out.shape[0]; ++i) {
      if (ints) {
        out.i64.push_back(In(n, 0).i64[0] + i * In(n, 2).i64[0]);
      } else {
        out.f32.push_back(static_cast<float>(start + static_cast<double>(i) * delta));
      }
    }
    return std::vector<Tensor>{std::move(out)};
  }

  absl::StatusOr<std::vector<Tensor>> InferOneHot(Node& n) {
    RETURN_IF_ERROR(Need(n, 3, 3));
    const Tensor& depth = In(n, 1);
    if (!depth.constant || depth.NumElements() != 1 || depth.dtype == DType::kBool) {
      return absl::InvalidArgumentError("depth must be a constant scalar (the output's shape depends on it)");
    }
    const double d = depth.dtype == DType::kInt64 ? static_cast<double>(depth.i64[0]) : depth.f32[0];
    if (!(d >= 1 && d <= (1 << 24)) || d != std::floor(d)) {
      return absl::InvalidArgumentError(absl::StrCat("depth ", d, " is not a whole number in 1..2^24"));
    }
    if (In(n, 0).dtype != DType::kFloat32 || In(n, 2).dtype != DType::kFloat32 || In(n, 2).NumElements() != 2) {
      return absl::InvalidArgumentError("indices must be float32 and values two float32 [off, on]");
    }
    const int64_t rank = static_cast<int64_t>(In(n, 0).shape.size());
    const int64_t axis = NormalizeAxis(n.Int("axis", -1), rank + 1);
    if (axis < 0 || axis > rank) return absl::InvalidArgumentError("attribute axis out of range");
    std::vector<int64_t> shape = In(n, 0).shape;
    shape.insert(shape.begin() + axis, static_cast<int64_t>(d));
    n.attrs["axis"].ints = {axis};
    n.attrs["tf_depth"].ints = {static_cast<int64_t>(d)};
    return std::vector<Tensor>{Like(In(n, 2), shape)};
  }

  absl::StatusOr<std::vector<Tensor>> InferMeanVarianceNormalization(Node& n) {
    RETURN_IF_ERROR(Need(n, 1, 1));
    RETURN_IF_ERROR(NeedFloat(n));
    const int64_t rank = static_cast<int64_t>(In(n, 0).shape.size());
    std::vector<int64_t> axes = n.Ints("axes", {0, 2, 3});
    for (int64_t& a : axes) {
      a = NormalizeAxis(a, rank);
      if (a < 0 || a >= rank) return absl::InvalidArgumentError("attribute axes out of range");
    }
    std::sort(axes.begin(), axes.end());
    if (std::adjacent_find(axes.begin(), axes.end()) != axes.end()) {
      return absl::InvalidArgumentError("attribute axes repeats an axis");
    }
    n.attrs["axes"].ints = axes;
    return std::vector<Tensor>{Like(In(n, 0), In(n, 0).shape)};
  }

  // X [N, C, spatial...], grid [N, out spatial..., spatial rank]
  absl::StatusOr<std::vector<Tensor>> InferGridSample(Node& n) {
    RETURN_IF_ERROR(Need(n, 2, 2));
    RETURN_IF_ERROR(NeedFloat(n));
    const auto& x = In(n, 0).shape;
    const auto& grid = In(n, 1).shape;
    if (x.size() < 3 || x.size() > 5 || grid.size() != x.size() || grid[0] != x[0] ||
        grid.back() != static_cast<int64_t>(x.size()) - 2) {
      return absl::InvalidArgumentError(absl::StrCat("X ", ShapeText(x), " and grid ", ShapeText(grid),
                                                     " do not fit (grid is N x output spatial x ",
                                                     x.size() - 2, ")"));
    }
    std::string mode = n.Text("mode", model_.opset >= 20 ? "linear" : "bilinear");
    if (mode == "bilinear") mode = "linear";  // opset 16's names
    if (mode == "bicubic") mode = "cubic";
    if (mode != "nearest" && mode != "linear" && mode != "cubic") {
      return absl::InvalidArgumentError(absl::StrCat("attribute mode '", mode, "' is unknown"));
    }
    const std::string padding = n.Text("padding_mode", "zeros");
    if (padding != "zeros" && padding != "border" && padding != "reflection") {
      return absl::InvalidArgumentError(absl::StrCat("attribute padding_mode '", padding, "' is unknown"));
    }
    if (mode == "cubic" && padding != "zeros") {
      // The ONNX reference moves the coordinate inside first, PyTorch (and
      // onnxruntime) bound each of the 16 taps: their answers differ.
      return absl::InvalidArgumentError(absl::StrCat("mode cubic with padding_mode ", padding,
                                                     " is not supported (the ONNX reference and PyTorch differ)"));
    }
    n.attrs["mode"].text = mode;
    n.attrs["padding_mode"].text = padding;
    std::vector<int64_t> shape = {x[0], x[1]};
    shape.insert(shape.end(), grid.begin() + 1, grid.end() - 1);
    return std::vector<Tensor>{Like(In(n, 0), shape)};
  }

  // DepthToSpace, SpaceToDepth.
  absl::StatusOr<std::vector<Tensor>> InferDepthToSpace(Node& n) {
    const std::string& op = n.op;
    RETURN_IF_ERROR(Need(n, 1, 1));
    const auto& x = In(n, 0).shape;
    const int64_t b = n.Int("blocksize", 0);
    if (x.size() != 4) return absl::InvalidArgumentError("input must be 4-D (N, C, H, W)");
    if (b < 1) return absl::InvalidArgumentError("attribute blocksize must be >= 1");
    const std::string mode = n.Text("mode", "DCR");
    if (mode != "DCR" && mode != "CRD") {
      return absl::InvalidArgumentError(absl::StrCat("attribute mode '", mode, "' is not DCR or CRD"));
    }
    if (op == "SpaceToDepth" && (x[2] % b != 0 || x[3] % b != 0)) {
      return absl::InvalidArgumentError(absl::StrCat("H and W of ", ShapeText(x), " are not multiples of ", b));
    }
    if (op == "DepthToSpace" && x[1] % (b * b) != 0) {
      return absl::InvalidArgumentError(absl::StrCat("C of ", ShapeText(x), " is not a multiple of ", b * b));
    }
    const std::vector<int64_t> shape = op == "DepthToSpace"
                                           ? std::vector<int64_t>{x[0], x[1] / (b * b), x[2] * b, x[3] * b}
                                           : std::vector<int64_t>{x[0], x[1] * b * b, x[2] / b, x[3] / b};
    return std::vector<Tensor>{Like(In(n, 0), shape)};
  }

  absl::StatusOr<std::vector<Tensor>> InferTranspose(Node& n) {
    RETURN_IF_ERROR(Need(n, 1, 1));
    const Tensor& x = In(n, 0);
    std::vector<int64_t> perm = n.Ints("perm");
    if (perm.empty()) {
      for (size_t i = x.shape.size(); i-- > 0;) perm.push_back(static_cast<int64_t>(i));
    }
    std::vector<int64_t> check = perm;
    std::sort(check.begin(), check.end());
    for (size_t i = 0; i < check.size(); ++i) {
      if (check.size() != x.shape.size() || check[i] != static_cast<int64_t>(i)) {
        return absl::InvalidArgumentError(absl::StrCat("attribute perm ", ShapeText(perm),
                                                       " is not a permutation of ", x.shape.size(),
                                                       " axes"));
      }
    }
    std::vector<int64_t> s;
    for (int64_t p : perm) s.push_back(x.shape[static_cast<size_t>(p)]);
    Tensor out = Like(x, s);
    if (x.constant) FoldTranspose(x, perm, &out);
    return std::vector<Tensor>{std::move(out)};
  }

  // x broadcast (both ways, as numpy) against a constant shape
  absl::StatusOr<std::vector<Tensor>> InferExpand(Node& n) {
    RETURN_IF_ERROR(Need(n, 2, 2));
    const Tensor& x = In(n, 0);
    ASSIGN_OR_RETURN(std::vector<int64_t> shape, ConstInts(n, 1, "shape"));
    ASSIGN_OR_RETURN(std::vector<int64_t> s, Broadcast(x.shape, shape));
    Tensor out = Like(x, s);
    if (x.constant) {
      const std::vector<int64_t> strides = BroadcastStrides(x.shape, s);
      FoldMap(x, &out, [&](const std::vector<int64_t>& o) {
        int64_t src = 0;
        for (size_t d = 0; d < o.size(); ++d) src += o[d] * strides[d];
        return src;
      });
    }
    return std::vector<Tensor>{std::move(out)};
  }

  absl::StatusOr<std::vector<Tensor>> InferTile(Node& n) {
    RETURN_IF_ERROR(Need(n, 2, 2));
    const Tensor& x = In(n, 0);
    ASSIGN_OR_RETURN(std::vector<int64_t> repeats, ConstInts(n, 1, "repeats"));
    if (repeats.size() != x.shape.size()) {
      return absl::InvalidArgumentError(absl::StrCat("repeats ", ShapeText(repeats), " has ", repeats.size(),
                                                     " values for an input of rank ", x.shape.size()));
    }
    std::vector<int64_t> s;
    for (size_t d = 0; d < repeats.size(); ++d) {
      if (repeats[d] < 0) {
        return absl::InvalidArgumentError(absl::StrCat("repeats ", ShapeText(repeats), ": each must be >= 0"));
      }
      s.push_back(x.shape[d] * repeats[d]);
    }
    n.attrs["tf_repeats"].ints = repeats;
    Tensor out = Like(x, s);
    if (x.constant) {
      const std::vector<int64_t> strides = BroadcastStrides(x.shape, x.shape);
      FoldMap(x, &out, [&](const std::vector<int64_t>& o) {
        int64_t src = 0;
        for (size_t d = 0; d < o.size(); ++d) src += o[d] % x.shape[d] * strides[d];
        return src;
      });
    }
    return std::vector<Tensor>{std::move(out)};
  }

  // zero above (upper = 0) or below (upper = 1) diagonal k of the last two axes
  absl::StatusOr<std::vector<Tensor>> InferTrilu(Node& n) {
    RETURN_IF_ERROR(Need(n, 1, 2));
    const Tensor& x = In(n, 0);
    if (x.shape.size() < 2) return absl::InvalidArgumentError("the input must have rank >= 2");
    int64_t k = 0;
    if (Has(n, 1)) {
      ASSIGN_OR_RETURN(std::vector<int64_t> kv, ConstInts(n, 1, "k"));
      if (kv.size() != 1) return absl::InvalidArgumentError("k must be a scalar");
      k = kv[0];
    }
    const int64_t upper = n.Int("upper", 1);
    if (upper != 0 && upper != 1) return absl::InvalidArgumentError("attribute upper must be 0 or 1");
    n.attrs["tf_k"].ints = {k};
    Tensor out = Like(x, x.shape);
    if (x.constant) {  // masks (a causal attention mask from ConstantOfShape)
      const int64_t rows = x.shape[x.shape.size() - 2], cols = x.shape.back();
      out.constant = true;
      for (int64_t i = 0; i < x.NumElements(); ++i) {
        const int64_t r = i / cols % rows, c = i % cols;
        const bool keep = upper ? c - r >= k : c - r <= k;
        if (x.dtype == DType::kInt64) {
          out.i64.push_back(keep ? x.i64[static_cast<size_t>(i)] : 0);
        } else {
          out.f32.push_back(keep ? x.f32[static_cast<size_t>(i)] : 0.0f);
        }
      }
    }
    return std::vector<Tensor>{std::move(out)};
  }

  absl::StatusOr<std::vector<Tensor>> InferCumSum(Node& n) {
    RETURN_IF_ERROR(Need(n, 2, 2));
    RETURN_IF_ERROR(NeedFloat(n, 1));
    const Tensor& x = In(n, 0);
    ASSIGN_OR_RETURN(std::vector<int64_t> axis, ConstInts(n, 1, "axis"));
    const int64_t rank = static_cast<int64_t>(x.shape.size());
    if (axis.size() != 1 || NormalizeAxis(axis[0], rank) < 0 || NormalizeAxis(axis[0], rank) >= rank) {
      return absl::InvalidArgumentError(absl::StrCat("axis must be one value in [", -rank, ", ", rank, ")"));
    }
    for (const char* flag : {"exclusive", "reverse"}) {
      if (n.Int(flag, 0) != 0 && n.Int(flag, 0) != 1) {
        return absl::InvalidArgumentError(absl::StrCat("attribute ", flag, " must be 0 or 1"));
      }
    }
    n.attrs["tf_axis"].ints = {NormalizeAxis(axis[0], rank)};
    return std::vector<Tensor>{Like(x, x.shape)};
  }

  // 2-D: X, W, offset, optional B and mask
  absl::StatusOr<std::vector<Tensor>> InferDeformConv(Node& n) {
    RETURN_IF_ERROR(Need(n, 3, 5));
    RETURN_IF_ERROR(NeedFloat(n));
    const std::vector<int64_t>& x = In(n, 0).shape;
    const std::vector<int64_t>& w = In(n, 1).shape;
    if (x.size() != 4 || w.size() != 4) {
      return absl::UnimplementedError(absl::StrCat("DeformConv over input ", ShapeText(x), " and weights ",
                                                   ShapeText(w), " (2-D only: N x C x H x W)"));
    }
    const int64_t group = n.Int("group", 1), offset_group = n.Int("offset_group", 1);
    if (group < 1 || offset_group < 1 || x[1] % group != 0 || x[1] % offset_group != 0 || w[0] % group != 0 ||
        w[1] * group != x[1]) {
      return absl::InvalidArgumentError(absl::StrCat("input ", ShapeText(x), ", weights ", ShapeText(w), ", group ",
                                                     group, " and offset_group ", offset_group, " do not agree"));
    }
    std::vector<int64_t> kernel = n.Ints("kernel_shape", {w[2], w[3]});
    if (kernel != std::vector<int64_t>{w[2], w[3]}) {
      return absl::InvalidArgumentError(absl::StrCat("kernel_shape ", ShapeText(kernel), " is not the weights' ",
                                                     ShapeText({w[2], w[3]})));
    }
    std::vector<int64_t> pads, spatial;
    RETURN_IF_ERROR(SpatialOut(n, {x[2], x[3]}, kernel, false, &pads, &spatial));  // no auto_pad (reader)
    n.attrs["pads"].ints = pads;
    const std::vector<int64_t> offsets = {x[0], offset_group * 2 * w[2] * w[3], spatial[0], spatial[1]};
    if (In(n, 2).shape != offsets) {
      return absl::InvalidArgumentError(
          absl::StrCat("offset ", ShapeText(In(n, 2).shape), " is not ", ShapeText(offsets)));
    }
    if (Has(n, 3) && In(n, 3).shape != std::vector<int64_t>{w[0]}) {
      return absl::InvalidArgumentError(absl::StrCat("B ", ShapeText(In(n, 3).shape), " is not [", w[0], "]"));
    }
    const std::vector<int64_t> masks = {x[0], offset_group * w[2] * w[3], spatial[0], spatial[1]};
    if (Has(n, 4) && In(n, 4).shape != masks) {
      return absl::InvalidArgumentError(absl::StrCat("mask ", ShapeText(In(n, 4).shape), " is not ", ShapeText(masks)));
    }
    return std::vector<Tensor>{Like(In(n, 0), {x[0], w[0], spatial[0], spatial[1]})};
  }

  // along one signal axis; the last axis holds 1 (real) or 2 (real, imaginary) values
  absl::StatusOr<std::vector<Tensor>> InferDFT(Node& n) {
    RETURN_IF_ERROR(Need(n, 1, 3));
    RETURN_IF_ERROR(NeedFloat(n, 1));
    const std::vector<int64_t>& s = In(n, 0).shape;
    const int64_t rank = static_cast<int64_t>(s.size());
    if (rank < 2 || (s.back() != 1 && s.back() != 2)) {
      return absl::InvalidArgumentError(absl::StrCat("input ", ShapeText(s), " must end in 1 (real) or 2 (complex)"));
    }
    int64_t axis = n.Int("axis", 1);
    if (model_.opset >= 20) {
      axis = -2;
      if (Has(n, 2)) {
        ASSIGN_OR_RETURN(std::vector<int64_t> a, ConstInts(n, 2, "axis"));
        if (a.size() != 1) return absl::InvalidArgumentError("axis must be a scalar");
        axis = a[0];
      }
    }
    axis = NormalizeAxis(axis, rank);
    if (axis < 0 || axis > rank - 2) {
      return absl::InvalidArgumentError(absl::StrCat("axis out of range for input ", ShapeText(s)));
    }
    int64_t length = s[static_cast<size_t>(axis)];
    if (Has(n, 1)) {
      ASSIGN_OR_RETURN(std::vector<int64_t> l, ConstInts(n, 1, "dft_length"));
      if (l.size() != 1 || l[0] < 1) return absl::InvalidArgumentError("dft_length must be one value >= 1");
      length = l[0];
    }
    if (length > 4096) return absl::InvalidArgumentError(absl::StrCat("a DFT of length ", length, " (at most 4096)"));
    const bool inverse = n.Int("inverse", 0) != 0, onesided = n.Int("onesided", 0) != 0;
    if (onesided && (inverse || s.back() != 1)) {
      return absl::InvalidArgumentError("onesided is supported for the forward DFT of a real signal only");
    }
    std::vector<int64_t> out = s;
    out[static_cast<size_t>(axis)] = onesided ? length / 2 + 1 : length;
    out.back() = 2;
    n.attrs["tf_axis"].ints = {axis};
    n.attrs["tf_length"].ints = {length};
    return std::vector<Tensor>{Like(In(n, 0), out)};
  }

  // values and int64 indices of the K largest (smallest) along axis, sorted
  absl::StatusOr<std::vector<Tensor>> InferTopK(Node& n) {
    RETURN_IF_ERROR(model_.opset >= 10 ? Need(n, 2, 2) : Need(n, 1, 1));
    RETURN_IF_ERROR(NeedFloat(n, 1));
    const std::vector<int64_t>& s = In(n, 0).shape;
    const int64_t rank = static_cast<int64_t>(s.size());
    const int64_t axis = NormalizeAxis(n.Int("axis", -1), rank);
    if (axis < 0 || axis >= rank) return absl::InvalidArgumentError("attribute axis out of range");
    int64_t k = n.Int("k", -1);
    if (model_.opset >= 10) {
      ASSIGN_OR_RETURN(std::vector<int64_t> kv, ConstInts(n, 1, "K"));
      if (kv.size() != 1) return absl::InvalidArgumentError("K must hold one value");
      k = kv[0];
    }
    if (k < 1 || k > s[static_cast<size_t>(axis)]) {
      return absl::InvalidArgumentError(absl::StrCat("K = ", k, " is not in [1, ", s[static_cast<size_t>(axis)],
                                                     "] (empty outputs are not supported)"));
    }
    for (const char* flag : {"largest", "sorted"}) {
      if (n.Int(flag, 1) != 0 && n.Int(flag, 1) != 1) {
        return absl::InvalidArgumentError(absl::StrCat("attribute ", flag, " must be 0 or 1"));
      }
    }
    std::vector<int64_t> out = s;
    out[static_cast<size_t>(axis)] = k;
    n.attrs["tf_axis"].ints = {axis};
    n.attrs["tf_k"].ints = {k};
    Tensor indices = Like(In(n, 0), out);
    indices.dtype = DType::kInt64;
    return std::vector<Tensor>{Like(In(n, 0), out), std::move(indices)};
  }

  // data with the slices `indices` name replaced by (or combined with) updates
  absl::StatusOr<std::vector<Tensor>> InferScatterND(Node& n) {
    RETURN_IF_ERROR(Need(n, 3, 3));
    const Tensor& x = In(n, 0);
    const Tensor& idx = In(n, 1);
    const Tensor& upd = In(n, 2);
    if (x.dtype != upd.dtype) return absl::InvalidArgumentError("data and updates differ in type");
    if (!idx.constant || idx.dtype != DType::kInt64 || idx.shape.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "indices '", idx.name, "' must be a constant int64 tensor (run-time indices are not supported)"));
    }
    const std::string reduction = n.Text("reduction", "none");
    if (reduction != "none" && reduction != "add" && reduction != "mul" && reduction != "max" &&
        reduction != "min") {
      return absl::InvalidArgumentError(absl::StrCat("reduction '", reduction, "' is not one of none, add, mul, "
                                                     "max, min"));
    }
    const int64_t q = idx.shape.back(), r = static_cast<int64_t>(x.shape.size());
    if (q < 1 || q > r) return absl::InvalidArgumentError(absl::StrCat("indices' last dimension ", q, " is not in [1, ", r, "]"));
    std::vector<int64_t> want(idx.shape.begin(), idx.shape.end() - 1);
    want.insert(want.end(), x.shape.begin() + q, x.shape.end());
    if (upd.shape != want) {
      return absl::InvalidArgumentError(absl::StrCat("updates ", ShapeText(upd.shape), " must have shape ",
                                                     ShapeText(want)));
    }
    std::set<std::vector<int64_t>> seen;
    for (size_t t = 0; t + static_cast<size_t>(q) <= idx.i64.size(); t += static_cast<size_t>(q)) {
      std::vector<int64_t> at(idx.i64.begin() + static_cast<std::ptrdiff_t>(t),
                              idx.i64.begin() + static_cast<std::ptrdiff_t>(t) + q);
      for (size_t d = 0; d < at.size(); ++d) {
        const int64_t dim = x.shape[d];
        if (at[d] < -dim || at[d] >= dim) {
          return absl::InvalidArgumentError(absl::StrCat("index ", at[d], " out of range for dimension ", dim));
        }
        if (at[d] < 0) at[d] += dim;
      }
      if (!seen.insert(at).second && reduction == "none") {
        return absl::InvalidArgumentError("indices name one slice twice (reduction none: the result is undefined)");
      }
    }
    if (x.constant && upd.constant) {
      return absl::InvalidArgumentError("data and updates are both constants: not supported");
    }
    return std::vector<Tensor>{Like(x, x.shape)};
  }

  // y[i][j][k] = x[i][idx[i][j][k]][k] (axis 1), y shaped as idx
  absl::StatusOr<std::vector<Tensor>> InferGatherElements(Node& n) {
    RETURN_IF_ERROR(Need(n, 2, 2));
    const Tensor& x = In(n, 0);
    const Tensor& idx = In(n, 1);
    if (idx.dtype != DType::kInt64) return absl::InvalidArgumentError("indices must be an int64 tensor");
    const int64_t rank = static_cast<int64_t>(x.shape.size());
    const int64_t axis = NormalizeAxis(n.Int("axis", 0), rank);
    if (axis < 0 || axis >= rank) return absl::InvalidArgumentError("attribute axis out of range");
    if (idx.shape.size() != x.shape.size()) {
      return absl::InvalidArgumentError(absl::StrCat("indices ", ShapeText(idx.shape), " and data ",
                                                     ShapeText(x.shape), " differ in rank"));
    }
    for (int64_t d = 0; d < rank; ++d) {
      if (d != axis && idx.shape[static_cast<size_t>(d)] > x.shape[static_cast<size_t>(d)]) {
        return absl::InvalidArgumentError(absl::StrCat("indices ", ShapeText(idx.shape), " exceed data ",
                                                       ShapeText(x.shape), " on axis ", d));
      }
    }
    if (idx.constant) {
      const int64_t dim = x.shape[static_cast<size_t>(axis)];
      for (int64_t i : idx.i64) {
        if (i < -dim || i >= dim) {
          return absl::InvalidArgumentError(absl::StrCat("index ", i, " out of range for dimension ", dim));
        }
      }
    }
    n.attrs["tf_axis"].ints = {axis};
    return std::vector<Tensor>{Like(x, idx.shape)};
  }

  // ArgMax, ArgMin.
  // int64 indices of the first (or last) extreme along axis
  absl::StatusOr<std::vector<Tensor>> InferArgMax(Node& n) {
    RETURN_IF_ERROR(Need(n, 1, 1));
    RETURN_IF_ERROR(NeedFloat(n));
    const std::vector<int64_t>& s = In(n, 0).shape;
    const int64_t rank = static_cast<int64_t>(s.size());
    const int64_t axis = NormalizeAxis(n.Int("axis", 0), rank);
    if (axis < 0 || axis >= rank) return absl::InvalidArgumentError("attribute axis out of range");
    for (const char* flag : {"keepdims", "select_last_index"}) {
      const int64_t v = n.Int(flag, std::string(flag) == "keepdims" ? 1 : 0);
      if (v != 0 && v != 1) return absl::InvalidArgumentError(absl::StrCat("attribute ", flag, " must be 0 or 1"));
    }
    std::vector<int64_t> out;
    for (int64_t d = 0; d < rank; ++d) {
      if (d != axis) {
        out.push_back(s[static_cast<size_t>(d)]);
      } else if (n.Int("keepdims", 1) != 0) {
        out.push_back(1);
      }
    }
    n.attrs["tf_axis"].ints = {axis};
    Tensor t = Like(In(n, 0), out);
    t.dtype = DType::kInt64;
    return std::vector<Tensor>{std::move(t)};
  }

  absl::StatusOr<std::vector<Tensor>> InferConcat(Node& n) {
    if (n.inputs.empty()) return absl::InvalidArgumentError("no inputs");
    const Tensor& first = In(n, 0);
    const int64_t rank = static_cast<int64_t>(first.shape.size());
    const int64_t axis = NormalizeAxis(n.Int("axis", 0), rank);
    if (axis < 0 || axis >= rank) return absl::InvalidArgumentError("attribute axis out of range");
    std::vector<int64_t> s = first.shape;
    s[static_cast<size_t>(axis)] = 0;
    bool constant = true;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      const Tensor& t = In(n, i);
      for (int64_t d = 0; d < rank; ++d) {
        if (t.shape.size() != first.shape.size() ||
            (d != axis && t.shape[static_cast<size_t>(d)] != first.shape[static_cast<size_t>(d)])) {
          return absl::InvalidArgumentError(absl::StrCat("input ", i, " ", ShapeText(t.shape),
                                                         " does not match input 0 ",
                                                         ShapeText(first.shape), " off axis ", axis));
        }
      }
      s[static_cast<size_t>(axis)] += t.shape[static_cast<size_t>(axis)];
      constant &= t.constant;
    }
    Tensor out = Like(first, s);
    if (constant && axis == 0) {  // shape vectors: the case exported graphs fold
      out.constant = true;
      for (size_t i = 0; i < n.inputs.size(); ++i) {
        out.f32.insert(out.f32.end(), In(n, i).f32.begin(), In(n, i).f32.end());
        out.i64.insert(out.i64.end(), In(n, i).i64.begin(), In(n, i).i64.end());
      }
    }
    return std::vector<Tensor>{std::move(out)};
  }

  absl::StatusOr<std::vector<Tensor>> InferGather(Node& n) {
    RETURN_IF_ERROR(Need(n, 2, 2));
    const Tensor& x = In(n, 0);
    const Tensor& idx = In(n, 1);
    if (idx.dtype != DType::kInt64) return absl::InvalidArgumentError("indices must be an int64 tensor");
    const int64_t rank = static_cast<int64_t>(x.shape.size());
    const int64_t axis = NormalizeAxis(n.Int("axis", 0), rank);
    if (axis < 0 || axis >= rank) return absl::InvalidArgumentError("attribute axis out of range");
    const int64_t dim = x.shape[static_cast<size_t>(axis)];
    // Indices computed at run time (token ids into an embedding) are checked as
    // the model's inputs when they are one, and clamped into range otherwise.
    for (int64_t i : idx.i64) {
      if (i < -dim || i >= dim) {
        return absl::InvalidArgumentError(absl::StrCat("index ", i, " out of range for dimension ", dim));
      }
    }
    std::vector<int64_t> s(x.shape.begin(), x.shape.begin() + axis);
    s.insert(s.end(), idx.shape.begin(), idx.shape.end());
    s.insert(s.end(), x.shape.begin() + axis + 1, x.shape.end());
    Tensor out = Like(x, s);
    if (x.constant && rank == 1) {  // picking from a shape vector
      out.constant = true;
      for (int64_t i : idx.i64) {
        const size_t j = static_cast<size_t>(i < 0 ? i + dim : i);
        if (x.dtype == DType::kInt64) {
          out.i64.push_back(x.i64[j]);
        } else {
          out.f32.push_back(x.f32[j]);
        }
      }
    }
    return std::vector<Tensor>{std::move(out)};
  }

  absl::StatusOr<std::vector<Tensor>> InferSplit(Node& n) {
    RETURN_IF_ERROR(Need(n, 1, 2));
    const Tensor& x = In(n, 0);
    const int64_t rank = static_cast<int64_t>(x.shape.size());
    const int64_t axis = NormalizeAxis(n.Int("axis", 0), rank);
    if (axis < 0 || axis >= rank) return absl::InvalidArgumentError("attribute axis out of range");
    const int64_t dim = x.shape[static_cast<size_t>(axis)];
    std::vector<int64_t> sizes = n.Ints("split");
    if (Has(n, 1)) {
      ASSIGN_OR_RETURN(sizes, ConstInts(n, 1, "split"));
    }
    if (sizes.empty()) {
      // Opset 18's num_outputs: parts of ceil(dim / parts), the last one smaller.
      // Before it, the parts must be equal.
      const bool uneven = n.attrs.count("num_outputs") > 0;
      const int64_t parts = n.Int("num_outputs", split_outputs_);
      const int64_t chunk = parts < 1 ? 0 : (dim + parts - 1) / parts;
      if (parts < 1 || (uneven ? dim - (parts - 1) * chunk < 1 : dim % parts != 0)) {
        return absl::InvalidArgumentError(absl::StrCat("cannot split ", dim, " into ", parts,
                                                       uneven ? " parts" : " equal parts"));
      }
      sizes.assign(static_cast<size_t>(parts), chunk);
      sizes.back() = dim - (parts - 1) * chunk;
    }
    if (std::accumulate(sizes.begin(), sizes.end(), int64_t{0}) != dim) {
      return absl::InvalidArgumentError(absl::StrCat("split sizes ", ShapeText(sizes),
                                                     " do not add up to ", dim));
    }
    std::vector<Tensor> outs;
    for (int64_t size : sizes) {
      std::vector<int64_t> s = x.shape;
      s[static_cast<size_t>(axis)] = size;
      outs.push_back(Like(x, s));
    }
    return outs;
  }

  absl::StatusOr<std::vector<Tensor>> InferLayerNormalization(Node& n) {
    RETURN_IF_ERROR(Need(n, 2, 3));
    const auto& s = In(n, 0).shape;
    const int64_t rank = static_cast<int64_t>(s.size());
    const int64_t axis = NormalizeAxis(n.Int("axis", -1), rank);
    if (axis < 0 || axis >= rank) return absl::InvalidArgumentError("attribute axis out of range");
    const std::vector<int64_t> normalized(s.begin() + axis, s.end());
    for (size_t i = 1; i < n.inputs.size(); ++i) {
      if (Has(n, i)) {
        ASSIGN_OR_RETURN(std::vector<int64_t> b, Broadcast(In(n, i).shape, normalized));
        if (b != normalized) {
          return absl::InvalidArgumentError(absl::StrCat("input ", i, " ", ShapeText(In(n, i).shape),
                                                         " does not broadcast to ",
                                                         ShapeText(normalized)));
        }
      }
    }
    std::vector<int64_t> stats = s;
    for (int64_t i = axis; i < rank; ++i) stats[static_cast<size_t>(i)] = 1;
    return std::vector<Tensor>{Like(In(n, 0), s), Like(In(n, 0), stats), Like(In(n, 0), stats)};
  }


  // Same data, new shape: a constant stays one.
  static absl::StatusOr<std::vector<Tensor>> Reshaped(const Tensor& x, std::vector<int64_t> shape) {
    Tensor out = Like(x, std::move(shape));
    if (x.constant) {
      out.constant = true;
      out.f32 = x.f32;
      out.i64 = x.i64;
    }
    return std::vector<Tensor>{std::move(out)};
  }

  // Spatial output sizes for Conv and the pools; fills `pads` (begin..., end...).
  static absl::Status SpatialOut(const Node& n, const std::vector<int64_t>& in,
                                 const std::vector<int64_t>& kernel, bool ceil_mode,
                                 std::vector<int64_t>* pads, std::vector<int64_t>* out) {
    const size_t dims = kernel.size();
    std::vector<int64_t> strides = n.Ints("strides", std::vector<int64_t>(dims, 1));
    std::vector<int64_t> dilations = n.Ints("dilations", std::vector<int64_t>(dims, 1));
    *pads = n.Ints("pads", std::vector<int64_t>(2 * dims, 0));
    if (strides.size() != dims || dilations.size() != dims || pads->size() != 2 * dims) {
      return absl::InvalidArgumentError(absl::StrCat("strides, dilations and pads must have ", dims,
                                                     ", ", dims, " and ", 2 * dims, " values"));
    }
    for (size_t i = 0; i < dims; ++i) {
      if (strides[i] < 1 || dilations[i] < 1 || (*pads)[i] < 0 || (*pads)[i + dims] < 0) {
        return absl::InvalidArgumentError("strides and dilations must be >= 1 and pads >= 0");
      }
    }
    const std::string auto_pad = n.Text("auto_pad", "NOTSET");
    if (auto_pad != "NOTSET" && auto_pad != "VALID" && auto_pad != "SAME_UPPER" &&
        auto_pad != "SAME_LOWER") {
      return absl::InvalidArgumentError(absl::StrCat("attribute auto_pad '", auto_pad, "' is unknown"));
    }
    out->clear();
    for (size_t i = 0; i < dims; ++i) {
      const int64_t extent = (kernel[i] - 1) * dilations[i] + 1;
      if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
        const int64_t o = (in[i] + strides[i] - 1) / strides[i];
        const int64_t total = std::max<int64_t>(0, (o - 1) * strides[i] + extent - in[i]);
        const int64_t small = total / 2;
        (*pads)[i] = auto_pad == "SAME_UPPER" ? small : total - small;
        (*pads)[i + dims] = total - (*pads)[i];
      } else if (auto_pad == "VALID") {
        (*pads)[i] = (*pads)[i + dims] = 0;
      }
      const int64_t span = in[i] + (*pads)[i] + (*pads)[i + dims] - extent;
      if (span < 0) {
        return absl::InvalidArgumentError(absl::StrCat("kernel ", ShapeText(kernel),
                                                       " is larger than the padded input ",
                                                       ShapeText(in)));
      }
      int64_t o = (ceil_mode ? (span + strides[i] - 1) / strides[i] : span / strides[i]) + 1;
      // With ceil_mode, a last window that would start in the end padding is dropped
      // (it covers no input element).
      if (ceil_mode && (o - 1) * strides[i] >= in[i] + (*pads)[i]) --o;
      out->push_back(o);
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<Tensor>> InferConv(Node& n) {
    RETURN_IF_ERROR(Need(n, 2, 3));
    const auto& x = In(n, 0).shape;
    const auto& w = In(n, 1).shape;
    if (x.size() != 4 || w.size() != 4) {
      return absl::InvalidArgumentError("only 2-D convolutions (4-D input and weight) are supported");
    }
    const int64_t group = n.Int("group", 1);
    if (group < 1 || x[1] % group != 0 || w[0] % group != 0 || w[1] * group != x[1]) {
      return absl::InvalidArgumentError(absl::StrCat("attribute group ", group, " does not fit input ",
                                                     ShapeText(x), " and weight ", ShapeText(w)));
    }
    std::vector<int64_t> kernel(w.begin() + 2, w.end());
    if (n.attrs.count("kernel_shape") && n.Ints("kernel_shape") != kernel) {
      return absl::InvalidArgumentError("attribute kernel_shape does not match the weight");
    }
    if (Has(n, 2) && In(n, 2).shape != std::vector<int64_t>{w[0]}) {
      return absl::InvalidArgumentError(absl::StrCat("bias must have shape [", w[0], "]"));
    }
    std::vector<int64_t> pads, spatial;
    RETURN_IF_ERROR(SpatialOut(n, {x[2], x[3]}, kernel, false, &pads, &spatial));
    n.attrs["pads"].ints = pads;  // auto_pad resolved
    n.attrs.erase("auto_pad");
    return std::vector<Tensor>{Like(In(n, 0), {x[0], w[0], spatial[0], spatial[1]})};
  }

  // ConvTranspose over 1 to 3 spatial dimensions. W is [C, M / group, kernel...].
  // Explicit pads, or pads from output_shape or auto_pad SAME_* (total padding split
  // with the odd one at the end for SAME_UPPER, at the start otherwise), resolved
  // into the attribute `pads`; output_padding adds to the end.
  absl::StatusOr<std::vector<Tensor>> InferConvTranspose(Node& n) {
    RETURN_IF_ERROR(Need(n, 2, 3));
    RETURN_IF_ERROR(NeedFloat(n));
    const auto& x = In(n, 0).shape;
    const auto& w = In(n, 1).shape;
    if (x.size() < 3 || x.size() > 5 || w.size() != x.size()) {
      return absl::InvalidArgumentError(absl::StrCat("input ", ShapeText(x), " and weight ", ShapeText(w),
                                                     " are not N x C x 1 to 3 spatial dimensions"));
    }
    const size_t dims = x.size() - 2;
    const int64_t group = n.Int("group", 1);
    if (group < 1 || x[1] % group != 0 || w[0] != x[1]) {
      return absl::InvalidArgumentError(absl::StrCat("attribute group ", group, " does not fit input ",
                                                     ShapeText(x), " and weight ", ShapeText(w)));
    }
    const int64_t m = w[1] * group;
    const std::vector<int64_t> kernel(w.begin() + 2, w.end());
    if (n.attrs.count("kernel_shape") && n.Ints("kernel_shape") != kernel) {
      return absl::InvalidArgumentError("attribute kernel_shape does not match the weight");
    }
    if (Has(n, 2) && In(n, 2).shape != std::vector<int64_t>{m}) {
      return absl::InvalidArgumentError(absl::StrCat("bias must have shape [", m, "]"));
    }
    const std::vector<int64_t> strides = n.Ints("strides", std::vector<int64_t>(dims, 1));
    const std::vector<int64_t> dilations = n.Ints("dilations", std::vector<int64_t>(dims, 1));
    const std::vector<int64_t> out_pad = n.Ints("output_padding", std::vector<int64_t>(dims, 0));
    std::vector<int64_t> pads = n.Ints("pads", std::vector<int64_t>(2 * dims, 0));
    if (strides.size() != dims || dilations.size() != dims || out_pad.size() != dims || pads.size() != 2 * dims) {
      return absl::InvalidArgumentError(absl::StrCat("strides, dilations, output_padding and pads must have ", dims,
                                                     ", ", dims, ", ", dims, " and ", 2 * dims, " values"));
    }
    for (size_t i = 0; i < dims; ++i) {
      if (strides[i] < 1 || dilations[i] < 1 || out_pad[i] < 0 || pads[i] < 0 || pads[i + dims] < 0) {
        return absl::InvalidArgumentError("strides and dilations must be >= 1, output_padding and pads >= 0");
      }
      if (out_pad[i] >= std::max(strides[i], dilations[i])) {
        return absl::InvalidArgumentError("output_padding must be smaller than the stride or the dilation");
      }
    }
    const std::string auto_pad = n.Text("auto_pad", "NOTSET");
    if (auto_pad != "NOTSET" && auto_pad != "VALID" && auto_pad != "SAME_UPPER" && auto_pad != "SAME_LOWER") {
      return absl::InvalidArgumentError(absl::StrCat("attribute auto_pad '", auto_pad, "' is unknown"));
    }
    std::vector<int64_t> target = n.Ints("output_shape");
    if (!target.empty() && n.attrs.count("pads")) {
      return absl::InvalidArgumentError("give pads or output_shape, not both");
    }
    if (!target.empty() && target.size() != dims) {
      return absl::InvalidArgumentError(absl::StrCat("attribute output_shape must have ", dims, " values"));
    }
    if (target.empty() && (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER")) {
      for (size_t i = 0; i < dims; ++i) target.push_back(x[i + 2] * strides[i]);
    }
    std::vector<int64_t> shape = {x[0], m};
    for (size_t i = 0; i < dims; ++i) {
      const int64_t full = strides[i] * (x[i + 2] - 1) + out_pad[i] + (kernel[i] - 1) * dilations[i] + 1;
      if (auto_pad == "VALID") pads[i] = pads[i + dims] = 0;
      if (!target.empty()) {
        // A target past the full output gives a negative total: the pads go negative
        // and the extra elements get the bias alone (as the ONNX reference computes).
        const int64_t total = full - target[i];
        if (target[i] < 1 || total < -full) {
          return absl::InvalidArgumentError(absl::StrCat("output_shape ", ShapeText(target), " is out of range"));
        }
        const int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2);  // floor(total / 2)
        pads[i] = auto_pad == "SAME_UPPER" ? half : total - half;
        pads[i + dims] = total - pads[i];
      }
      const int64_t size = full - pads[i] - pads[i + dims];
      if (size < 1) return absl::InvalidArgumentError(absl::StrCat("the pads leave no output on axis ", i + 2));
      shape.push_back(size);
    }
    n.attrs["pads"].ints = pads;
    n.attrs.erase("auto_pad");
    n.attrs.erase("output_shape");
    return std::vector<Tensor>{Like(In(n, 0), shape)};
  }

  // Resize (opset 10+) and Upsample (opset 7-9): scales or sizes must be constants.
  // The output shape and each axis's scale (attribute tf_scales, exact decimal
  // text of the double the coordinate transform divides by) are resolved here;
  // Upsample and Resize-10 become Resize with their fixed modes (asymmetric
  // coordinates, nearest rounding down) spelled out, so the kernel sees one form.
  absl::StatusOr<std::vector<Tensor>> InferResize(Node& n) {
    const bool legacy = n.op == "Upsample" || model_.opset < 11;
    const Tensor& x = In(n, 0);
    RETURN_IF_ERROR(NeedFloat(n, 1));
    const size_t rank = x.shape.size();
    if (rank == 0) return absl::InvalidArgumentError("X is a scalar");
    const std::string mode = n.Text("mode", "nearest");
    if (mode != "nearest" && mode != "linear" && mode != "cubic") {
      return absl::InvalidArgumentError(absl::StrCat("attribute mode '", mode, "' is not nearest, linear or cubic"));
    }
    std::vector<float> scales;
    std::vector<int64_t> sizes;
    if (n.op == "Upsample" && model_.opset < 9) {
      RETURN_IF_ERROR(Need(n, 1, 1));
      scales = n.attrs.count("scales") ? n.attrs.at("scales").floats : std::vector<float>{};
    } else {
      const size_t scales_at = legacy ? 1 : 2;
      RETURN_IF_ERROR(Need(n, legacy ? 2 : 1, legacy ? 2 : 4));
      if (Has(n, scales_at)) {
        const Tensor& t = In(n, scales_at);
        if (!t.constant || t.dtype != DType::kFloat32) {
          return absl::InvalidArgumentError(absl::StrCat("scales '", t.name, "' must be a constant float32 tensor"));
        }
        scales = t.f32;
      }
      if (!legacy && Has(n, 3)) {
        ASSIGN_OR_RETURN(sizes, ConstInts(n, 3, "sizes"));
      }
    }
    if (scales.empty() == sizes.empty()) {
      return absl::InvalidArgumentError("give exactly one of scales and sizes");
    }
    const std::string transform = legacy ? "asymmetric" : n.Text("coordinate_transformation_mode", "half_pixel");
    static const std::set<std::string> kTransforms = {"half_pixel", "half_pixel_symmetric", "pytorch_half_pixel",
                                                      "align_corners", "asymmetric", "tf_crop_and_resize"};
    if (!kTransforms.count(transform)) {
      return absl::InvalidArgumentError(absl::StrCat("attribute coordinate_transformation_mode '", transform,
                                                     "' is unknown"));
    }
    const std::string nearest = legacy ? "floor" : n.Text("nearest_mode", "round_prefer_floor");
    if (nearest != "round_prefer_floor" && nearest != "round_prefer_ceil" && nearest != "floor" && nearest != "ceil") {
      return absl::InvalidArgumentError(absl::StrCat("attribute nearest_mode '", nearest, "' is unknown"));
    }
    if (mode == "nearest" && n.Int("antialias", 0) != 0) {
      return absl::InvalidArgumentError("antialias is not defined for mode 'nearest'");
    }
    // The axes scales or sizes give (all by default).
    std::vector<int64_t> axes = n.Ints("axes");
    if (axes.empty()) {
      for (size_t d = 0; d < rank; ++d) axes.push_back(static_cast<int64_t>(d));
    }
    for (int64_t& a : axes) {
      a = NormalizeAxis(a, static_cast<int64_t>(rank));
      if (a < 0 || a >= static_cast<int64_t>(rank)) return absl::InvalidArgumentError("attribute axes out of range");
    }
    if (std::set<int64_t>(axes.begin(), axes.end()).size() != axes.size()) {
      return absl::InvalidArgumentError("attribute axes repeats an axis");
    }
    const size_t given = scales.empty() ? sizes.size() : scales.size();
    if (given != axes.size()) {
      return absl::InvalidArgumentError(absl::StrCat(scales.empty() ? "sizes" : "scales", " has ", given,
                                                     " values for ", axes.size(), " axes"));
    }
    std::vector<double> scale(rank, 1.0);
    std::vector<int64_t> shape = x.shape;
    if (!scales.empty()) {
      for (size_t i = 0; i < axes.size(); ++i) {
        const size_t d = static_cast<size_t>(axes[i]);
        if (!(scales[i] > 0.0f) || !std::isfinite(scales[i])) {
          return absl::InvalidArgumentError(absl::StrCat("scale ", scales[i], " is not a positive number"));
        }
        scale[d] = scales[i];
        const double out = std::floor(scale[d] * static_cast<double>(x.shape[d]));
        if (out < 1 || out > 1e9) return absl::InvalidArgumentError(absl::StrCat("scale ", scales[i], " gives ", out, " elements on axis ", d));
        shape[d] = static_cast<int64_t>(out);
      }
    } else {
      const std::string policy = n.Text("keep_aspect_ratio_policy", "stretch");
      if (policy != "stretch" && policy != "not_larger" && policy != "not_smaller") {
        return absl::InvalidArgumentError(absl::StrCat("attribute keep_aspect_ratio_policy '", policy, "' is unknown"));
      }
      double common = policy == "not_larger" ? INFINITY : 0.0;
      for (size_t i = 0; i < axes.size(); ++i) {
        const size_t d = static_cast<size_t>(axes[i]);
        if (sizes[i] < 1 || sizes[i] > 1000000000) {
          return absl::InvalidArgumentError(absl::StrCat("size ", sizes[i], " is out of range"));
        }
        shape[d] = sizes[i];
        scale[d] = static_cast<double>(sizes[i]) / static_cast<double>(x.shape[d]);
        common = policy == "not_larger" ? std::min(common, scale[d]) : std::max(common, scale[d]);
      }
      if (policy != "stretch") {
        for (int64_t a : axes) {
          const size_t d = static_cast<size_t>(a);
          scale[d] = common;
          shape[d] = static_cast<int64_t>(common * static_cast<double>(x.shape[d]) + 0.5);
          if (shape[d] < 1) return absl::InvalidArgumentError(absl::StrCat("axis ", d, " resizes to 0 elements"));
        }
      }
    }
    if (transform == "tf_crop_and_resize") {
      // The region of interest: per axis in `axes`, a start and an end as fractions
      // of the input (all starts, then all ends); tf_roi holds them for every axis
      // (0 and 1 for the axes not resized).
      if (!Has(n, 1) || !In(n, 1).constant || In(n, 1).dtype != DType::kFloat32) {
        return absl::InvalidArgumentError(
            "coordinate_transformation_mode 'tf_crop_and_resize' needs roi (input 1) as a constant float32 tensor");
      }
      const std::vector<float>& roi = In(n, 1).f32;
      if (roi.size() != 2 * axes.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("roi has ", roi.size(), " values for ", axes.size(), " axes (a start and an end each)"));
      }
      std::vector<float> full(2 * rank, 0.0f);
      for (size_t d = 0; d < rank; ++d) full[rank + d] = 1.0f;
      for (size_t i = 0; i < axes.size(); ++i) {
        if (!std::isfinite(roi[i]) || !std::isfinite(roi[axes.size() + i])) {
          return absl::InvalidArgumentError("roi holds a value that is not finite");
        }
        full[static_cast<size_t>(axes[i])] = roi[i];
        full[rank + static_cast<size_t>(axes[i])] = roi[axes.size() + i];
      }
      n.attrs["tf_roi"].floats = full;
      // onnxruntime and the ONNX reference agree on the linear form with whole output
      // widths only: nearest rounds a tie differently, cubic and a fractional width
      // (scale x input not a whole number) map the coordinates differently.
      if (mode != "linear" || n.Int("antialias", 0) != 0) {
        return absl::UnimplementedError(absl::StrCat(
            "coordinate_transformation_mode 'tf_crop_and_resize' with mode '", mode,
            n.Int("antialias", 0) != 0 ? "' and antialias" : "'",
            " is not supported (linear only: onnxruntime and the ONNX reference differ on the others)"));
      }
      for (int64_t a : axes) {
        const size_t d = static_cast<size_t>(a);
        if (scale[d] * static_cast<double>(x.shape[d]) != static_cast<double>(shape[d])) {
          return absl::UnimplementedError(absl::StrCat(
              "coordinate_transformation_mode 'tf_crop_and_resize' with scale ", scale[d], " on axis ", d, " of ",
              x.shape[d], " elements (not a whole output width) is not supported: give sizes"));
        }
      }
    }
    // The resolved form, for the kernel.
    n.attrs["mode"].text = mode;
    n.attrs["coordinate_transformation_mode"].text = transform;
    n.attrs["nearest_mode"].text = nearest;
    std::vector<std::string> parts;
    for (double v : scale) parts.push_back(absl::StrFormat("%.17g", v));
    n.attrs["tf_scales"].text = absl::StrJoin(parts, ",");
    return std::vector<Tensor>{Like(x, shape)};
  }

  // MaxPool, AveragePool and LpPool over 1 to 3 spatial dimensions.
  absl::StatusOr<std::vector<Tensor>> InferPool(Node& n) {
    RETURN_IF_ERROR(Need(n, 1, 1));
    RETURN_IF_ERROR(NeedFloat(n));
    const auto& x = In(n, 0).shape;
    if (x.size() < 3 || x.size() > 5) {
      return absl::InvalidArgumentError(absl::StrCat("input ", ShapeText(x),
                                                     " is not N x C x 1 to 3 spatial dimensions"));
    }
    const size_t dims = x.size() - 2;
    std::vector<int64_t> kernel = n.Ints("kernel_shape");
    if (kernel.size() != dims || *std::min_element(kernel.begin(), kernel.end()) < 1) {
      return absl::InvalidArgumentError(absl::StrCat("attribute kernel_shape must give ", dims, " sizes >= 1"));
    }
    if (n.op == "LpPool" && n.Int("p", 2) < 1) return absl::InvalidArgumentError("attribute p must be >= 1");
    std::vector<int64_t> pads, spatial;
    RETURN_IF_ERROR(SpatialOut(n, std::vector<int64_t>(x.begin() + 2, x.end()), kernel,
                               n.Int("ceil_mode", 0) != 0, &pads, &spatial));
    n.attrs["pads"].ints = pads;
    n.attrs.erase("auto_pad");
    std::vector<int64_t> shape = {x[0], x[1]};
    shape.insert(shape.end(), spatial.begin(), spatial.end());
    return std::vector<Tensor>{Like(In(n, 0), shape)};
  }

  // Cast (attribute `to`) and CastLike (the type of its second input) to float32,
  // int64 or bool: a constant is converted here (float to int64 rounds toward zero, as
  // C and numpy do; NaN and out-of-range values are refused; nonzero is true); at run
  // time float to int64 becomes tf.Trunc and anything to bool tf.NonZero (elementwise
  // kernels), every other conversion is the identity on the stored values.
  absl::StatusOr<std::vector<Tensor>> InferCast(Node& n) {
    const bool like = n.op == "CastLike";
    RETURN_IF_ERROR(Need(n, like ? 2 : 1, like ? 2 : 1));
    DType to = DType::kFloat32;
    if (like) {
      to = In(n, 1).dtype;
      n.inputs.resize(1);  // only its type is read (it may be empty)
    } else {
      const int64_t code = n.Int("to", -1);
      if (code == onnx::TensorProto::FLOAT) {
        to = DType::kFloat32;
      } else if (code == onnx::TensorProto::INT64) {
        to = DType::kInt64;
      } else if (code == onnx::TensorProto::BOOL) {
        to = DType::kBool;
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("attribute to=", code, " (",
                         onnx::TensorProto::DataType_IsValid(static_cast<int>(code))
                             ? onnx::TensorProto::DataType_Name(static_cast<int>(code))
                             : std::string("unknown"),
                         ") is not supported: float32, int64 and bool only"));
      }
    }
    const Tensor& x = In(n, 0);
    Tensor out = Like(x, x.shape);
    out.dtype = to;
    if (x.constant) {
      out.constant = true;
      if (to == x.dtype || (to == DType::kFloat32 && x.dtype == DType::kBool)) {
        out.f32 = x.f32;  // bool is stored as float32 0 and 1
        out.i64 = x.i64;
      } else if (to == DType::kBool) {
        for (float v : x.f32) out.f32.push_back(v != 0.0f ? 1.0f : 0.0f);
        for (int64_t v : x.i64) out.f32.push_back(v != 0 ? 1.0f : 0.0f);
      } else if (to == DType::kFloat32) {
        for (int64_t v : x.i64) out.f32.push_back(static_cast<float>(v));
      } else {
        for (float v : x.f32) {
          if (!std::isfinite(v) || std::fabs(v) >= 9.2e18f) {
            return absl::InvalidArgumentError(absl::StrCat("cannot convert ", v, " to int64"));
          }
          out.i64.push_back(static_cast<int64_t>(v));
        }
      }
    } else if (to == DType::kInt64 && x.dtype == DType::kFloat32) {
      n.op = "tf.Trunc";  // toward zero; the value must fit the int64 storage (graph.h)
      n.inputs.resize(1);
      n.attrs.clear();
    } else if (to == DType::kBool && x.dtype != DType::kBool) {
      n.op = "tf.NonZero";
      n.inputs.resize(1);
      n.attrs.clear();
    }
    // Otherwise the stored values stay as they are (bool to int64 or float32, int64
    // to float32, the same type): the executor aliases the output to the input.
    return std::vector<Tensor>{std::move(out)};
  }

  absl::StatusOr<std::vector<Tensor>> InferSlice(Node& n) {
    RETURN_IF_ERROR(Need(n, 3, 5));
    const Tensor& x = In(n, 0);
    const int64_t rank = static_cast<int64_t>(x.shape.size());
    ASSIGN_OR_RETURN(std::vector<int64_t> starts, ConstInts(n, 1, "starts"));
    ASSIGN_OR_RETURN(std::vector<int64_t> ends, ConstInts(n, 2, "ends"));
    std::vector<int64_t> axes(starts.size()), steps(starts.size(), 1);
    std::iota(axes.begin(), axes.end(), 0);
    if (Has(n, 3)) {
        ASSIGN_OR_RETURN(axes, ConstInts(n, 3, "axes"));
      }
    if (Has(n, 4)) {
        ASSIGN_OR_RETURN(steps, ConstInts(n, 4, "steps"));
      }
    if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size()) {
      return absl::InvalidArgumentError("starts, ends, axes and steps differ in length");
    }
    std::vector<int64_t> s = x.shape;
    std::vector<int64_t> first(static_cast<size_t>(rank), 0), step(static_cast<size_t>(rank), 1);
    for (size_t i = 0; i < starts.size(); ++i) {
      const int64_t axis = NormalizeAxis(axes[i], rank);
      if (axis < 0 || axis >= rank) return absl::InvalidArgumentError("axes out of range");
      const int64_t dim = x.shape[static_cast<size_t>(axis)];
      if (steps[i] == 0) return absl::InvalidArgumentError("a step of 0");
      auto clamp = [&](int64_t v, bool positive) {
        if (v < 0) v += dim;
        return positive ? std::clamp<int64_t>(v, 0, dim) : std::clamp<int64_t>(v, -1, dim - 1);
      };
      const bool positive = steps[i] > 0;
      const int64_t b = clamp(starts[i], positive), e = clamp(ends[i], positive);
      const int64_t count = positive ? std::max<int64_t>(0, (e - b + steps[i] - 1) / steps[i])
                                     : std::max<int64_t>(0, (b - e - steps[i] - 1) / -steps[i]);
      s[static_cast<size_t>(axis)] = count;
      first[static_cast<size_t>(axis)] = b;
      step[static_cast<size_t>(axis)] = steps[i];
    }
    // Resolved for every axis, for the executor: out[i] = x[first + i * step].
    n.attrs["tf_first"].ints = first;
    n.attrs["tf_step"].ints = step;
    Tensor out = Like(x, s);
    if (x.constant && rank == 1) {  // a piece of a shape vector
      out.constant = true;
      for (int64_t j = 0; j < s[0]; ++j) {
        const size_t k = static_cast<size_t>(first[0] + j * step[0]);
        if (x.dtype == DType::kInt64) {
          out.i64.push_back(x.i64[k]);
        } else {
          out.f32.push_back(x.f32[k]);
        }
      }
    }
    return std::vector<Tensor>{std::move(out)};
  }

  // Comparisons (two inputs of one type) and logic operators (bool inputs): a bool
  // result of the broadcast shape, folded when the inputs are constants.
  absl::StatusOr<std::vector<Tensor>> InferComparisonOrLogic(Node& n) {
    const std::string& op = n.op;
    const bool unary = op == "Not";
    RETURN_IF_ERROR(Need(n, unary ? 1 : 2, unary ? 1 : 2));
    const bool logic = unary || op == "And" || op == "Or" || op == "Xor";
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      if (logic && In(n, i).dtype != DType::kBool) {
        return absl::InvalidArgumentError(absl::StrCat("input ", i, " '", In(n, i).name, "' is ",
                                                       DTypeName(In(n, i).dtype), "; ", op, " takes bool"));
      }
    }
    if (!logic && In(n, 0).dtype != In(n, 1).dtype) {
      return absl::InvalidArgumentError(absl::StrCat("inputs of different types (", DTypeName(In(n, 0).dtype),
                                                     ", ", DTypeName(In(n, 1).dtype), ")"));
    }
    std::vector<int64_t> shape = In(n, 0).shape;
    if (!unary) {
      ASSIGN_OR_RETURN(shape, Broadcast(In(n, 0).shape, In(n, 1).shape));
    }
    Tensor out = Like(In(n, 0), shape);
    out.dtype = DType::kBool;
    bool constant = true;
    for (size_t i = 0; i < n.inputs.size(); ++i) constant &= In(n, i).constant;
    if (constant) {
      const Tensor& a = In(n, 0);
      const Tensor& b = unary ? In(n, 0) : In(n, 1);
      FoldElementwise({&a, &b}, &out, [&](const std::vector<size_t>& at) {
        auto value = [&](const Tensor& t, size_t k) {
          return t.dtype == DType::kInt64 ? static_cast<double>(t.i64[k]) : static_cast<double>(t.f32[k]);
        };
        // int64 compared exactly, not through double.
        const bool ints = a.dtype == DType::kInt64;
        const int64_t ia = ints ? a.i64[at[0]] : 0, ib = ints ? b.i64[at[1]] : 0;
        const double x = value(a, at[0]), y = value(b, at[1]);
        bool r = false;
        if (op == "Less") r = ints ? ia < ib : x < y;
        if (op == "Greater") r = ints ? ia > ib : x > y;
        if (op == "LessOrEqual") r = ints ? ia <= ib : x <= y;
        if (op == "GreaterOrEqual") r = ints ? ia >= ib : x >= y;
        if (op == "Equal") r = ints ? ia == ib : x == y;
        if (op == "Not") r = x == 0.0;
        if (op == "And") r = x != 0.0 && y != 0.0;
        if (op == "Or") r = x != 0.0 || y != 0.0;
        if (op == "Xor") r = (x != 0.0) != (y != 0.0);
        out.f32.push_back(r ? 1.0f : 0.0f);
      });
    }
    return std::vector<Tensor>{std::move(out)};
  }

  // Where(condition, X, Y): X where the bool condition holds, else Y, broadcast.
  absl::StatusOr<std::vector<Tensor>> InferWhere(Node& n) {
    RETURN_IF_ERROR(Need(n, 3, 3));
    const Tensor& c = In(n, 0);
    const Tensor& x = In(n, 1);
    const Tensor& y = In(n, 2);
    if (c.dtype != DType::kBool) {
      return absl::InvalidArgumentError(absl::StrCat("condition '", c.name, "' is ", DTypeName(c.dtype),
                                                     ", not bool"));
    }
    if (x.dtype != y.dtype) {
      return absl::InvalidArgumentError(absl::StrCat("X and Y of different types (", DTypeName(x.dtype), ", ",
                                                     DTypeName(y.dtype), ")"));
    }
    ASSIGN_OR_RETURN(std::vector<int64_t> shape, Broadcast(c.shape, x.shape));
    ASSIGN_OR_RETURN(shape, Broadcast(shape, y.shape));
    Tensor out = Like(x, shape);
    if (c.constant && x.constant && y.constant) {
      FoldElementwise({&c, &x, &y}, &out, [&](const std::vector<size_t>& at) {
        const Tensor& from = c.f32[at[0]] != 0.0f ? x : y;
        const size_t k = c.f32[at[0]] != 0.0f ? at[1] : at[2];
        if (out.dtype == DType::kInt64) {
          out.i64.push_back(from.i64[k]);
        } else {
          out.f32.push_back(from.f32[k]);
        }
      });
    }
    return std::vector<Tensor>{std::move(out)};
  }

  // Calls `element` once per element of `out` (row-major) with the matching element
  // index of each input (broadcast), and marks `out` constant.
  static void FoldElementwise(const std::vector<const Tensor*>& inputs, Tensor* out,
                              const std::function<void(const std::vector<size_t>&)>& element) {
    std::vector<std::vector<int64_t>> strides;
    for (const Tensor* t : inputs) strides.push_back(BroadcastStrides(t->shape, out->shape));
    const int64_t n = out->NumElements();
    out->constant = true;
    std::vector<int64_t> index(out->shape.size(), 0);
    std::vector<size_t> at(inputs.size());
    for (int64_t i = 0; i < n; ++i) {
      for (size_t k = 0; k < inputs.size(); ++k) {
        int64_t flat = 0;
        for (size_t d = 0; d < index.size(); ++d) flat += index[d] * strides[k][d];
        at[k] = static_cast<size_t>(flat);
      }
      element(at);
      for (size_t d = index.size(); d-- > 0;) {
        if (++index[d] < out->shape[d]) break;
        index[d] = 0;
      }
    }
  }

  static void FoldBinary(const std::string& op, const Tensor& a, const Tensor& b, Tensor* out) {
    FoldElementwise({&a, &b}, out, [&](const std::vector<size_t>& at) {
      if (out->dtype == DType::kInt64) {
        const int64_t x = a.i64[at[0]];
        const int64_t y = b.dtype == DType::kInt64 ? b.i64[at[1]] : static_cast<int64_t>(b.f32[at[1]]);
        out->i64.push_back(op == "Add" ? x + y : op == "Sub" ? x - y : op == "Mul" ? x * y
                           : op == "Div" ? (y == 0 ? 0 : x / y)
                                         : static_cast<int64_t>(std::pow(x, y)));
      } else {
        const float x = a.f32[at[0]];
        const float y = b.dtype == DType::kFloat32 ? b.f32[at[1]] : static_cast<float>(b.i64[at[1]]);
        out->f32.push_back(op == "Add" ? x + y : op == "Sub" ? x - y : op == "Mul" ? x * y
                           : op == "Div" ? x / y
                                         : std::pow(x, y));
      }
    });
  }

  // Marks `out` constant with element o = x's element source(o), or 0 where source
  // gives -1 (`fill` for float32).
  static void FoldMap(const Tensor& x, Tensor* out,
                      const std::function<int64_t(const std::vector<int64_t>&)>& source, float fill = 0) {
    const int64_t n = out->NumElements();
    out->constant = true;
    std::vector<int64_t> index(out->shape.size(), 0);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t src = source(index);
      if (x.dtype == DType::kInt64) {
        out->i64.push_back(src < 0 ? static_cast<int64_t>(fill) : x.i64[static_cast<size_t>(src)]);
      } else {
        out->f32.push_back(src < 0 ? fill : x.f32[static_cast<size_t>(src)]);
      }
      for (size_t d = index.size(); d-- > 0;) {
        if (++index[d] < out->shape[d]) break;
        index[d] = 0;
      }
    }
  }

  // Pad: the pads and the pad value as attributes (opset < 11) or constant inputs
  // (opset 11+; opset 18 adds the axes they apply to), normalized into tf_pads
  // (begin and end for every axis) and tf_value for the kernel.
  absl::StatusOr<std::vector<Tensor>> InferPad(Node& n) {
    const bool as_inputs = model_.opset >= 11;
    RETURN_IF_ERROR(as_inputs ? Need(n, 2, 4) : Need(n, 1, 1));
    const Tensor& x = In(n, 0);
    const int64_t rank = static_cast<int64_t>(x.shape.size());
    const std::string mode = n.Text("mode", "constant");
    if (mode != "constant" && mode != "reflect" && mode != "edge" && !(mode == "wrap" && model_.opset >= 19)) {
      return absl::InvalidArgumentError(absl::StrCat("mode '", mode, "' is not one of constant, reflect, edge",
                                                     model_.opset >= 19 ? ", wrap" : ""));
    }
    std::vector<int64_t> pads;
    double value = 0;
    std::vector<int64_t> axes;
    if (as_inputs) {
      ASSIGN_OR_RETURN(pads, ConstInts(n, 1, "pads"));
      if (Has(n, 2)) {
        const Tensor& v = In(n, 2);
        if (!v.constant || v.NumElements() != 1) {
          return absl::InvalidArgumentError(absl::StrCat("constant_value '", v.name, "' must be a constant scalar"));
        }
        value = v.dtype == DType::kInt64 ? static_cast<double>(v.i64[0]) : v.f32[0];
      }
      if (Has(n, 3)) {
        ASSIGN_OR_RETURN(axes, ConstInts(n, 3, "axes"));
      }
    } else {
      pads = n.Ints(n.attrs.count("paddings") ? "paddings" : "pads");
      value = n.Float("value", 0.0f);
    }
    if (axes.empty()) {
      for (int64_t d = 0; d < rank; ++d) axes.push_back(d);
    }
    if (pads.size() != 2 * axes.size()) {
      return absl::InvalidArgumentError(absl::StrCat("pads ", ShapeText(pads), " must have 2 x ", axes.size(),
                                                     " values (begin and end of each padded axis)"));
    }
    std::vector<int64_t> full(static_cast<size_t>(2 * rank), 0);
    for (size_t i = 0; i < axes.size(); ++i) {
      const int64_t a = NormalizeAxis(axes[i], rank);
      if (a < 0 || a >= rank) return absl::InvalidArgumentError(absl::StrCat("axis ", axes[i], " out of range"));
      if (full[static_cast<size_t>(a)] != 0 || full[static_cast<size_t>(a + rank)] != 0) {
        return absl::InvalidArgumentError(absl::StrCat("axis ", axes[i], " is given twice"));
      }
      full[static_cast<size_t>(a)] = pads[i];
      full[static_cast<size_t>(a + rank)] = pads[i + axes.size()];
    }
    std::vector<int64_t> s;
    for (int64_t d = 0; d < rank; ++d) {
      s.push_back(x.shape[static_cast<size_t>(d)] + full[static_cast<size_t>(d)] + full[static_cast<size_t>(d + rank)]);
      if (s.back() < 1) {
        return absl::InvalidArgumentError(absl::StrCat("pads ", ShapeText(full), " leave axis ", d,
                                                       " with ", s.back(), " elements"));
      }
    }
    n.attrs["tf_pads"].ints = full;
    n.attrs["tf_value"].floats = {static_cast<float>(value)};
    Tensor out = Like(x, s);
    if (x.constant) {
      const std::vector<int64_t> strides = BroadcastStrides(x.shape, x.shape);
      FoldMap(x, &out, [&](const std::vector<int64_t>& o) {
        int64_t src = 0;
        for (size_t d = 0; d < o.size(); ++d) {
          const int64_t i = PadSource(o[d], full[d], full[d + static_cast<size_t>(rank)], x.shape[d], mode);
          if (i < 0) return int64_t{-1};
          src += i * strides[d];
        }
        return src;
      }, static_cast<float>(value));
    }
    return std::vector<Tensor>{std::move(out)};
  }

  static void FoldTranspose(const Tensor& x, const std::vector<int64_t>& perm, Tensor* out) {
    std::vector<int64_t> in_strides(x.shape.size(), 1);
    for (size_t d = x.shape.size(); d-- > 1;) in_strides[d - 1] = in_strides[d] * x.shape[d];
    const int64_t n = out->NumElements();
    out->constant = true;
    std::vector<int64_t> index(out->shape.size(), 0);
    for (int64_t i = 0; i < n; ++i) {
      int64_t src = 0;
      for (size_t d = 0; d < index.size(); ++d) src += index[d] * in_strides[static_cast<size_t>(perm[d])];
      if (x.dtype == DType::kInt64) {
        out->i64.push_back(x.i64[static_cast<size_t>(src)]);
      } else {
        out->f32.push_back(x.f32[static_cast<size_t>(src)]);
      }
      for (size_t d = index.size(); d-- > 0;) {
        if (++index[d] < out->shape[d]) break;
        index[d] = 0;
      }
    }
  }

  // How many nodes read each tensor, a graph output counting as one more reader.
  std::vector<int> UseCounts() const {
    std::vector<int> uses(graph_.tensors.size(), 0);
    for (const Node& n : graph_.nodes) {
      for (int in : n.inputs) {
        if (in >= 0) ++uses[static_cast<size_t>(in)];
      }
    }
    for (int out : graph_.outputs) ++uses[static_cast<size_t>(out)];
    return uses;
  }

  // Sum of two float tensors is Add (the same broadcast, the same arithmetic): as Add
  // it is what the executor fuses into a conv's epilogue (the residual of ResNet-50 v1
  // as the model zoo exported it) or into an elementwise chain.
  void SumsOfTwoAsAdds() {
    for (Node& n : graph_.nodes) {
      if (n.op == "Sum" && n.inputs.size() == 2 && T(n.outputs[0]).dtype == DType::kFloat32) n.op = "Add";
    }
  }

  // Pad (constant 0, spatial axes only, growing) -> 2-D Conv, the padded tensor read
  // by that conv alone, as TensorFlow exports SAME padding: the pads join the conv's
  // when the sum is the same on every side (what the conv templates take; uneven
  // pads would leave the template for the direct kernel, slower than the copy).
  void FoldPadsIntoConvs() {
    const std::vector<int> uses = UseCounts();
    std::vector<bool> removed(graph_.nodes.size(), false);
    for (size_t i = 0; i < graph_.nodes.size(); ++i) {
      const Node& pad = graph_.nodes[i];
      if (pad.op != "Pad" || pad.Text("mode", "constant") != "constant" || pad.Float("tf_value", 0) != 0.0f ||
          uses[static_cast<size_t>(pad.outputs[0])] != 1 || T(pad.inputs[0]).shape.size() != 4) {
        continue;
      }
      const std::vector<int64_t> p = pad.Ints("tf_pads");  // begin N, C, H, W; end N, C, H, W
      if (p[0] != 0 || p[1] != 0 || p[4] != 0 || p[5] != 0 || *std::min_element(p.begin(), p.end()) < 0) continue;
      for (size_t j = i + 1; j < graph_.nodes.size(); ++j) {
        Node& conv = graph_.nodes[j];
        if (conv.op != "Conv" || conv.inputs[0] != pad.outputs[0]) continue;
        if (conv.Text("auto_pad", "NOTSET") != "NOTSET") break;
        const std::vector<int64_t> cp = conv.Ints("pads", {0, 0, 0, 0});  // top, left, bottom, right
        if (cp.size() != 4) break;
        const std::vector<int64_t> sum = {cp[0] + p[2], cp[1] + p[3], cp[2] + p[6], cp[3] + p[7]};
        if (sum[0] != sum[1] || sum[0] != sum[2] || sum[0] != sum[3]) break;
        conv.attrs["pads"].ints = sum;
        conv.inputs[0] = pad.inputs[0];
        removed[i] = true;
        break;
      }
    }
    std::vector<Node> kept;
    for (size_t i = 0; i < graph_.nodes.size(); ++i) {
      if (!removed[i]) kept.push_back(std::move(graph_.nodes[i]));
    }
    graph_.nodes = std::move(kept);
  }

  // Conv -> BatchNormalization, the conv's output used by nothing else and every
  // parameter constant: the BN's scale and shift go into the conv's weight and bias,
  // and the BN node disappears (what an unoptimized export leaves for the importer).
  void FoldBatchNorms() {
    const std::vector<int> uses = UseCounts();
    std::vector<bool> removed(graph_.nodes.size(), false);
    for (size_t i = 0; i < graph_.nodes.size(); ++i) {
      Node& bn = graph_.nodes[i];
      if (bn.op != "BatchNormalization") continue;
      const int x = bn.inputs[0];
      Node* conv = nullptr;
      for (size_t j = 0; j < i; ++j) {
        if (!removed[j] && graph_.nodes[j].op == "Conv" && graph_.nodes[j].outputs[0] == x) {
          conv = &graph_.nodes[j];
        }
      }
      if (conv == nullptr || uses[static_cast<size_t>(x)] != 1) continue;
      bool constant = T(conv->inputs[1]).constant;
      for (size_t k = 1; k < 5; ++k) constant &= T(bn.inputs[k]).constant;
      if (conv->inputs.size() > 2 && conv->inputs[2] >= 0) constant &= T(conv->inputs[2]).constant;
      if (!constant) continue;
      const Tensor& w = T(conv->inputs[1]);
      const int64_t out_channels = w.shape[0];
      const int64_t per_channel = w.NumElements() / out_channels;
      const float eps = bn.Float("epsilon", 1e-5f);
      Tensor folded_w = w;
      folded_w.name = w.name + "/bn_folded";
      Tensor folded_b;
      folded_b.name = conv->name + "/bn_folded_bias";
      folded_b.constant = true;
      folded_b.shape = {out_channels};
      const bool has_bias = conv->inputs.size() > 2 && conv->inputs[2] >= 0;
      for (int64_t c = 0; c < out_channels; ++c) {
        const size_t cc = static_cast<size_t>(c);
        const float scale = T(bn.inputs[1]).f32[cc] / std::sqrt(T(bn.inputs[4]).f32[cc] + eps);
        for (int64_t k = 0; k < per_channel; ++k) folded_w.f32[static_cast<size_t>(c * per_channel + k)] *= scale;
        const float bias = has_bias ? T(conv->inputs[2]).f32[cc] : 0.0f;
        folded_b.f32.push_back((bias - T(bn.inputs[3]).f32[cc]) * scale + T(bn.inputs[2]).f32[cc]);
      }
      const int w_id = Add(std::move(folded_w));
      const int b_id = Add(std::move(folded_b));
      Node& c = *conv;  // Add may have moved tensors, not nodes
      c.inputs.resize(3);
      c.inputs[1] = w_id;
      c.inputs[2] = b_id;
      c.outputs[0] = bn.outputs[0];
      removed[i] = true;
    }
    std::vector<Node> kept;
    for (size_t i = 0; i < graph_.nodes.size(); ++i) {
      if (removed[i]) continue;
      // A BatchNormalization that follows no convolution (DenseNet's BN-ReLU-Conv,
      // a BN after a Concat) and has constant parameters becomes Mul and Add by a
      // per-channel scale and shift: elementwise nodes, which fuse with the ReLU
      // after them into one pass over memory instead of two.
      if (graph_.nodes[i].op == "BatchNormalization" && graph_.nodes[i].outputs.size() == 1 &&
          AffineBatchNorm(graph_.nodes[i], &kept)) {
        continue;
      }
      kept.push_back(std::move(graph_.nodes[i]));
    }
    graph_.nodes = std::move(kept);
  }

  // Appends Mul(x, scale) and Add(., shift) computing BatchNormalization `bn` (scale
  // and shift [1, C, 1, ...] from its constant parameters) to `out`; false when a
  // parameter is computed at run time.
  bool AffineBatchNorm(const Node& bn, std::vector<Node>* out) {
    for (size_t k = 1; k < 5; ++k) {
      if (!T(bn.inputs[k]).constant || T(bn.inputs[k]).dtype != DType::kFloat32) return false;
    }
    const Tensor& x = T(bn.inputs[0]);
    if (x.shape.size() < 2) return false;
    const int64_t channels = x.shape[1];
    std::vector<int64_t> per_channel(x.shape.size(), 1);
    per_channel[1] = channels;
    Tensor scale = Like(x, per_channel), shift = Like(x, per_channel), scaled = Like(x, x.shape);
    scale.name = bn.name + "/scale";
    shift.name = bn.name + "/shift";
    scaled.name = bn.name + "/scaled";
    scale.constant = shift.constant = true;
    const float eps = bn.Float("epsilon", 1e-5f);
    for (int64_t c = 0; c < channels; ++c) {
      const size_t cc = static_cast<size_t>(c);
      const float sc = T(bn.inputs[1]).f32[cc] / std::sqrt(T(bn.inputs[4]).f32[cc] + eps);
      scale.f32.push_back(sc);
      shift.f32.push_back(T(bn.inputs[2]).f32[cc] - T(bn.inputs[3]).f32[cc] * sc);
    }
    const int scale_id = Add(std::move(scale)), shift_id = Add(std::move(shift)), scaled_id = Add(std::move(scaled));
    out->push_back(Node{bn.name + "/mul", "Mul", {bn.inputs[0], scale_id}, {scaled_id}, {}});
    out->push_back(Node{bn.name + "/add", "Add", {scaled_id, shift_id}, {bn.outputs[0]}, {}});
    return true;
  }

  // Einsum -> Transpose, view, MatMul, view, Transpose (EinsumPlan); a transpose of a
  // constant (a weight) is done here, one that changes nothing is left out.
  void LowerEinsums() {
    std::vector<Node> nodes;
    for (Node& n : graph_.nodes) {
      if (n.op != "Einsum") {
        nodes.push_back(std::move(n));
        continue;
      }
      const EinsumPlan plan = *PlanEinsum(n.Text("equation", ""), T(n.inputs[0]).shape, T(n.inputs[1]).shape);
      int step = 0;
      auto fresh = [&](const Tensor& like, std::vector<int64_t> shape) {
        Tensor t = Like(like, std::move(shape));
        t.name = absl::StrCat(n.name, "/", step++);
        return Add(std::move(t));
      };
      auto transpose = [&](int in, const std::vector<int64_t>& perm) {
        bool identity = true;
        for (size_t i = 0; i < perm.size(); ++i) identity &= perm[i] == static_cast<int64_t>(i);
        if (identity) return in;
        std::vector<int64_t> shape;
        for (int64_t p : perm) shape.push_back(T(in).shape[static_cast<size_t>(p)]);
        const int out = fresh(T(in), shape);
        if (T(in).constant) {
          const Tensor x = T(in);
          FoldTranspose(x, perm, &T(out));
          return out;
        }
        Node t{absl::StrCat(n.name, "/transpose", step), "Transpose", {in}, {out}, {}};
        t.attrs["perm"].ints = perm;
        nodes.push_back(std::move(t));
        return out;
      };
      auto view = [&](int in, const std::vector<int64_t>& shape) {
        if (T(in).shape == shape) return in;
        const int out = fresh(T(in), shape);
        if (T(in).constant) {
          T(out).constant = true;
          T(out).f32 = T(in).f32;
          return out;
        }
        nodes.push_back(Node{absl::StrCat(n.name, "/view", step), "Identity", {in}, {out}, {}});
        return out;
      };
      const int a = view(transpose(n.inputs[0], plan.perm_a), plan.a3);
      const int b = view(transpose(n.inputs[1], plan.perm_b), plan.b3);
      const int product = fresh(T(a), plan.product);
      nodes.push_back(Node{absl::StrCat(n.name, "/matmul"), "MatMul", {a, b}, {product}, {}});
      const int split = view(product, plan.split);
      bool identity = true;
      for (size_t i = 0; i < plan.perm_out.size(); ++i) identity &= plan.perm_out[i] == static_cast<int64_t>(i);
      if (identity) {
        nodes.push_back(Node{absl::StrCat(n.name, "/view_out"), "Identity", {split}, {n.outputs[0]}, {}});
      } else {
        Node t{absl::StrCat(n.name, "/transpose_out"), "Transpose", {split}, {n.outputs[0]}, {}};
        t.attrs["perm"].ints = plan.perm_out;
        nodes.push_back(std::move(t));
      }
    }
    graph_.nodes = std::move(nodes);
  }

  // Nodes none of whose outputs reach a graph output.
  void RemoveDeadNodes() {
    std::vector<bool> needed(graph_.tensors.size(), false);
    for (int out : graph_.outputs) needed[static_cast<size_t>(out)] = true;
    std::vector<Node> kept;
    for (size_t i = graph_.nodes.size(); i-- > 0;) {
      Node& n = graph_.nodes[i];
      bool live = false;
      for (int out : n.outputs) live |= needed[static_cast<size_t>(out)];
      if (!live) continue;
      for (int in : n.inputs) {
        if (in >= 0) needed[static_cast<size_t>(in)] = true;
      }
      kept.push_back(std::move(n));
    }
    std::reverse(kept.begin(), kept.end());
    graph_.nodes = std::move(kept);
  }

  const frontend::OnnxModel& model_;
  Graph graph_;
  std::optional<Tensor> pending_constant_;  // a Constant node's `value` tensor
  int64_t split_outputs_ = 1;  // the node's output count, for Split's equal parts
};

}  // namespace

int64_t PadSource(int64_t o, int64_t begin, int64_t end, int64_t n, const std::string& mode) {
  // Negative pads crop first: the kept input elements are [lo, hi).
  const int64_t lo = std::max<int64_t>(-begin, 0), hi = n - std::max<int64_t>(-end, 0), len = hi - lo;
  const int64_t i = o - begin;
  if (i >= lo && i < hi) return i;
  if (mode == "edge") return i < lo ? lo : hi - 1;
  if (mode == "wrap") return lo + ((i - lo) % len + len) % len;
  if (mode == "reflect") {
    const int64_t period = 2 * (len - 1);
    if (period == 0) return lo;
    const int64_t r = ((i - lo) % period + period) % period;
    return lo + (r < len ? r : period - r);
  }
  return -1;
}

bool IsUnaryElementwiseOp(const std::string& op) {
  static const std::set<std::string> ops = {
      "Abs",      "Acos",        "Acosh",     "Asin",    "Asinh",    "Atan",      "Atanh",
      "Ceil",     "Celu",        "Cos",       "Cosh",    "Elu",      "Erf",       "Exp",
      "Floor",    "Gelu",        "HardSigmoid", "HardSwish", "LeakyRelu", "Log", "Mish",
      "Neg",      "Reciprocal",  "Relu",      "Round",   "Selu",     "Shrink",    "Sigmoid",
      "Sign",     "Sin",         "Sinh",      "Softplus", "Softsign", "Sqrt",     "Tan",
      "Tanh",     "ThresholdedRelu", "tf.Trunc", "tf.NonZero"};
  return ops.count(op) > 0;
}

bool IsComparisonOrLogicOp(const std::string& op) {
  static const std::set<std::string> ops = {"Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Equal",
                                            "Not",  "And",     "Or",          "Xor"};
  return ops.count(op) > 0;
}

bool IsReduceOp(const std::string& op) {
  static const std::set<std::string> ops = {"ReduceL1",  "ReduceL2",        "ReduceLogSum",
                                            "ReduceLogSumExp", "ReduceMax", "ReduceMean",
                                            "ReduceMin", "ReduceProd", "ReduceSum", "ReduceSumSquare"};
  return ops.count(op) > 0;
}

absl::StatusOr<Graph> ImportOnnx(const frontend::OnnxModel& model) {
  return Importer(model).Run();
}

std::string PrintGraph(const Graph& g) {
  std::ostringstream os;
  auto name = [&](int id) { return id < 0 ? std::string("-") : g.tensors[static_cast<size_t>(id)].name; };
  auto typed = [&](int id) {
    const Tensor& t = g.tensors[static_cast<size_t>(id)];
    return absl::StrCat(t.name, ": ", DTypeName(t.dtype), ShapeText(t.shape));
  };
  os << "inputs:";
  for (int id : g.inputs) os << " " << typed(id);
  os << "\n";
  for (const Node& n : g.nodes) {
    std::vector<std::string> ins, outs, attrs;
    for (int id : n.inputs) {
      const bool constant = id >= 0 && g.tensors[static_cast<size_t>(id)].constant;
      ins.push_back(constant ? absl::StrCat(name(id), "=const", ShapeText(g.tensors[static_cast<size_t>(id)].shape))
                             : name(id));
    }
    for (int id : n.outputs) outs.push_back(typed(id));
    for (const auto& [key, a] : n.attrs) {
      if (!a.text.empty()) {
        attrs.push_back(absl::StrCat(key, "=", a.text));
      } else if (!a.ints.empty()) {
        attrs.push_back(absl::StrCat(key, "=", a.ints.size() == 1 ? std::to_string(a.ints[0]) : ShapeText(a.ints)));
      } else if (!a.floats.empty()) {
        attrs.push_back(absl::StrCat(key, "=", a.floats[0]));
      }
    }
    os << "  " << n.name << " = " << n.op << "(" << absl::StrJoin(ins, ", ") << ")";
    if (!attrs.empty()) os << " {" << absl::StrJoin(attrs, ", ") << "}";
    os << " -> " << absl::StrJoin(outs, ", ") << "\n";
  }
  os << "outputs:";
  for (int id : g.outputs) os << " " << typed(id);
  os << "\n";
  return os.str();
}

}  // namespace tuneforge::graph

// Loop-IR kernels of the operators that are not tuning tasks (elementwise, pooling, ...).
#include "compiler/graph/kernels.h"

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <tuple>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "compiler/support/hash.h"
#include "compiler/support/status.h"

namespace tuneforge::graph {

namespace {

using ir::Expr;
using ir::FloatImm;
using ir::ForKind;
using ir::IntImm;
using ir::Stmt;
using ir::Var;

// A strided view of a flat buffer, indexed by the loop nest's dimensions: element
// (i0, i1, ...) is buffer[offset + i0*strides[0] + i1*strides[1] + ...]. A stride of 0
// broadcasts.
struct View {
  std::string buffer;
  int64_t offset = 0;
  std::vector<int64_t> strides;
};

std::vector<int64_t> RowMajorStrides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) s[i - 1] = s[i] * shape[i];
  return s;
}

// The view of a tensor of `shape` broadcast (numpy rules) to `out`.
View Broadcast(const std::string& buffer, const std::vector<int64_t>& shape,
               const std::vector<int64_t>& out) {
  View v{buffer, 0, std::vector<int64_t>(out.size(), 0)};
  const std::vector<int64_t> s = RowMajorStrides(shape);
  const size_t lead = out.size() - shape.size();
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] != 1) v.strides[lead + i] = s[i];
  }
  return v;
}

View Contiguous(const std::string& buffer, const std::vector<int64_t>& shape) {
  return View{buffer, 0, RowMajorStrides(shape)};
}

// Unique loop-variable names within one kernel.
class Names {
 public:
  std::string operator()(const std::string& base) { return absl::StrCat(base, ".", next_++); }

 private:
  int next_ = 0;
};

Expr At(const View& v, const std::vector<Expr>& idx) {
  Expr e = IntImm(v.offset);
  for (size_t d = 0; d < idx.size(); ++d) {
    if (v.strides[d] != 0) e = ir::Add(e, ir::Mul(idx[d], IntImm(v.strides[d])));
  }
  return e;
}

Expr LoadAt(const View& v, const std::vector<Expr>& idx) {
  return ir::Load(v.buffer, ir::DType::kFloat32, At(v, idx));
}

using ValueFn = std::function<Expr(const std::vector<Expr>& loaded)>;

// out(view) = f(ins(views)...) over every index of `shape`: dimensions that every
// view walks the same way are merged, the outer ones (and chunks of the last) are
// spread over threads, and the last is vectorized by `lanes` with a scalar tail.
Stmt ElementwiseNest(std::vector<int64_t> shape, View out, std::vector<View> ins, const ValueFn& f,
                     int lanes, Names& names) {
  // Merge dimensions (and drop those of extent 1).
  std::vector<int64_t> dims;
  std::vector<View*> all = {&out};
  for (View& v : ins) all.push_back(&v);
  std::vector<std::vector<int64_t>> strides(all.size());
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool merge = !dims.empty();
    for (size_t k = 0; k < all.size() && merge; ++k) {
      merge = strides[k].back() == all[k]->strides[d] * shape[d];
    }
    if (merge) {
      dims.back() *= shape[d];
      for (size_t k = 0; k < all.size(); ++k) strides[k].back() = all[k]->strides[d];
    } else {
      dims.push_back(shape[d]);
      for (size_t k = 0; k < all.size(); ++k) strides[k].push_back(all[k]->strides[d]);
    }
  }
  if (dims.empty()) {
    dims.push_back(1);
    for (auto& s : strides) s.push_back(0);
  }
  for (size_t k = 0; k < all.size(); ++k) all[k]->strides = strides[k];

  const size_t rank = dims.size();
  const int64_t last = dims.back();
  const int64_t rows = Product(dims, 0, rank - 1);
  constexpr int64_t kChunk = 16384;  // elements of the last dimension per parallel step
  const int64_t chunk = last <= kChunk ? last : kChunk;
  const int64_t chunks = (last + chunk - 1) / chunk;

  const std::string p = names("p");
  Expr row = chunks == 1 ? Var(p) : ir::Div(Var(p), IntImm(chunks));
  Expr start = chunks == 1 ? IntImm(0) : ir::Mul(ir::Mod(Var(p), IntImm(chunks)), IntImm(chunk));
  Expr len = chunks == 1 ? IntImm(last) : ir::Min(IntImm(chunk), ir::Sub(IntImm(last), start));
  // The outer indices from the row number.
  std::vector<Expr> idx = ir::Unflatten(row, std::vector<int64_t>(dims.begin(), dims.end() - 1));
  idx.resize(rank);
  auto store = [&](Expr j) {
    idx[rank - 1] = j;
    std::vector<Expr> loaded;
    for (const View& v : ins) loaded.push_back(LoadAt(v, idx));
    return ir::Store(out.buffer, At(out, idx), f(loaded));
  };
  std::vector<Stmt> inner;
  const int64_t vec = lanes > 1 && last >= lanes ? lanes : 1;
  if (vec > 1) {
    const std::string jo = names("jo"), ji = names("ji");
    Stmt body = store(ir::Add(start, ir::Add(ir::Mul(Var(jo), IntImm(vec)), Var(ji))));
    body = ir::For(ji, IntImm(vec), vec, ForKind::kVectorized, body);
    int64_t body_max = chunk / vec;
    ir::IsConst(ir::Div(len, IntImm(vec)), &body_max);
    inner.push_back(ir::For(jo, ir::Div(len, IntImm(vec)), body_max, ForKind::kSerial, body));
  }
  if (vec == 1 || last % vec != 0 || chunks > 1) {
    const std::string jt = names("jt");
    Expr tail_start = vec == 1 ? start : ir::Add(start, ir::Mul(ir::Div(len, IntImm(vec)), IntImm(vec)));
    Expr tail_len = vec == 1 ? len : ir::Mod(len, IntImm(vec));
    int64_t tail_max = vec == 1 ? chunk : vec - 1;
    ir::IsConst(tail_len, &tail_max);
    inner.push_back(ir::For(jt, tail_len, tail_max, ForKind::kSerial, store(ir::Add(tail_start, Var(jt)))));
  }
  return ir::For(p, IntImm(rows * chunks), rows * chunks, ForKind::kParallel, ir::Block(inner));
}

// How RowReduce combines its terms.
enum class Combine { kSum, kMax, kMin, kProduct };

// Reduces term(j) for j in [0, n) into result[0] (a local of one element): a sum, a
// maximum, a minimum or a product. With `lanes` > 1, `lanes` partial results are kept
// in one vector (the terms must then be contiguous in j to load as vectors).
Stmt RowReduce(const std::string& result, int64_t n, const std::function<Expr(Expr)>& term,
               Combine how, int lanes, Names& names) {
  const float inf = std::numeric_limits<float>::infinity();
  const Expr init = FloatImm(how == Combine::kMax   ? -inf
                             : how == Combine::kMin ? inf
                             : how == Combine::kProduct ? 1.0
                                                        : 0.0);
  auto combine = [&](Expr a, Expr b) {
    switch (how) {
      case Combine::kMax: return ir::Max(a, b);
      case Combine::kMin: return ir::Min(a, b);
      case Combine::kProduct: return ir::Mul(a, b);
      case Combine::kSum: break;
    }
    return ir::Add(a, b);
  };
  const int64_t vec = lanes > 1 && n >= lanes ? lanes : 1;
  const std::string part = names("part");
  auto at = [&](Expr i) { return ir::Load(part, ir::DType::kFloat32, i); };
  std::vector<Stmt> s;
  const std::string v0 = names("v");
  s.push_back(ir::For(v0, IntImm(vec), vec, vec > 1 ? ForKind::kVectorized : ForKind::kSerial,
                      ir::Store(part, Var(v0), init)));
  if (n / vec > 0) {
    const std::string jo = names("jo"), v = names("v");
    Stmt body = ir::Store(part, Var(v),
                          combine(at(Var(v)), term(ir::Add(ir::Mul(Var(jo), IntImm(vec)), Var(v)))));
    body = ir::For(v, IntImm(vec), vec, vec > 1 ? ForKind::kVectorized : ForKind::kSerial, body);
    s.push_back(ir::For(jo, IntImm(n / vec), n / vec, ForKind::kSerial, body));
  }
  if (n % vec != 0) {
    const std::string jt = names("jt");
    s.push_back(ir::For(jt, IntImm(n % vec), n % vec, ForKind::kSerial,
                        ir::Store(part, IntImm(0),
                                  combine(at(IntImm(0)), term(ir::Add(IntImm(n / vec * vec), Var(jt)))))));
  }
  s.push_back(ir::Store(result, IntImm(0), at(IntImm(0))));
  for (int64_t l = 1; l < vec; ++l) {
    s.push_back(ir::Store(result, IntImm(0),
                          combine(ir::Load(result, ir::DType::kFloat32, IntImm(0)), at(IntImm(l)))));
  }
  return ir::Allocate(part, ir::DType::kFloat32, vec, ir::Block(s));
}

Expr Scalar(const std::string& local) { return ir::Load(local, ir::DType::kFloat32, IntImm(0)); }

// The kernel under construction: parameters bound to graph tensors.
class Builder {
 public:
  Builder(const Graph& g, std::string name) : g_(g) { k_.func.name = std::move(name); }

  // Adds tensor `t` as a parameter; returns its buffer name.
  std::string Param(int t, bool is_output = false) {
    const std::string name = absl::StrCat(is_output ? "y" : "x", k_.func.params.size());
    k_.func.params.push_back(ir::BufferParam{name, ir::DType::kFloat32, Shape(t), is_output});
    k_.tensors.push_back(t);
    return name;
  }
  // A parameter with data computed here.
  std::string Constant(std::vector<float> data) {
    const std::string name = absl::StrCat("c", k_.func.params.size());
    const int64_t n = static_cast<int64_t>(data.size());
    k_.func.params.push_back(ir::BufferParam{name, ir::DType::kFloat32, {n}, false});
    k_.constants[k_.func.params.size() - 1] = std::move(data);
    k_.tensors.push_back(-1);
    return name;
  }
  const std::vector<int64_t>& Shape(int t) const { return g_.tensors[static_cast<size_t>(t)].shape; }

  NodeKernel Finish(Stmt body) {
    k_.func.body = std::move(body);
    // Equal kernels get equal names, so the executor builds each once.
    std::string text = ir::ToString(k_.func.body);
    for (const ir::BufferParam& p : k_.func.params) {
      absl::StrAppend(&text, "|", p.name, ":", p.NumElements());
    }
    k_.func.name = absl::StrCat("tf_", k_.func.name, "_", HashHex(text).substr(0, 12));
    return std::move(k_);
  }

  Names names;

 private:
  const Graph& g_;
  NodeKernel k_;
};

absl::Status Unsupported(const Node& n, const std::string& what) {
  return absl::UnimplementedError(
      absl::StrCat("node '", n.name, "' (", n.op, "): ", what, " is not supported by the executor"));
}

const Tensor& T(const Graph& g, int id) { return g.tensors[static_cast<size_t>(id)]; }

// A constant scalar input, or `fallback` when the input is absent.
float ConstScalar(const Graph& g, const Node& n, size_t input, float fallback) {
  if (input >= n.inputs.size() || n.inputs[input] < 0) return fallback;
  const Tensor& t = T(g, n.inputs[input]);
  return t.f32.empty() ? fallback : t.f32[0];
}

std::pair<float, float> ClipBounds(const Graph& g, const Node& n) {
  const float inf = std::numeric_limits<float>::infinity();
  if (n.inputs.size() > 1) return {ConstScalar(g, n, 1, -inf), ConstScalar(g, n, 2, inf)};
  return {n.Float("min", -inf), n.Float("max", inf)};
}

Expr ClipExpr(Expr x, float lo, float hi) {
  if (std::isfinite(lo)) x = ir::Max(x, FloatImm(lo));
  if (std::isfinite(hi)) x = ir::Min(x, FloatImm(hi));
  return x;
}

Expr Sigmoid(Expr x) {
  return ir::Div(FloatImm(1.0), ir::Add(FloatImm(1.0), ir::Call("exp", ir::Mul(x, FloatImm(-1.0)))));
}

// x ** y for a constant exponent: products for small integers, sqrt for halves,
// exp(y * log(x)) otherwise (NaN for negative x, as ONNX's Pow gives).
Expr PowConst(Expr x, float y) {
  if (y == std::round(y) && std::fabs(y) <= 8) {
    const int n = static_cast<int>(std::fabs(y));
    Expr p = FloatImm(1.0);
    for (int i = 0; i < n; ++i) p = i == 0 ? x : ir::Mul(p, x);
    return y < 0 ? ir::Div(FloatImm(1.0), p) : p;
  }
  if (y == 0.5f) return ir::Call("sqrt", x);
  if (y == -0.5f) return ir::Div(FloatImm(1.0), ir::Call("sqrt", x));
  return ir::Call("exp", ir::Mul(FloatImm(y), ir::Call("log", x)));
}

// max(x, 0) + log(1 + exp(-|x|)): log(1 + exp(x)) without overflow for large x.
Expr Softplus(Expr x) {
  return ir::Add(ir::Max(x, FloatImm(0.0)),
                 ir::Call("log", ir::Add(FloatImm(1.0), ir::Call("exp", ir::Mul(ir::Call("abs", x), FloatImm(-1.0))))));
}

// exp(x) - 1 for x <= 0 (the negative side of Elu, Selu and Celu).
Expr ExpMinusOne(Expr x) { return ir::Sub(ir::Call("exp", x), FloatImm(1.0)); }

// The value of unary elementwise operator `n` (graph::IsUnaryElementwiseOp) from its
// input's, the node's attributes folded in. Step functions are products with step(x)
// (1 where x > 0) of values kept finite, so that an infinite input gives the
// operator's value, not inf * 0.
absl::StatusOr<Expr> UnaryExpr(const Node& n, Expr x) {
  const std::string& op = n.op;
  auto negative = [](Expr e) { return ir::Mul(e, FloatImm(-1.0)); };
  if (op == "Relu") return ir::Max(x, FloatImm(0.0));
  if (op == "Sigmoid") return Sigmoid(x);
  if (op == "Tanh") return ir::Call("tanh", x);
  if (op == "Erf") return ir::Call("erf", x);
  if (op == "Sqrt") return ir::Call("sqrt", x);
  if (op == "Exp") return ir::Call("exp", x);
  if (op == "Log") return ir::Call("log", x);
  if (op == "Abs") return ir::Call("abs", x);
  if (op == "Neg") return negative(x);
  if (op == "Reciprocal") return ir::Div(FloatImm(1.0), x);
  if (op == "Floor") return ir::Call("floor", x);
  if (op == "Ceil") return ir::Call("ceil", x);
  if (op == "Round") return ir::Call("round", x);
  if (op == "Sign") return ir::Sub(ir::Call("step", x), ir::Call("step", negative(x)));
  if (op == "tf.Trunc") return ir::Select(ir::LT(x, FloatImm(0.0)), ir::Call("ceil", x), ir::Call("floor", x));
  if (op == "tf.NonZero") return ir::Select(ir::EQ(x, FloatImm(0.0)), FloatImm(0.0), FloatImm(1.0));
  static const std::map<std::string, std::string> kMath = {
      {"Sin", "sin"},   {"Cos", "cos"},   {"Tan", "tan"},   {"Asin", "asin"},
      {"Acos", "acos"}, {"Atan", "atan"}, {"Sinh", "sinh"}, {"Cosh", "cosh"}};
  if (auto it = kMath.find(op); it != kMath.end()) return ir::Call(it->second, x);
  if (op == "Asinh") {  // sign(x) * log(|x| + sqrt(x^2 + 1))
    Expr a = ir::Call("abs", x);
    Expr v = ir::Call("log", ir::Add(a, ir::Call("sqrt", ir::Add(ir::Mul(a, a), FloatImm(1.0)))));
    return ir::Mul(v, ir::Sub(ir::Call("step", x), ir::Call("step", negative(x))));
  }
  if (op == "Acosh") {
    return ir::Call("log", ir::Add(x, ir::Call("sqrt", ir::Sub(ir::Mul(x, x), FloatImm(1.0)))));
  }
  if (op == "Atanh") {
    return ir::Mul(FloatImm(0.5), ir::Call("log", ir::Div(ir::Add(FloatImm(1.0), x), ir::Sub(FloatImm(1.0), x))));
  }
  if (op == "Softplus") return Softplus(x);
  if (op == "Softsign") return ir::Div(x, ir::Add(FloatImm(1.0), ir::Call("abs", x)));
  if (op == "Mish") return ir::Mul(x, ir::Call("tanh", Softplus(x)));
  if (op == "LeakyRelu") {
    return ir::Add(ir::Max(x, FloatImm(0.0)), ir::Mul(FloatImm(n.Float("alpha", 0.01f)), ir::Min(x, FloatImm(0.0))));
  }
  if (op == "Elu" || op == "Selu") {
    const float alpha = n.Float("alpha", op == "Elu" ? 1.0f : 1.67326319217681884765625f);
    Expr v = ir::Add(ir::Max(x, FloatImm(0.0)), ir::Mul(FloatImm(alpha), ExpMinusOne(ir::Min(x, FloatImm(0.0)))));
    return op == "Elu" ? v : ir::Mul(FloatImm(n.Float("gamma", 1.05070102214813232421875f)), v);
  }
  if (op == "Celu") {
    const float alpha = n.Float("alpha", 1.0f);
    if (alpha == 0.0f) return Unsupported(n, "alpha = 0");
    return ir::Add(ir::Max(x, FloatImm(0.0)),
                   ir::Mul(FloatImm(alpha), ExpMinusOne(ir::Min(ir::Div(x, FloatImm(alpha)), FloatImm(0.0)))));
  }
  if (op == "HardSigmoid" || op == "HardSwish") {
    const float alpha = op == "HardSwish" ? 1.0f / 6.0f : n.Float("alpha", 0.2f);
    const float beta = op == "HardSwish" ? 0.5f : n.Float("beta", 0.5f);
    Expr h = ir::Max(FloatImm(0.0), ir::Min(FloatImm(1.0), ir::Add(ir::Mul(FloatImm(alpha), x), FloatImm(beta))));
    return op == "HardSwish" ? ir::Mul(x, h) : h;
  }
  if (op == "ThresholdedRelu") {  // x where x > alpha, else 0
    const float alpha = n.Float("alpha", 1.0f);
    return ir::Mul(ir::Call("step", ir::Sub(x, FloatImm(alpha))), ir::Max(x, FloatImm(alpha)));
  }
  if (op == "Shrink") {  // x + bias below -lambd, x - bias above lambd, else 0
    const float lambd = n.Float("lambd", 0.5f), bias = n.Float("bias", 0.0f);
    Expr low = ir::Mul(ir::Call("step", ir::Sub(FloatImm(-lambd), x)), ir::Add(ir::Min(x, FloatImm(-lambd)), FloatImm(bias)));
    Expr high = ir::Mul(ir::Call("step", ir::Sub(x, FloatImm(lambd))), ir::Sub(ir::Max(x, FloatImm(lambd)), FloatImm(bias)));
    return ir::Add(low, high);
  }
  if (op == "Gelu") {
    const std::string approximate = n.Text("approximate", "none");
    if (approximate == "none") {
      return ir::Mul(ir::Mul(FloatImm(0.5), x),
                     ir::Add(FloatImm(1.0), ir::Call("erf", ir::Mul(x, FloatImm(0.70710678118654752)))));
    }
    if (approximate == "tanh") {
      Expr inner = ir::Mul(FloatImm(0.79788456080286536),
                           ir::Add(x, ir::Mul(FloatImm(0.044715), ir::Mul(x, ir::Mul(x, x)))));
      return ir::Mul(ir::Mul(FloatImm(0.5), x), ir::Add(FloatImm(1.0), ir::Call("tanh", inner)));
    }
    return Unsupported(n, "approximate '" + approximate + "'");
  }
  return Unsupported(n, "this elementwise operator");
}

// The tensors an elementwise node reads at run time (Pow's constant scalar exponent
// and Clip's bounds are folded into the expression).
std::vector<int> ElementwiseInputs(const Graph& g, const Node& n) {
  if (n.op == "Add" || n.op == "Sub" || n.op == "Mul" || n.op == "Div" || n.op == "Mod" || n.op == "PRelu") {
    return {n.inputs[0], n.inputs[1]};
  }
  if (n.op == "Sum" || n.op == "Max" || n.op == "Min" || n.op == "Mean" || n.op == "Where" ||
      IsComparisonOrLogicOp(n.op)) {
    return n.inputs;
  }
  if (n.op == "Clip") {  // bounds computed at run time are inputs too
    std::vector<int> in = {n.inputs[0]};
    for (size_t i = 1; i < n.inputs.size(); ++i) {
      if (n.inputs[i] >= 0 && !T(g, n.inputs[i]).constant) in.push_back(n.inputs[i]);
    }
    return in;
  }
  if (n.op == "Pow" && !(T(g, n.inputs[1]).constant && T(g, n.inputs[1]).NumElements() == 1)) {
    return {n.inputs[0], n.inputs[1]};
  }
  return {n.inputs[0]};
}

// The value of elementwise node `n` from the values of its inputs (`v`, in the order
// of ElementwiseInputs).
absl::StatusOr<Expr> ElementwiseExpr(const Graph& g, const Node& n, const std::vector<Expr>& v) {
  const std::string& op = n.op;
  if (op == "Add") return ir::Add(v[0], v[1]);
  if (op == "Sub") return ir::Sub(v[0], v[1]);
  if (op == "Mul") return ir::Mul(v[0], v[1]);
  if (op == "Div") return ir::Div(v[0], v[1]);
  if (op == "Mod") {  // fmod = 1: C's fmod; 0 (floats from opset 28): the divisor's sign, as Python's %
    Expr r = ir::Mod(v[0], v[1]);
    if (n.Int("fmod", 0) != 0) return r;
    Expr other_sign = ir::Select(ir::LT(r, FloatImm(0.0)), ir::LT(FloatImm(0.0), v[1]), ir::LT(v[1], FloatImm(0.0)));
    return ir::Select(ir::EQ(r, FloatImm(0.0)), r, ir::Select(other_sign, ir::Add(r, v[1]), r));
  }
  if (op == "Pow") {
    if (v.size() == 2) {
      if (T(g, n.inputs[1]).dtype != DType::kFloat32) return Unsupported(n, "an int64 exponent tensor");
      return ir::Call("exp", ir::Mul(v[1], ir::Call("log", v[0])));
    }
    const Tensor& e = T(g, n.inputs[1]);
    return PowConst(v[0], e.f32.empty() ? static_cast<float>(e.i64[0]) : e.f32[0]);
  }
  if (op == "PRelu") return ir::Add(ir::Max(v[0], FloatImm(0.0)), ir::Mul(v[1], ir::Min(v[0], FloatImm(0.0))));
  // Bool values are float32 0 and 1: a comparison selects one of them, a logic
  // operator tests for 1.
  auto mask = [](Expr condition) { return ir::Select(condition, FloatImm(1.0), FloatImm(0.0)); };
  auto truth = [](Expr b) { return ir::LT(FloatImm(0.5), b); };
  if (op == "Less") return mask(ir::LT(v[0], v[1]));
  if (op == "Greater") return mask(ir::LT(v[1], v[0]));
  if (op == "LessOrEqual") return mask(ir::LE(v[0], v[1]));
  if (op == "GreaterOrEqual") return mask(ir::LE(v[1], v[0]));
  if (op == "Equal") return mask(ir::EQ(v[0], v[1]));
  if (op == "Not") return ir::Sub(FloatImm(1.0), v[0]);
  if (op == "And") return ir::Mul(v[0], v[1]);
  if (op == "Or") return ir::Max(v[0], v[1]);
  if (op == "Xor") return mask(ir::LT(FloatImm(0.5), ir::Call("abs", ir::Sub(v[0], v[1]))));
  if (op == "Where") return ir::Select(truth(v[0]), v[1], v[2]);
  if (op == "Sum" || op == "Max" || op == "Min" || op == "Mean") {
    Expr e = v[0];
    for (size_t i = 1; i < v.size(); ++i) {
      e = op == "Max" ? ir::Max(e, v[i]) : op == "Min" ? ir::Min(e, v[i]) : ir::Add(e, v[i]);
    }
    return op == "Mean" ? ir::Div(e, FloatImm(static_cast<double>(v.size()))) : e;
  }
  if (op == "Clip") {  // min(max(x, lo), hi); bounds computed at run time follow x in v
    auto [lo, hi] = ClipBounds(g, n);
    auto runtime = [&](size_t i) { return i < n.inputs.size() && n.inputs[i] >= 0 && !T(g, n.inputs[i]).constant; };
    size_t next = 1;
    Expr x = v[0];
    if (runtime(1)) {
      x = ir::Max(x, v[next++]);
    } else if (std::isfinite(lo)) {
      x = ir::Max(x, FloatImm(lo));
    }
    if (runtime(2)) {
      x = ir::Min(x, v[next++]);
    } else if (std::isfinite(hi)) {
      x = ir::Min(x, FloatImm(hi));
    }
    return x;
  }
  return UnaryExpr(n, v[0]);
}

// Copies `in` (a view over `shape`) to `out` (a view over the same shape).
Stmt Copy(const std::vector<int64_t>& shape, View out, View in, int lanes, Names& names) {
  return ElementwiseNest(shape, std::move(out), {std::move(in)},
                         [](auto& v) { return v[0]; }, lanes, names);
}

// Vectorized loop over a contiguous row of `n` elements: store(j) for each j.
Stmt RowLoop(int64_t n, int lanes, const std::function<Stmt(Expr)>& store, Names& names) {
  const int64_t vec = lanes > 1 && n >= lanes ? lanes : 1;
  std::vector<Stmt> parts;
  const std::string jo = names("jo"), ji = names("ji");
  parts.push_back(ir::For(jo, IntImm(n / vec), n / vec, ForKind::kSerial,
                          ir::For(ji, IntImm(vec), vec, vec > 1 ? ForKind::kVectorized : ForKind::kSerial,
                                  store(ir::Add(ir::Mul(Var(jo), IntImm(vec)), Var(ji))))));
  if (n % vec) {
    const std::string jt = names("jt");
    parts.push_back(ir::For(jt, IntImm(n % vec), n % vec, ForKind::kSerial,
                            store(ir::Add(IntImm(n / vec * vec), Var(jt)))));
  }
  return ir::Block(parts);
}

// The first element of line `line` of a tensor walked as [outer, extent, inner] along
// its middle axis (lines numbered over outer x inner; the line's elements `inner` apart).
Expr LineStart(Expr line, int64_t extent, int64_t inner) {
  return ir::Add(ir::Mul(ir::Div(line, IntImm(inner)), IntImm(extent * inner)), ir::Mod(line, IntImm(inner)));
}

// A run-time index into an axis of `dim` elements: negative counts from the end; the
// index clamped into range, and whether it was in range (a kernel cannot fail: out
// of range reads the clamped element and stores NaN instead).
std::pair<Expr, Expr> WrapIndex(Expr raw, int64_t dim) {
  Expr wrapped = ir::Select(ir::LT(raw, IntImm(0)), ir::Add(raw, IntImm(dim)), raw);
  Expr i = ir::Max(ir::Min(wrapped, IntImm(dim - 1)), IntImm(0));
  return {i, ir::EQ(i, wrapped)};
}

absl::StatusOr<NodeKernel> Pad(const Graph& g, const Node& n, int lanes);

absl::StatusOr<NodeKernel> DataMovement(const Graph& g, const Node& n, int lanes) {
  Builder b(g, n.op);
  if (n.op == "Transpose") {
    const std::vector<int64_t>& in_shape = b.Shape(n.inputs[0]);
    std::vector<int64_t> perm = n.Ints("perm");
    if (perm.empty()) {
      for (size_t i = in_shape.size(); i-- > 0;) perm.push_back(static_cast<int64_t>(i));
    }
    const std::string x = b.Param(n.inputs[0]);
    const std::vector<int64_t>& out_shape = b.Shape(n.outputs[0]);
    const std::vector<int64_t> s = RowMajorStrides(in_shape);
    View in{x, 0, {}};
    for (int64_t p : perm) in.strides.push_back(s[static_cast<size_t>(p)]);
    return b.Finish(Copy(out_shape, Contiguous(b.Param(n.outputs[0], true), out_shape), in, lanes,
                         b.names));
  }
  if (n.op == "DepthToSpace" || n.op == "SpaceToDepth") {
    // One copy over (n, c, h, i, w, j): the small side's pixel (h, w) and block
    // offset (i, j) against the large side's (h * b + i, w * b + j) and its channel,
    // (i * b + j) * C + c (DCR; SpaceToDepth's only order) or c * b * b + i * b + j (CRD).
    const bool to_space = n.op == "DepthToSpace";
    const std::vector<int64_t>& deep = b.Shape(to_space ? n.inputs[0] : n.outputs[0]);
    const int64_t blk = n.Int("blocksize", 1);
    const bool crd = n.Text("mode", "DCR") == "CRD";
    const int64_t N = deep[0], C = deep[1] / (blk * blk), H = deep[2], W = deep[3];
    const std::vector<int64_t> shape = {N, C, H, blk, W, blk};
    // The wide side [N, C, H * b, W * b], contiguous.
    const std::vector<int64_t> wide = {C * H * blk * W * blk, H * blk * W * blk, blk * W * blk, W * blk, blk, 1};
    const std::vector<int64_t> deep_strides =
        crd ? std::vector<int64_t>{C * blk * blk * H * W, blk * blk * H * W, W, blk * H * W, 1, H * W}
            : std::vector<int64_t>{C * blk * blk * H * W, H * W, W, blk * C * H * W, 1, C * H * W};
    const std::string x = b.Param(n.inputs[0]);
    const std::string y = b.Param(n.outputs[0], true);
    View in{x, 0, to_space ? deep_strides : wide};
    View out{y, 0, to_space ? wide : deep_strides};
    return b.Finish(Copy(shape, out, in, lanes, b.names));
  }
  if (n.op == "Slice") {
    const std::vector<int64_t>& in_shape = b.Shape(n.inputs[0]);
    const std::vector<int64_t> first = n.Ints("tf_first"), step = n.Ints("tf_step");
    const std::string x = b.Param(n.inputs[0]);
    const std::vector<int64_t>& out_shape = b.Shape(n.outputs[0]);
    const std::vector<int64_t> s = RowMajorStrides(in_shape);
    View in{x, 0, {}};
    for (size_t d = 0; d < in_shape.size(); ++d) {
      in.offset += first[d] * s[d];
      in.strides.push_back(s[d] * step[d]);
    }
    return b.Finish(Copy(out_shape, Contiguous(b.Param(n.outputs[0], true), out_shape), in, lanes,
                         b.names));
  }
  if (n.op == "Concat" || n.op == "Split") {
    // One copy per piece between the whole tensor and its part along `axis`.
    const bool concat = n.op == "Concat";
    const int whole_id = concat ? n.outputs[0] : n.inputs[0];
    const std::vector<int64_t>& whole_shape = b.Shape(whole_id);
    const int64_t rank = static_cast<int64_t>(whole_shape.size());
    int64_t axis = n.Int("axis", 0);
    if (axis < 0) axis += rank;
    const std::vector<int64_t> ws = RowMajorStrides(whole_shape);
    const std::vector<int>& parts = concat ? n.inputs : n.outputs;
    std::vector<std::string> part_names;
    std::string whole;
    if (!concat) whole = b.Param(whole_id);
    for (int t : parts) part_names.push_back(b.Param(t, !concat));
    if (concat) whole = b.Param(whole_id, true);
    std::vector<Stmt> copies;
    int64_t at = 0;
    for (size_t i = 0; i < parts.size(); ++i) {
      const std::vector<int64_t>& ps = b.Shape(parts[i]);
      View whole_view{whole, at * ws[static_cast<size_t>(axis)], ws};
      View part_view = Contiguous(part_names[i], ps);
      copies.push_back(concat ? Copy(ps, whole_view, part_view, lanes, b.names)
                              : Copy(ps, part_view, whole_view, lanes, b.names));
      at += ps[static_cast<size_t>(axis)];
    }
    return b.Finish(ir::Block(copies));
  }
  if (n.op == "Gather" && (!T(g, n.inputs[1]).constant || T(g, n.inputs[1]).NumElements() > 256)) {
    // Indices read when the kernel runs (token ids into an embedding table): one
    // parallel step per (outer, index) copies the slice the index picks; a negative
    // index counts from the end. A graph input's indices are checked before the run
    // (Executor::Run); an index computed out of range reads a clamped one and yields
    // NaN, never a plausible wrong row.
    const std::vector<int64_t>& in_shape = b.Shape(n.inputs[0]);
    const int64_t rank = static_cast<int64_t>(in_shape.size());
    int64_t axis = n.Int("axis", 0);
    if (axis < 0) axis += rank;
    const int64_t outer = Product(in_shape, 0, static_cast<size_t>(axis));
    const int64_t inner = Product(in_shape, static_cast<size_t>(axis) + 1);
    const int64_t dim = in_shape[static_cast<size_t>(axis)];
    const int64_t count = T(g, n.inputs[1]).NumElements();
    const std::string x = b.Param(n.inputs[0]);
    const std::string idx = b.Param(n.inputs[1]);
    const std::string y = b.Param(n.outputs[0], true);
    const std::string p = b.names("p");
    Expr raw = ir::ToInt(ir::Load(idx, ir::DType::kFloat32, ir::Mod(Var(p), IntImm(count))));
    // Not a structured binding: lambdas cannot capture those before C++20 (clang).
    const std::pair<Expr, Expr> wrapped = WrapIndex(raw, dim);
    const Expr in_range = wrapped.second;
    Expr from = ir::Mul(ir::Add(ir::Mul(ir::Div(Var(p), IntImm(count)), IntImm(dim)), wrapped.first),
                        IntImm(inner));
    Stmt row = RowLoop(
        inner, lanes,
        [&](Expr j) {
          return ir::Store(y, ir::Add(ir::Mul(Var(p), IntImm(inner)), j),
                           ir::Select(in_range, ir::Load(x, ir::DType::kFloat32, ir::Add(from, j)),
                                      FloatImm(std::numeric_limits<double>::quiet_NaN())));
        },
        b.names);
    return b.Finish(ir::For(p, IntImm(outer * count), outer * count, ForKind::kParallel, row));
  }
  if (n.op == "Gather") {
    const Tensor& idx = T(g, n.inputs[1]);
    const std::vector<int64_t>& in_shape = b.Shape(n.inputs[0]);
    const int64_t rank = static_cast<int64_t>(in_shape.size());
    int64_t axis = n.Int("axis", 0);
    if (axis < 0) axis += rank;
    const std::string x = b.Param(n.inputs[0]);
    const std::string y = b.Param(n.outputs[0], true);
    // Each index picks one slice [outer, inner] of the input into the output.
    std::vector<int64_t> slice = {Product(in_shape, 0, static_cast<size_t>(axis)),
                                  Product(in_shape, static_cast<size_t>(axis) + 1)};
    const int64_t dim = in_shape[static_cast<size_t>(axis)];
    const int64_t count = idx.NumElements();
    std::vector<Stmt> copies;
    for (int64_t j = 0; j < count; ++j) {
      int64_t i = idx.i64[static_cast<size_t>(j)];
      if (i < 0) i += dim;
      View in{x, i * slice[1], {dim * slice[1], 1}};
      View out{y, j * slice[1], {count * slice[1], 1}};
      copies.push_back(Copy(slice, out, in, lanes, b.names));
    }
    return b.Finish(ir::Block(copies));
  }
  if (n.op == "Expand") {
    const std::vector<int64_t>& out_shape = b.Shape(n.outputs[0]);
    View in = Broadcast(b.Param(n.inputs[0]), b.Shape(n.inputs[0]), out_shape);
    return b.Finish(Copy(out_shape, Contiguous(b.Param(n.outputs[0], true), out_shape), in, lanes, b.names));
  }
  if (n.op == "Tile") {
    // One copy over (r0, n0, r1, n1, ...): repeat k of axis d writes k * n_d + i.
    const std::vector<int64_t>& in_shape = b.Shape(n.inputs[0]);
    const std::vector<int64_t> repeats = n.Ints("tf_repeats");
    const std::vector<int64_t>& out_shape = b.Shape(n.outputs[0]);
    const std::vector<int64_t> is = RowMajorStrides(in_shape), os = RowMajorStrides(out_shape);
    View in{b.Param(n.inputs[0]), 0, {}};
    View out{b.Param(n.outputs[0], true), 0, {}};
    std::vector<int64_t> shape;
    for (size_t d = 0; d < in_shape.size(); ++d) {
      shape.insert(shape.end(), {repeats[d], in_shape[d]});
      in.strides.insert(in.strides.end(), {0, is[d]});
      out.strides.insert(out.strides.end(), {in_shape[d] * os[d], os[d]});
    }
    return b.Finish(Copy(shape, out, in, lanes, b.names));
  }
  if (n.op == "Pad") return Pad(g, n, lanes);
  return Unsupported(n, "this data-movement operator");
}


// Pad, constant mode: the pad value everywhere, then the input's kept part copied
// into place (negative pads crop). Other modes: every output element reads the
// input element PadSource gives, per axis from a table computed here.
absl::StatusOr<NodeKernel> Pad(const Graph& g, const Node& n, int lanes) {
  Builder b(g, n.op);
  const std::vector<int64_t>& in = b.Shape(n.inputs[0]);
  const std::vector<int64_t>& out = b.Shape(n.outputs[0]);
  const std::vector<int64_t> pads = n.Ints("tf_pads");
  const std::string mode = n.Text("mode", "constant");
  const size_t rank = in.size();
  const std::string x = b.Param(n.inputs[0]);
  const std::string y = b.Param(n.outputs[0], true);
  const std::vector<int64_t> is = RowMajorStrides(in), os = RowMajorStrides(out);
  if (mode == "constant") {
    const float value = n.Float("tf_value", 0.0f);
    std::vector<Stmt> parts;
    parts.push_back(ElementwiseNest(out, Contiguous(y, out), {}, [&](auto&) { return FloatImm(value); }, lanes,
                                    b.names));
    std::vector<int64_t> kept;
    View from{x, 0, is}, to{y, 0, os};
    for (size_t d = 0; d < rank; ++d) {
      const int64_t begin = pads[d], end = pads[d + rank];
      kept.push_back(in[d] + std::min<int64_t>(begin, 0) + std::min<int64_t>(end, 0));
      from.offset += std::max<int64_t>(-begin, 0) * is[d];
      to.offset += std::max<int64_t>(begin, 0) * os[d];
    }
    if (*std::min_element(kept.begin(), kept.end()) > 0) parts.push_back(Copy(kept, to, from, lanes, b.names));
    return b.Finish(ir::Block(parts));
  }
  std::vector<std::string> table(rank);
  for (size_t d = 0; d < rank; ++d) {
    if (pads[d] == 0 && pads[d + rank] == 0) continue;
    std::vector<float> source;
    for (int64_t o = 0; o < out[d]; ++o) {
      source.push_back(static_cast<float>(PadSource(o, pads[d], pads[d + rank], in[d], mode)));
    }
    table[d] = b.Constant(std::move(source));
  }
  auto source = [&](size_t d, Expr o) {
    return table[d].empty() ? o : ir::ToInt(ir::Load(table[d], ir::DType::kFloat32, o));
  };
  const int64_t rows = Product(out, 0, rank - 1);
  const std::string p = b.names("p");
  const std::vector<Expr> o = ir::Unflatten(Var(p), std::vector<int64_t>(out.begin(), out.end() - 1));
  Expr base = IntImm(0);
  for (size_t d = 0; d + 1 < rank; ++d) base = ir::Add(base, ir::Mul(source(d, o[d]), IntImm(is[d])));
  const int64_t last = out[rank - 1];
  Stmt row = RowLoop(
      last, lanes,
      [&](Expr j) {
        return ir::Store(y, ir::Add(ir::Mul(Var(p), IntImm(last)), j),
                         ir::Load(x, ir::DType::kFloat32, ir::Add(base, source(rank - 1, j))));
      },
      b.names);
  return b.Finish(ir::For(p, IntImm(rows), rows, ForKind::kParallel, row));
}

// Trilu: the input where the element (i, j) of its last two axes lies on the kept
// side of diagonal k (upper: j - i >= k; lower: j - i <= k), else 0.
absl::StatusOr<NodeKernel> Trilu(const Graph& g, const Node& n, int lanes) {
  Builder b(g, n.op);
  const std::vector<int64_t>& shape = b.Shape(n.inputs[0]);
  const int64_t rows = Product(shape, 0, shape.size() - 1), height = shape[shape.size() - 2], cols = shape.back();
  const int64_t k = n.Ints("tf_k").at(0);
  const bool upper = n.Int("upper", 1) != 0;
  const std::string x = b.Param(n.inputs[0]);
  const std::string y = b.Param(n.outputs[0], true);
  const std::string p = b.names("p");
  Expr i_plus_k = ir::Add(ir::Mod(Var(p), IntImm(height)), IntImm(k));
  Stmt row = RowLoop(
      cols, lanes,
      [&](Expr j) {
        Expr at = ir::Add(ir::Mul(Var(p), IntImm(cols)), j);
        Expr keep = upper ? ir::LE(i_plus_k, j) : ir::LE(j, i_plus_k);
        return ir::Store(y, at, ir::Select(keep, ir::Load(x, ir::DType::kFloat32, at), FloatImm(0.0)));
      },
      b.names);
  return b.Finish(ir::For(p, IntImm(rows), rows, ForKind::kParallel, row));
}

// CumSum along one axis: a running sum per line of the axis (exclusive: the sum
// before the element; reverse: from the end).
absl::StatusOr<NodeKernel> CumSum(const Graph& g, const Node& n) {
  Builder b(g, n.op);
  const std::vector<int64_t>& shape = b.Shape(n.inputs[0]);
  const size_t axis = static_cast<size_t>(n.Ints("tf_axis").at(0));
  const int64_t outer = Product(shape, 0, axis), extent = shape[axis], inner = Product(shape, axis + 1);
  const bool exclusive = n.Int("exclusive", 0) != 0, reverse = n.Int("reverse", 0) != 0;
  const std::string x = b.Param(n.inputs[0]);
  const std::string y = b.Param(n.outputs[0], true);
  const std::string line = b.names("line"), j = b.names("j"), sum = b.names("sum");
  Expr base = LineStart(Var(line), extent, inner);
  Expr step = reverse ? ir::Sub(IntImm(extent - 1), Var(j)) : Var(j);
  Expr at = ir::Add(base, ir::Mul(step, IntImm(inner)));
  Expr loaded = ir::Load(x, ir::DType::kFloat32, at);
  Stmt add = ir::Store(sum, IntImm(0), ir::Add(Scalar(sum), loaded));
  Stmt store = ir::Store(y, at, Scalar(sum));
  Stmt body = ir::For(j, IntImm(extent), extent, ForKind::kSerial,
                      exclusive ? ir::Block({store, add}) : ir::Block({add, store}));
  Stmt st = ir::Allocate(sum, ir::DType::kFloat32, 1,
                         ir::Block({ir::Store(sum, IntImm(0), FloatImm(0.0)), body}));
  return b.Finish(ir::For(line, IntImm(outer * inner), outer * inner, ForKind::kParallel, st));
}

// GatherElements: each output element reads the input element at its own position
// with the axis coordinate replaced by its index (negative counts from the end; out
// of range gives NaN, as Gather's computed indices do).
absl::StatusOr<NodeKernel> GatherElements(const Graph& g, const Node& n, int lanes) {
  Builder b(g, n.op);
  const std::vector<int64_t>& in = b.Shape(n.inputs[0]);
  const std::vector<int64_t>& out = b.Shape(n.outputs[0]);
  const size_t rank = in.size(), axis = static_cast<size_t>(n.Ints("tf_axis").at(0));
  const std::string x = b.Param(n.inputs[0]);
  const std::string idx = b.Param(n.inputs[1]);
  const std::string y = b.Param(n.outputs[0], true);
  const std::vector<int64_t> is = RowMajorStrides(in);
  const int64_t rows = Product(out, 0, rank - 1), last = out[rank - 1], dim = in[axis];
  const std::string p = b.names("p");
  const std::vector<Expr> o = ir::Unflatten(Var(p), std::vector<int64_t>(out.begin(), out.end() - 1));
  Stmt row = RowLoop(
      last, lanes,
      [&](Expr j) {
        std::vector<Expr> at = o;
        at.push_back(j);
        Expr flat = ir::Add(ir::Mul(Var(p), IntImm(last)), j);
        Expr raw = ir::ToInt(ir::Load(idx, ir::DType::kFloat32, flat));
        auto [i, in_range] = WrapIndex(raw, dim);
        Expr from = IntImm(0);
        for (size_t d = 0; d < rank; ++d) from = ir::Add(from, ir::Mul(d == axis ? i : at[d], IntImm(is[d])));
        return ir::Store(y, flat,
                         ir::Select(in_range, ir::Load(x, ir::DType::kFloat32, from),
                                    FloatImm(std::numeric_limits<double>::quiet_NaN())));
      },
      b.names);
  return b.Finish(ir::For(p, IntImm(rows), rows, ForKind::kParallel, row));
}

// TopK: per line along the axis, K selection passes, each taking the first element
// (by value, then by index) that comes after the previous pick in that order: the
// values and their indices sorted, equal values in index order, as onnxruntime gives.
absl::StatusOr<NodeKernel> TopK(const Graph& g, const Node& n) {
  Builder b(g, n.op);
  const std::vector<int64_t>& shape = b.Shape(n.inputs[0]);
  const size_t axis = static_cast<size_t>(n.Ints("tf_axis").at(0));
  const int64_t outer = Product(shape, 0, axis), extent = shape[axis], inner = Product(shape, axis + 1);
  const int64_t k = n.Ints("tf_k").at(0);
  const bool largest = n.Int("largest", 1) != 0;
  const std::string x = b.Param(n.inputs[0]);
  const std::string values = b.Param(n.outputs[0], true);
  const std::string indices = n.outputs.size() > 1 ? b.Param(n.outputs[1], true) : "";
  const std::string line = b.names("line"), pick = b.names("pick"), j = b.names("j");
  const std::string pv = b.names("pv"), pj = b.names("pj"), bv = b.names("bv"), bj = b.names("bj"),
                    found = b.names("found"), jf = b.names("jf");
  Expr in_base = LineStart(Var(line), extent, inner);
  Expr out_base = ir::Add(ir::Mul(ir::Div(Var(line), IntImm(inner)), IntImm(k * inner)),
                          ir::Mod(Var(line), IntImm(inner)));
  Expr v = ir::Load(x, ir::DType::kFloat32, ir::Add(in_base, ir::Mul(Var(j), IntImm(inner))));
  // `a` comes before `c` in the order: a larger (smaller) value.
  auto before = [&](Expr a, Expr c) { return largest ? ir::LT(c, a) : ir::LT(a, c); };
  // After the previous pick: later in value, or equal and later in index.
  Expr after = ir::Select(before(Scalar(pv), v), FloatImm(1.0),
                          ir::Select(ir::EQ(v, Scalar(pv)), ir::Select(ir::LT(Scalar(pj), Scalar(jf)), FloatImm(1.0),
                                                                         FloatImm(0.0)),
                                     FloatImm(0.0)));
  // Better than the best so far (the first in index order among equals: scanning up).
  Expr better = ir::Select(ir::EQ(Scalar(found), FloatImm(0.0)), FloatImm(1.0),
                           ir::Select(before(v, Scalar(bv)), FloatImm(1.0), FloatImm(0.0)));
  Expr take = ir::LT(FloatImm(1.5), ir::Add(after, better));  // both
  // `take` reads bv and found: they are stored after bj, in this order.
  Stmt scan = ir::Block({ir::Store(bj, IntImm(0), ir::Select(take, Scalar(jf), Scalar(bj))),
                         ir::Store(bv, IntImm(0), ir::Select(take, v, Scalar(bv))),
                         ir::Store(found, IntImm(0), ir::Select(take, FloatImm(1.0), Scalar(found))),
                         ir::Store(jf, IntImm(0), ir::Add(Scalar(jf), FloatImm(1.0)))});
  Expr at = ir::Add(out_base, ir::Mul(Var(pick), IntImm(inner)));
  std::vector<Stmt> per_pick = {ir::Store(found, IntImm(0), FloatImm(0.0)), ir::Store(jf, IntImm(0), FloatImm(0.0)),
                                ir::Store(bv, IntImm(0), FloatImm(0.0)), ir::Store(bj, IntImm(0), FloatImm(0.0)),
                                ir::For(j, IntImm(extent), extent, ForKind::kSerial, scan),
                                ir::Store(values, at, Scalar(bv))};
  if (!indices.empty()) per_pick.push_back(ir::Store(indices, at, Scalar(bj)));
  per_pick.push_back(ir::Store(pv, IntImm(0), Scalar(bv)));
  per_pick.push_back(ir::Store(pj, IntImm(0), Scalar(bj)));
  const double first = largest ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity();
  Stmt body = ir::Block({ir::Store(pv, IntImm(0), FloatImm(first)), ir::Store(pj, IntImm(0), FloatImm(-1.0)),
                         ir::For(pick, IntImm(k), k, ForKind::kSerial, ir::Block(per_pick))});
  for (const std::string& local : {pv, pj, bv, bj, found, jf}) body = ir::Allocate(local, ir::DType::kFloat32, 1, body);
  return b.Finish(ir::For(line, IntImm(outer * inner), outer * inner, ForKind::kParallel, body));
}

// ScatterND: the data copied, then each slice the (constant, checked) indices name
// replaced by or combined with its updates, in index order.
absl::StatusOr<NodeKernel> ScatterND(const Graph& g, const Node& n, int lanes) {
  Builder b(g, n.op);
  const std::vector<int64_t>& shape = b.Shape(n.inputs[0]);
  const Tensor& idx = T(g, n.inputs[1]);
  const int64_t q = idx.shape.back();
  const int64_t slice = Product(shape, static_cast<size_t>(q));
  const std::string reduction = n.Text("reduction", "none");
  const std::string x = b.Param(n.inputs[0]);
  const std::string u = b.Param(n.inputs[2]);
  const std::string y = b.Param(n.outputs[0], true);
  const std::vector<int64_t> strides = RowMajorStrides(shape);
  std::vector<Stmt> parts = {Copy(shape, Contiguous(y, shape), Contiguous(x, shape), lanes, b.names)};
  const int64_t count = static_cast<int64_t>(idx.i64.size()) / q;
  if (count > 4096) return Unsupported(n, "a ScatterND of more than 4096 slices");
  for (int64_t t = 0; t < count; ++t) {
    int64_t offset = 0;
    for (int64_t d = 0; d < q; ++d) {
      int64_t i = idx.i64[static_cast<size_t>(t * q + d)];
      if (i < 0) i += shape[static_cast<size_t>(d)];
      offset += i * strides[static_cast<size_t>(d)];
    }
    View to{y, offset, {1}}, from{u, t * slice, {1}};
    parts.push_back(ElementwiseNest({slice}, to, {to, from},
                                    [&](const std::vector<Expr>& v) {
                                      if (reduction == "add") return ir::Add(v[0], v[1]);
                                      if (reduction == "mul") return ir::Mul(v[0], v[1]);
                                      if (reduction == "max") return ir::Max(v[0], v[1]);
                                      if (reduction == "min") return ir::Min(v[0], v[1]);
                                      return v[1];
                                    },
                                    lanes, b.names));
  }
  return b.Finish(ir::Block(parts));
}

// Det: per matrix (in parallel), Gaussian elimination with partial pivoting in a local
// copy: at column k the row with the largest magnitude from k down is swapped up (the
// sign flips when it is another row), the determinant takes the pivot, and the rows
// below subtract their multiple of it. A zero pivot (a singular matrix) makes the
// determinant 0 and its multipliers 0, so no NaN comes from 0 / 0.
absl::StatusOr<NodeKernel> Det(const Graph& g, const Node& n) {
  Builder b(g, n.op);
  const std::vector<int64_t>& shape = b.Shape(n.inputs[0]);
  const int64_t m = shape.back();
  const int64_t batch = Product(shape, 0, shape.size() - 2);
  const std::string x = b.Param(n.inputs[0]);
  const std::string y = b.Param(n.outputs[0], true);
  const std::string mat = b.names("mat"), bi = b.names("bi"), i = b.names("i"), j = b.names("j"),
                    k = b.names("k"), r = b.names("r"), det = b.names("det"), piv = b.names("piv"),
                    best = b.names("best"), row = b.names("row"), kf = b.names("kf"), tmp = b.names("tmp");
  auto at = [&](Expr rr, Expr cc) { return ir::Add(ir::Mul(rr, IntImm(m)), cc); };
  auto a = [&](Expr rr, Expr cc) { return ir::Load(mat, ir::DType::kFloat32, at(rr, cc)); };
  const Expr K = Var(k);
  const Expr below = ir::Add(ir::Add(K, IntImm(1)), Var(r));  // row k + 1 + r
  const Expr rows_below = ir::Sub(IntImm(m - 1), K);
  const Expr right = ir::Add(K, Var(j));  // column k + j
  const Expr cols_right = ir::Sub(IntImm(m), K);
  // The pivot: the first row from k down with the largest magnitude in column k
  // (row numbers as floats: `row` counts along, `piv` keeps the pick).
  const Expr candidate = ir::Call("abs", a(below, K));
  const Stmt search = ir::Block({
      ir::Store(piv, IntImm(0), ir::Select(ir::LT(Scalar(best), candidate), Scalar(row), Scalar(piv))),
      ir::Store(best, IntImm(0), ir::Max(Scalar(best), candidate)),
      ir::Store(row, IntImm(0), ir::Add(Scalar(row), FloatImm(1.0)))});
  const Expr p = ir::ToInt(Scalar(piv));
  const Stmt swap = ir::For(j, IntImm(m), m, ForKind::kSerial,
                            ir::Block({ir::Store(tmp, IntImm(0), a(K, Var(j))),
                                       ir::Store(mat, at(K, Var(j)), a(p, Var(j))),
                                       ir::Store(mat, at(p, Var(j)), Scalar(tmp))}));
  const Expr pivot = a(K, K);
  const Stmt eliminate = ir::For(
      r, rows_below, m, ForKind::kSerial,
      ir::Block({ir::Store(tmp, IntImm(0),
                           ir::Select(ir::EQ(pivot, FloatImm(0.0)), FloatImm(0.0), ir::Div(a(below, K), pivot))),
                 ir::For(j, cols_right, m, ForKind::kSerial,
                         ir::Store(mat, at(below, right), ir::Sub(a(below, right), ir::Mul(Scalar(tmp), a(K, right)))))}));
  const Stmt column = ir::Block({
      ir::Store(piv, IntImm(0), Scalar(kf)),
      ir::Store(best, IntImm(0), ir::Call("abs", pivot)),
      ir::Store(row, IntImm(0), ir::Add(Scalar(kf), FloatImm(1.0))),
      ir::For(r, rows_below, m, ForKind::kSerial, search),
      swap,
      ir::Store(det, IntImm(0),
                ir::Mul(Scalar(det), ir::Mul(ir::Select(ir::EQ(Scalar(piv), Scalar(kf)), FloatImm(1.0), FloatImm(-1.0)),
                                             pivot))),
      eliminate,
      ir::Store(kf, IntImm(0), ir::Add(Scalar(kf), FloatImm(1.0)))});
  const Expr base = ir::Mul(Var(bi), IntImm(m * m));
  Stmt body = ir::Block({
      ir::For(i, IntImm(m * m), m * m, ForKind::kSerial,
              ir::Store(mat, Var(i), ir::Load(x, ir::DType::kFloat32, ir::Add(base, Var(i))))),
      ir::Store(det, IntImm(0), FloatImm(1.0)), ir::Store(kf, IntImm(0), FloatImm(0.0)),
      ir::For(k, IntImm(m), m, ForKind::kSerial, column),
      ir::Store(y, Var(bi), Scalar(det))});
  for (const std::string& local : {det, piv, best, row, kf, tmp}) body = ir::Allocate(local, ir::DType::kFloat32, 1, body);
  body = ir::Allocate(mat, ir::DType::kFloat32, m * m, body);
  return b.Finish(ir::For(bi, IntImm(batch), batch, ForKind::kParallel, body));
}

// DeformConv (2-D), directly: output (n, k, oh, ow) is B[k] plus, over its group's
// input channels c and the kernel taps (i, j), W[k, c, i, j] times the tap's mask
// times the input of channel c sampled bilinearly at (oh * stride - pad + i * dilation
// + its offset's dy, the same for x), corners outside the image counting 0 (the
// ONNX reference's GridSample with align_corners in pixel units). Offsets and masks
// are per offset group: (n, (g * kh + i) * kw + j, 2 values (dy, dx) for offsets).
absl::StatusOr<NodeKernel> DeformConv(const Graph& g, const Node& n) {
  Builder b(g, n.op);
  const std::vector<int64_t>& in = b.Shape(n.inputs[0]);
  const std::vector<int64_t>& wt = b.Shape(n.inputs[1]);
  const std::vector<int64_t>& out = b.Shape(n.outputs[0]);
  const int64_t C = in[1], H = in[2], W = in[3], K = out[1], OH = out[2], OW = out[3];
  const int64_t KH = wt[2], KW = wt[3], CG = wt[1];
  const int64_t groups = n.Int("group", 1), offset_groups = n.Int("offset_group", 1);
  const std::vector<int64_t> strides = n.Ints("strides", {1, 1}), dilations = n.Ints("dilations", {1, 1}),
                             pads = n.Ints("pads", {0, 0, 0, 0});
  const bool has_bias = n.inputs.size() > 3 && n.inputs[3] >= 0, has_mask = n.inputs.size() > 4 && n.inputs[4] >= 0;
  const std::string x = b.Param(n.inputs[0]), w = b.Param(n.inputs[1]), off = b.Param(n.inputs[2]);
  const std::string bias = has_bias ? b.Param(n.inputs[3]) : "", mask = has_mask ? b.Param(n.inputs[4]) : "";
  const std::string y = b.Param(n.outputs[0], true);
  const std::string nk = b.names("nk"), oh = b.names("oh"), ow = b.names("ow"), c = b.names("c"),
                    i = b.names("i"), j = b.names("j"), acc = b.names("acc");
  const Expr batch = ir::Div(Var(nk), IntImm(K)), k = ir::Mod(Var(nk), IntImm(K));
  const Expr channel = ir::Add(ir::Mul(ir::Div(k, IntImm(K / groups)), IntImm(CG)), Var(c));  // input channel
  const Expr og = ir::Div(channel, IntImm(C / offset_groups));
  const Expr tap = ir::Add(ir::Mul(ir::Add(ir::Mul(og, IntImm(KH)), Var(i)), IntImm(KW)), Var(j));
  const Expr pixel = ir::Add(ir::Mul(Var(oh), IntImm(OW)), Var(ow));
  auto offset_at = [&](int64_t which) {  // dy (0) or dx (1) of this tap
    Expr ch = ir::Add(ir::Mul(batch, IntImm(offset_groups * KH * KW * 2)), ir::Add(ir::Mul(tap, IntImm(2)), IntImm(which)));
    return ir::Load(off, ir::DType::kFloat32, ir::Add(ir::Mul(ch, IntImm(OH * OW)), pixel));
  };
  // Each tap's sample position before its offset, in pixels, from tables (the loop IR
  // has no int-to-float conversion): base_y[oh * KH + i], base_x[ow * KW + j].
  std::vector<float> base_y, base_x;
  for (int64_t o = 0; o < OH; ++o) {
    for (int64_t t = 0; t < KH; ++t) base_y.push_back(static_cast<float>(o * strides[0] - pads[0] + t * dilations[0]));
  }
  for (int64_t o = 0; o < OW; ++o) {
    for (int64_t t = 0; t < KW; ++t) base_x.push_back(static_cast<float>(o * strides[1] - pads[1] + t * dilations[1]));
  }
  const std::string by = b.Constant(std::move(base_y)), bx = b.Constant(std::move(base_x));
  const Expr sy = ir::Add(ir::Load(by, ir::DType::kFloat32, ir::Add(ir::Mul(Var(oh), IntImm(KH)), Var(i))), offset_at(0));
  const Expr sx = ir::Add(ir::Load(bx, ir::DType::kFloat32, ir::Add(ir::Mul(Var(ow), IntImm(KW)), Var(j))), offset_at(1));
  const std::string fy = b.names("fy"), fx = b.names("fx");  // the sample position, stored once
  const Expr y0 = ir::Call("floor", Scalar(fy)), x0 = ir::Call("floor", Scalar(fx));
  const Expr ly = ir::Sub(Scalar(fy), y0), lx = ir::Sub(Scalar(fx), x0);
  const Expr plane = ir::Mul(ir::Add(ir::Mul(batch, IntImm(C)), channel), IntImm(H * W));
  Expr sample;
  for (int64_t a = 0; a < 2; ++a) {
    for (int64_t e = 0; e < 2; ++e) {
      const Expr yy = ir::Add(y0, FloatImm(static_cast<double>(a))), xx = ir::Add(x0, FloatImm(static_cast<double>(e)));
      const Expr inside = ir::And(ir::And(ir::LE(FloatImm(0.0), yy), ir::LE(yy, FloatImm(static_cast<double>(H - 1)))),
                                  ir::And(ir::LE(FloatImm(0.0), xx), ir::LE(xx, FloatImm(static_cast<double>(W - 1)))));
      auto clamp = [](Expr v, int64_t hi) {
        return ir::ToInt(ir::Min(ir::Max(v, FloatImm(0.0)), FloatImm(static_cast<double>(hi))));
      };
      const Expr at = ir::Add(plane, ir::Add(ir::Mul(clamp(yy, H - 1), IntImm(W)), clamp(xx, W - 1)));
      const Expr weight = ir::Mul(a ? ly : ir::Sub(FloatImm(1.0), ly), e ? lx : ir::Sub(FloatImm(1.0), lx));
      const Expr term = ir::Select(inside, ir::Mul(weight, ir::Load(x, ir::DType::kFloat32, at)), FloatImm(0.0));
      sample = sample ? ir::Add(sample, term) : term;
    }
  }
  Expr value = ir::Mul(ir::Load(w, ir::DType::kFloat32,
                                ir::Add(ir::Mul(ir::Add(ir::Mul(ir::Add(ir::Mul(k, IntImm(CG)), Var(c)), IntImm(KH)), Var(i)),
                                                IntImm(KW)),
                                        Var(j))),
                       sample);
  if (has_mask) {
    const Expr ch = ir::Add(ir::Mul(batch, IntImm(offset_groups * KH * KW)), tap);
    value = ir::Mul(value, ir::Load(mask, ir::DType::kFloat32, ir::Add(ir::Mul(ch, IntImm(OH * OW)), pixel)));
  }
  const Stmt per_tap = ir::Block({ir::Store(fy, IntImm(0), sy), ir::Store(fx, IntImm(0), sx),
                                  ir::Store(acc, IntImm(0), ir::Add(Scalar(acc), value))});
  Stmt taps = ir::For(c, IntImm(CG), CG, ForKind::kSerial,
                      ir::For(i, IntImm(KH), KH, ForKind::kSerial, ir::For(j, IntImm(KW), KW, ForKind::kSerial, per_tap)));
  taps = ir::Allocate(fy, ir::DType::kFloat32, 1, ir::Allocate(fx, ir::DType::kFloat32, 1, taps));
  const Stmt element = ir::Block({
      ir::Store(acc, IntImm(0), has_bias ? ir::Load(bias, ir::DType::kFloat32, k) : FloatImm(0.0)), taps,
      ir::Store(y, ir::Add(ir::Mul(Var(nk), IntImm(OH * OW)), pixel), Scalar(acc))});
  Stmt body = ir::For(oh, IntImm(OH), OH, ForKind::kSerial,
                      ir::For(ow, IntImm(OW), OW, ForKind::kSerial, ir::Allocate(acc, ir::DType::kFloat32, 1, element)));
  return b.Finish(ir::For(nk, IntImm(in[0] * K), in[0] * K, ForKind::kParallel, body));
}

// DFT, directly: output k of each line is the sum over the line's first `length`
// elements (zero past the input's end) times e^(-+2 pi i k n / length), from cos and
// sin tables computed here in double; the inverse divides by length.
absl::StatusOr<NodeKernel> Dft(const Graph& g, const Node& n) {
  Builder b(g, n.op);
  const std::vector<int64_t>& in = b.Shape(n.inputs[0]);
  const std::vector<int64_t>& out = b.Shape(n.outputs[0]);
  const size_t axis = static_cast<size_t>(n.Ints("tf_axis").at(0));
  const int64_t length = n.Ints("tf_length").at(0);
  const bool inverse = n.Int("inverse", 0) != 0, complex = in.back() == 2;
  const int64_t outer = Product(in, 0, axis), inner = Product(in, axis + 1, in.size() - 1);
  const int64_t n_in = in[axis], taps = std::min(n_in, length), k_out = out[axis];
  std::vector<float> cos_table, sin_table;
  const double sign = inverse ? 1.0 : -1.0, scale = inverse ? 1.0 / static_cast<double>(length) : 1.0;
  for (int64_t k = 0; k < k_out; ++k) {
    for (int64_t t = 0; t < taps; ++t) {
      const double angle = 2.0 * M_PI * static_cast<double>((k * t) % length) / static_cast<double>(length);
      cos_table.push_back(static_cast<float>(scale * std::cos(angle)));
      sin_table.push_back(static_cast<float>(scale * sign * std::sin(angle)));
    }
  }
  const std::string x = b.Param(n.inputs[0]);
  const std::string y = b.Param(n.outputs[0], true);
  const std::string c = b.Constant(std::move(cos_table)), sn = b.Constant(std::move(sin_table));
  const std::string p = b.names("p"), t = b.names("t"), re = b.names("re"), im = b.names("im");
  // p walks (outer, k, inner).
  Expr o = ir::Div(Var(p), IntImm(k_out * inner)), k = ir::Mod(ir::Div(Var(p), IntImm(inner)), IntImm(k_out));
  Expr i = ir::Mod(Var(p), IntImm(inner));
  const int64_t width = in.back();
  Expr at = ir::Mul(ir::Add(ir::Mul(ir::Add(ir::Mul(o, IntImm(n_in)), Var(t)), IntImm(inner)), i), IntImm(width));
  Expr a = ir::Load(x, ir::DType::kFloat32, at);
  Expr slot = ir::Add(ir::Mul(k, IntImm(taps)), Var(t));
  Expr cv = ir::Load(c, ir::DType::kFloat32, slot), sv = ir::Load(sn, ir::DType::kFloat32, slot);
  // (a + i bi) (cos + i sin): re a cos - bi sin, im a sin + bi cos.
  Expr re_term = ir::Mul(a, cv), im_term = ir::Mul(a, sv);
  if (complex) {
    Expr bi = ir::Load(x, ir::DType::kFloat32, ir::Add(at, IntImm(1)));
    re_term = ir::Sub(re_term, ir::Mul(bi, sv));
    im_term = ir::Add(im_term, ir::Mul(bi, cv));
  }
  Stmt sum = ir::For(t, IntImm(taps), taps, ForKind::kSerial,
                     ir::Block({ir::Store(re, IntImm(0), ir::Add(Scalar(re), re_term)),
                                ir::Store(im, IntImm(0), ir::Add(Scalar(im), im_term))}));
  Stmt body = ir::Block({ir::Store(re, IntImm(0), FloatImm(0.0)), ir::Store(im, IntImm(0), FloatImm(0.0)), sum,
                         ir::Store(y, ir::Mul(Var(p), IntImm(2)), Scalar(re)),
                         ir::Store(y, ir::Add(ir::Mul(Var(p), IntImm(2)), IntImm(1)), Scalar(im))});
  body = ir::Allocate(re, ir::DType::kFloat32, 1, ir::Allocate(im, ir::DType::kFloat32, 1, body));
  const int64_t lines = outer * k_out * inner;
  return b.Finish(ir::For(p, IntImm(lines), lines, ForKind::kParallel, body));
}

// ArgMax, ArgMin: per line along the axis, the index of its first extreme (the last
// with select_last_index), as a whole number in the float32 storage of int64 tensors.
absl::StatusOr<NodeKernel> ArgExtreme(const Graph& g, const Node& n) {
  Builder b(g, n.op);
  const std::vector<int64_t>& shape = b.Shape(n.inputs[0]);
  const size_t axis = static_cast<size_t>(n.Ints("tf_axis").at(0));
  const int64_t outer = Product(shape, 0, axis), extent = shape[axis], inner = Product(shape, axis + 1);
  const bool max = n.op == "ArgMax", last = n.Int("select_last_index", 0) != 0;
  const std::string x = b.Param(n.inputs[0]);
  const std::string y = b.Param(n.outputs[0], true);
  const std::string line = b.names("line"), j = b.names("j"), best = b.names("best"), at = b.names("at"),
                    k = b.names("k");  // j as a float (the loop IR converts float to int only)
  Expr base = LineStart(Var(line), extent, inner);
  Expr v = ir::Load(x, ir::DType::kFloat32, ir::Add(base, ir::Mul(Var(j), IntImm(inner))));
  // Better: strictly (the first extreme) or not worse (the last).
  Expr better = max ? (last ? ir::LE(Scalar(best), v) : ir::LT(Scalar(best), v))
                    : (last ? ir::LE(v, Scalar(best)) : ir::LT(v, Scalar(best)));
  Stmt step = ir::Block({ir::Store(at, IntImm(0), ir::Select(better, Scalar(k), Scalar(at))),
                         ir::Store(best, IntImm(0), ir::Select(better, v, Scalar(best))),
                         ir::Store(k, IntImm(0), ir::Add(Scalar(k), FloatImm(1.0)))});
  Stmt body = ir::Block({ir::Store(best, IntImm(0), ir::Load(x, ir::DType::kFloat32, base)),
                         ir::Store(at, IntImm(0), FloatImm(0.0)), ir::Store(k, IntImm(0), FloatImm(0.0)),
                         ir::For(j, IntImm(extent), extent, ForKind::kSerial, step),
                         ir::Store(y, Var(line), Scalar(at))});
  Stmt st = ir::Allocate(best, ir::DType::kFloat32, 1,
                         ir::Allocate(at, ir::DType::kFloat32, 1, ir::Allocate(k, ir::DType::kFloat32, 1, body)));
  return b.Finish(ir::For(line, IntImm(outer * inner), outer * inner, ForKind::kParallel, st));
}

// LpNormalization: each line along the axis divided by its L1 or L2 norm.
absl::StatusOr<NodeKernel> LpNormalization(const Graph& g, const Node& n, int lanes) {
  Builder b(g, n.op);
  const std::vector<int64_t>& shape = b.Shape(n.inputs[0]);
  const size_t axis = static_cast<size_t>(n.Ints("tf_axis").at(0));
  const int64_t outer = Product(shape, 0, axis), extent = shape[axis], inner = Product(shape, axis + 1);
  const bool l2 = n.Int("p", 2) == 2;
  const std::string x = b.Param(n.inputs[0]);
  const std::string y = b.Param(n.outputs[0], true);
  const std::string line = b.names("line"), norm = b.names("norm");
  Expr base = LineStart(Var(line), extent, inner);
  auto at = [&](Expr j) { return ir::Add(base, ir::Mul(j, IntImm(inner))); };
  const int vec = inner == 1 ? lanes : 1;
  Stmt reduce = RowReduce(
      norm, extent,
      [&](Expr j) {
        Expr v = ir::Load(x, ir::DType::kFloat32, at(j));
        return l2 ? ir::Mul(v, v) : ir::Call("abs", v);
      },
      Combine::kSum, vec, b.names);
  Expr divisor = l2 ? ir::Call("sqrt", Scalar(norm)) : Scalar(norm);
  Stmt scale = RowLoop(
      extent, vec,
      [&](Expr j) { return ir::Store(y, at(j), ir::Div(ir::Load(x, ir::DType::kFloat32, at(j)), divisor)); },
      b.names);
  Stmt st = ir::Allocate(norm, ir::DType::kFloat32, 1, ir::Block({reduce, scale}));
  return b.Finish(ir::For(line, IntImm(outer * inner), outer * inner, ForKind::kParallel, st));
}

// Softmax, LogSoftmax and Hardmax over one axis: rows of `extent` elements `inner`
// apart (before opset 13, everything from the axis on is one row).
absl::StatusOr<NodeKernel> Softmax(const Graph& g, const Node& n, int lanes, int64_t opset) {
  Builder b(g, n.op);
  const std::vector<int64_t>& shape = b.Shape(n.inputs[0]);
  const int64_t rank = static_cast<int64_t>(shape.size());
  int64_t axis = n.Int("axis", opset >= 13 ? -1 : 1);
  if (axis < 0) axis += rank;
  int64_t outer = Product(shape, 0, static_cast<size_t>(axis));
  int64_t extent = shape[static_cast<size_t>(axis)];
  int64_t inner = Product(shape, static_cast<size_t>(axis) + 1);
  if (opset < 13) {  // the input is coerced to 2-D [outer, everything from axis on]
    extent *= inner;
    inner = 1;
  }
  const std::string x = b.Param(n.inputs[0]);
  const std::string y = b.Param(n.outputs[0], true);
  const std::string row = b.names("row");
  Expr base = inner == 1 ? ir::Mul(Var(row), IntImm(extent))
                         : ir::Add(ir::Mul(ir::Div(Var(row), IntImm(inner)), IntImm(extent * inner)),
                                   ir::Mod(Var(row), IntImm(inner)));
  auto elem = [&](Expr j) { return ir::Add(base, ir::Mul(j, IntImm(inner))); };
  const int vec = inner == 1 ? lanes : 1;
  const std::string m = b.names("max"), s = b.names("sum");
  std::vector<Stmt> body;
  body.push_back(RowReduce(m, extent, [&](Expr j) { return ir::Load(x, ir::DType::kFloat32, elem(j)); },
                           Combine::kMax, vec, b.names));
  if (n.op == "Hardmax") {  // 1 at the first maximum, in order along the row
    const std::string seen = b.names("seen"), j = b.names("j");
    Expr hit = ir::Mul(ir::Select(ir::EQ(ir::Load(x, ir::DType::kFloat32, elem(Var(j))), Scalar(m)), FloatImm(1.0),
                                  FloatImm(0.0)),
                       ir::Sub(FloatImm(1.0), Scalar(seen)));
    body.push_back(ir::Store(seen, IntImm(0), FloatImm(0.0)));
    body.push_back(ir::For(j, IntImm(extent), extent, ForKind::kSerial,
                           ir::Block({ir::Store(y, elem(Var(j)), hit),
                                      ir::Store(seen, IntImm(0), ir::Add(Scalar(seen), ir::Load(y, ir::DType::kFloat32, elem(Var(j)))))})));
    Stmt st = ir::Allocate(m, ir::DType::kFloat32, 1, ir::Allocate(seen, ir::DType::kFloat32, 1, ir::Block(body)));
    return b.Finish(ir::For(row, IntImm(outer * inner), outer * inner, ForKind::kParallel, st));
  }
  // y = exp(x - max), summed as it is written.
  body.push_back(RowReduce(
      s, extent,
      [&](Expr j) {
        return ir::Call("exp", ir::Sub(ir::Load(x, ir::DType::kFloat32, elem(j)), Scalar(m)));
      },
      Combine::kSum, vec, b.names));
  const std::string inv = b.names("inv");
  // Softmax: y = exp(x - max) * (1 / sum); LogSoftmax: y = x - max - log(sum) (inv
  // holds the log). One loop over the row.
  const std::string j = b.names("j");
  const bool log_softmax = n.op == "LogSoftmax";
  Expr shifted = ir::Sub(ir::Load(x, ir::DType::kFloat32, elem(Var(j))), Scalar(m));
  Expr value = log_softmax ? ir::Sub(shifted, Scalar(inv)) : ir::Mul(ir::Call("exp", shifted), Scalar(inv));
  Stmt scale = RowLoop(extent, vec, [&](Expr jj) { return ir::Store(y, elem(jj), ir::Substitute(value, {{j, jj}})); },
                       b.names);
  body.push_back(ir::Store(inv, IntImm(0),
                           log_softmax ? ir::Call("log", Scalar(s)) : ir::Div(FloatImm(1.0), Scalar(s))));
  body.push_back(scale);
  Stmt st = ir::Block(body);
  for (const std::string& local : {m, s, inv}) st = ir::Allocate(local, ir::DType::kFloat32, 1, st);
  return b.Finish(ir::For(row, IntImm(outer * inner), outer * inner, ForKind::kParallel, st));
}

// LayerNormalization (rows are everything before `axis`; scale and bias per element
// of a row), InstanceNormalization (rows are (n, c); scale and bias per channel) and
// GroupNormalization (rows are (n, group); scale and bias per channel, or per group
// before opset 21).
absl::StatusOr<NodeKernel> LayerNorm(const Graph& g, const Node& n, int lanes) {
  Builder b(g, n.op);
  const std::vector<int64_t>& shape = b.Shape(n.inputs[0]);
  const int64_t rank = static_cast<int64_t>(shape.size());
  const bool instance = n.op == "InstanceNormalization", group = n.op == "GroupNormalization";
  int64_t axis = instance || group ? 2 : n.Int("axis", -1);
  if (axis < 0) axis += rank;
  const int64_t groups = group ? n.Int("num_groups", 1) : 1;
  const int64_t rows = Product(shape, 0, static_cast<size_t>(axis)) / (group ? shape[1] / groups : 1);
  const int64_t len = Product(shape, static_cast<size_t>(axis)) * (group ? shape[1] / groups : 1);
  const int64_t spatial = Product(shape, 2);
  const float eps = n.Float("epsilon", 1e-5f);
  const std::string x = b.Param(n.inputs[0]);
  const std::string row = b.names("row");
  auto vector_param = [&](size_t i) -> std::string {
    if (i >= n.inputs.size() || n.inputs[i] < 0) return "";
    const int64_t e = T(g, n.inputs[i]).NumElements();
    if (instance) return e == shape[1] ? b.Param(n.inputs[i]) : "?";
    if (group) return e == shape[1] || e == groups ? b.Param(n.inputs[i]) : "?";
    return e == len || e == 1 ? b.Param(n.inputs[i]) : "?";
  };
  const std::string scale = vector_param(1), bias = vector_param(2);
  if (scale == "?" || bias == "?") return Unsupported(n, "a scale or bias that broadcasts partially");
  auto elem = [&](const std::string& buf, Expr j) {
    if (instance) return ir::Load(buf, ir::DType::kFloat32, ir::Mod(Var(row), IntImm(shape[1])));
    const int t = n.inputs[buf == scale ? 1 : 2];
    if (group && T(g, t).NumElements() == groups) {
      return ir::Load(buf, ir::DType::kFloat32, ir::Mod(Var(row), IntImm(groups)));
    }
    if (group) {  // the channel of element j of the row
      return ir::Load(buf, ir::DType::kFloat32,
                      ir::Add(ir::Mul(ir::Mod(Var(row), IntImm(groups)), IntImm(shape[1] / groups)),
                              ir::Div(j, IntImm(spatial))));
    }
    return ir::Load(buf, ir::DType::kFloat32, T(g, t).NumElements() == 1 ? IntImm(0) : j);
  };
  const std::string y = b.Param(n.outputs[0], true);
  // The optional outputs: the mean and 1/sqrt(variance + epsilon) of every row.
  const std::string mean_out = n.outputs.size() > 1 ? b.Param(n.outputs[1], true) : "";
  const std::string inv_out = n.outputs.size() > 2 ? b.Param(n.outputs[2], true) : "";
  Expr base = ir::Mul(Var(row), IntImm(len));
  auto xat = [&](Expr j) { return ir::Load(x, ir::DType::kFloat32, ir::Add(base, j)); };
  const std::string sum = b.names("sum"), sq = b.names("sq"), mean = b.names("mean"),
                    inv = b.names("inv");
  std::vector<Stmt> body;
  body.push_back(RowReduce(sum, len, xat, Combine::kSum, lanes, b.names));
  body.push_back(ir::Store(mean, IntImm(0), ir::Mul(Scalar(sum), FloatImm(1.0 / static_cast<double>(len)))));
  body.push_back(RowReduce(
      sq, len,
      [&](Expr j) {
        Expr d = ir::Sub(xat(j), Scalar(mean));
        return ir::Mul(d, d);
      },
      Combine::kSum, lanes, b.names));
  body.push_back(ir::Store(
      inv, IntImm(0),
      ir::Div(FloatImm(1.0), ir::Call("sqrt", ir::Add(ir::Mul(Scalar(sq), FloatImm(1.0 / static_cast<double>(len))),
                                                      FloatImm(eps))))));
  if (!mean_out.empty()) body.push_back(ir::Store(mean_out, Var(row), Scalar(mean)));
  if (!inv_out.empty()) body.push_back(ir::Store(inv_out, Var(row), Scalar(inv)));
  body.push_back(RowLoop(
      len, lanes,
      [&](Expr j) {
        Expr v = ir::Mul(ir::Sub(xat(j), Scalar(mean)), Scalar(inv));
        if (!scale.empty()) v = ir::Mul(v, elem(scale, j));
        if (!bias.empty()) v = ir::Add(v, elem(bias, j));
        return ir::Store(y, ir::Add(base, j), v);
      },
      b.names));
  Stmt st = ir::Block(body);
  for (const std::string& local : {sum, sq, mean, inv}) st = ir::Allocate(local, ir::DType::kFloat32, 1, st);
  return b.Finish(ir::For(row, IntImm(rows), rows, ForKind::kParallel, st));
}

// The reductions (ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, ReduceL1,
// ReduceL2, ReduceSumSquare, ReduceLogSum, ReduceLogSumExp) and GlobalAveragePool
// (ReduceMean over H and W) over a set of axes. ReduceLogSumExp subtracts the
// maximum first (log(sum(exp(x - max))) + max), so that large inputs do not overflow.
absl::StatusOr<NodeKernel> Reduce(const Graph& g, const Node& n, int lanes, const std::string& op,
                                  std::vector<int64_t> axes) {
  Builder b(g, n.op);
  const std::vector<int64_t>& shape = b.Shape(n.inputs[0]);
  const int64_t rank = static_cast<int64_t>(shape.size());
  std::vector<bool> reduce(static_cast<size_t>(rank), false);
  for (int64_t a : axes) reduce[static_cast<size_t>(a < 0 ? a + rank : a)] = true;
  const std::string x = b.Param(n.inputs[0]);
  const std::string y = b.Param(n.outputs[0], true);
  const std::vector<int64_t> s = RowMajorStrides(shape);
  // Kept and reduced dimensions with their input strides.
  std::vector<int64_t> keep_dims, keep_strides, red_dims, red_strides;
  for (int64_t d = 0; d < rank; ++d) {
    (reduce[static_cast<size_t>(d)] ? red_dims : keep_dims).push_back(shape[static_cast<size_t>(d)]);
    (reduce[static_cast<size_t>(d)] ? red_strides : keep_strides).push_back(s[static_cast<size_t>(d)]);
  }
  const int64_t outs = Product(keep_dims), count = Product(red_dims);
  const std::string o = b.names("o");
  // Offset of the element of x at the flat index `flat` over `dims` with `strides`.
  auto offset = [](Expr flat, const std::vector<int64_t>& dims, const std::vector<int64_t>& strides) {
    std::vector<Expr> i = ir::Unflatten(flat, dims);
    Expr off = IntImm(0);
    for (size_t d = dims.size(); d-- > 0;) off = ir::Add(off, ir::Mul(i[d], IntImm(strides[d])));
    return off;
  };
  Expr base = offset(Var(o), keep_dims, keep_strides);
  // Reduced axes trailing and contiguous: one vectorized row reduction.
  bool trailing = true;
  for (int64_t d = 0; d < rank; ++d) {
    if (reduce[static_cast<size_t>(d)] && d + 1 < rank && !reduce[static_cast<size_t>(d) + 1]) trailing = false;
  }
  auto element = [&](Expr j) {
    if (trailing) return ir::Load(x, ir::DType::kFloat32, ir::Add(base, j));
    return ir::Load(x, ir::DType::kFloat32, ir::Add(base, offset(j, red_dims, red_strides)));
  };
  const int vec = trailing ? lanes : 1;
  const std::string acc = b.names("acc"), top = b.names("top");
  std::vector<Stmt> body;
  Expr result = Scalar(acc);
  if (op == "ReduceMax" || op == "ReduceMin" || op == "ReduceProd") {
    body.push_back(RowReduce(acc, count, element,
                             op == "ReduceMax" ? Combine::kMax : op == "ReduceMin" ? Combine::kMin : Combine::kProduct,
                             vec, b.names));
  } else if (op == "ReduceLogSumExp") {
    body.push_back(RowReduce(top, count, element, Combine::kMax, vec, b.names));
    // A row of -inf (or +inf) keeps its maximum out of the subtraction.
    const float big = std::numeric_limits<float>::max();
    body.push_back(ir::Store(top, IntImm(0), ir::Min(ir::Max(Scalar(top), FloatImm(-big)), FloatImm(big))));
    body.push_back(RowReduce(acc, count, [&](Expr j) { return ir::Call("exp", ir::Sub(element(j), Scalar(top))); },
                             Combine::kSum, vec, b.names));
    result = ir::Add(ir::Call("log", Scalar(acc)), Scalar(top));
  } else {
    std::function<Expr(Expr)> term = element;
    if (op == "ReduceL1") term = [&](Expr j) { return ir::Call("abs", element(j)); };
    if (op == "ReduceL2" || op == "ReduceSumSquare") {
      term = [&](Expr j) {
        Expr v = element(j);
        return ir::Mul(v, v);
      };
    }
    body.push_back(RowReduce(acc, count, term, Combine::kSum, vec, b.names));
    if (op == "ReduceMean") result = ir::Mul(Scalar(acc), FloatImm(1.0 / static_cast<double>(count)));
    if (op == "ReduceL2") result = ir::Call("sqrt", Scalar(acc));
    if (op == "ReduceLogSum") result = ir::Call("log", Scalar(acc));
  }
  body.push_back(ir::Store(y, Var(o), result));
  Stmt st = ir::Allocate(acc, ir::DType::kFloat32, 1, ir::Allocate(top, ir::DType::kFloat32, 1, ir::Block(body)));
  return b.Finish(ir::For(o, IntImm(outs), outs, ForKind::kParallel, st));
}

// LRN over NCHW...: y = x / (bias + alpha / size * sum of x^2 over the `size`
// channels around c) ^ beta. Parallel over (n, c) rows, vectorized along the row;
// the window's channels are unrolled, each read at its channel clamped into range
// and counted only when inside (so no branch in the vector loop). The power is
// 1 / (sqrt(base) * sqrt(sqrt(base))) for beta 0.75 (AlexNet's, GoogLeNet's), else
// exp(-beta * log(base)) (the base is >= bias > 0).
absl::StatusOr<NodeKernel> Lrn(const Graph& g, const Node& n, int lanes) {
  Builder b(g, n.op);
  const std::vector<int64_t>& shape = b.Shape(n.inputs[0]);
  const int64_t size = n.Int("size", 0);
  const float alpha = n.Float("alpha", 1e-4f), beta = n.Float("beta", 0.75f), bias = n.Float("bias", 1.0f);
  if (size < 1) return Unsupported(n, "size < 1");
  if (size > 64) return Unsupported(n, "size > 64");
  if (!(bias > 0.0f) || alpha < 0.0f) return Unsupported(n, "bias <= 0 or alpha < 0");
  const int64_t C = shape[1], inner = Product(shape, 2), before = (size - 1) / 2;
  const std::string x = b.Param(n.inputs[0]);
  const std::string y = b.Param(n.outputs[0], true);
  const std::string r = b.names("r");
  Expr c = ir::Mod(Var(r), IntImm(C));
  Expr row_start = ir::Mul(Var(r), IntImm(inner));
  Stmt row = RowLoop(
      inner, lanes,
      [&](Expr j) {
        Expr sum = FloatImm(0.0);
        for (int64_t w = 0; w < size; ++w) {
          const int64_t offset = w - before;  // channel c + offset
          Expr c2 = ir::Add(c, IntImm(offset));
          Expr clamped = ir::Min(ir::Max(c2, IntImm(0)), IntImm(C - 1));
          Expr v = ir::Load(x, ir::DType::kFloat32,
                            ir::Add(ir::Mul(ir::Add(ir::Sub(Var(r), c), clamped), IntImm(inner)), j));
          Expr inside = ir::And(ir::LE(IntImm(0), c2), ir::LT(c2, IntImm(C)));
          sum = ir::Add(sum, offset == 0 ? ir::Mul(v, v) : ir::Select(inside, ir::Mul(v, v), FloatImm(0.0)));
        }
        Expr base = ir::Add(FloatImm(bias), ir::Mul(FloatImm(alpha / static_cast<double>(size)), sum));
        Expr xv = ir::Load(x, ir::DType::kFloat32, ir::Add(row_start, j));
        Expr out;
        if (beta == 0.75f) {
          Expr root = ir::Call("sqrt", base);
          out = ir::Div(xv, ir::Mul(root, ir::Call("sqrt", root)));
        } else {
          out = ir::Mul(xv, ir::Call("exp", ir::Mul(FloatImm(-static_cast<double>(beta)), ir::Call("log", base))));
        }
        return ir::Store(y, ir::Add(row_start, j), out);
      },
      b.names);
  const int64_t rows = shape[0] * C;
  return b.Finish(ir::For(r, IntImm(rows), rows, ForKind::kParallel, row));
}

// MaxPool / AveragePool / LpPool over N x C x spatial (1 to 3 spatial dimensions),
// padding by bounds checks. AveragePool divides by the taps inside the input, or
// with count_include_pad by the whole window. A ceil_mode window that reaches past
// the end padding is refused with count_include_pad: the ONNX reference counts its
// taps beyond the padding, onnxruntime and PyTorch do not, so either answer would be
// wrong for someone.
// MaxPool and AveragePool over 2 spatial dimensions, separably: per (n, c) plane and
// output row, a vertical pass reduces the window's input rows into a row buffer t
// (every input column, in vectors along the row: a window row outside the image is
// left out by a select on the row alone), then a horizontal pass reduces t's columns.
// At stride 1 the horizontal pass writes the output; at other strides it writes every
// window start into a second row buffer at stride 1 and the output takes every
// stride-th (vector loads at stride 2 would be gathers). Columns whose window lies
// inside the image run in vectors, the last overlapping the one before instead of a
// scalar tail; border columns one at a time with the column checked. Max and sum are
// both separable; AveragePool without count_include_pad divides by the taps inside
// (rows inside x columns inside). Alone on Zen 4 (minima of 200 runs, 2 threads, the
// graph input's copy included): a 3x3 stride-1 average pool over 256 x 28 x 28
// 0.243 ms with a branch per tap -> 0.10 (onnxruntime 0.06-0.07); a 3x3 stride-2
// MaxPool over 64 x 112 x 112 0.29-0.34 -> 0.17 (onnxruntime 0.10-0.13); repeated
// alone inside Inception v2, that MaxPool 0.17-0.3 -> 0.055 ms.
// Pool2d keeps a row of the input (and one of window starts) on the stack.
constexpr int64_t kMaxPoolRow = 8192;

absl::StatusOr<NodeKernel> Pool2d(const Graph& g, const Node& n, int lanes) {
  Builder b(g, n.op);
  const std::vector<int64_t>& in = b.Shape(n.inputs[0]);
  const std::vector<int64_t>& out = b.Shape(n.outputs[0]);
  const std::vector<int64_t> k = n.Ints("kernel_shape");
  const std::vector<int64_t> st = n.Ints("strides", {1, 1});
  const std::vector<int64_t> dil = n.Ints("dilations", {1, 1});
  const std::vector<int64_t> pads = n.Ints("pads", {0, 0, 0, 0});
  const bool is_max = n.op == "MaxPool", include_pad = n.Int("count_include_pad", 0) != 0;
  const int64_t H = in[2], W = in[3], OH = out[2], OW = out[3];
  const std::string x = b.Param(n.inputs[0]);
  const std::string y = b.Param(n.outputs[0], true);
  const std::string row = b.names("nc"), oh = b.names("oh"), t = b.names("t"), u = b.names("u");
  const Expr minus_inf = FloatImm(-std::numeric_limits<double>::infinity());
  // Max(a, b) is a < b ? b : a: a NaN tap is passed over (the running maximum starts
  // at -inf and a NaN never becomes it), as Pool's general form does.
  auto combine = [&](Expr acc, Expr valid, Expr v) {
    if (is_max) return ir::Max(acc ? acc : minus_inf, ir::Select(valid, v, minus_inf));
    Expr term = ir::Select(valid, v, FloatImm(0.0));
    return acc ? ir::Add(acc, term) : term;
  };
  // A loop over [first, last) of a row: vectors where `vector_ok`, the last one
  // overlapping the one before; `body(column, vectorized)`.
  auto row_loop = [&](int64_t first, int64_t last, bool vector_ok, const std::function<Stmt(Expr)>& body) -> Stmt {
    const int64_t count = last - first;
    if (count <= 0) return ir::Block({});
    const int64_t vec = vector_ok && lanes > 1 && count >= lanes ? lanes : 1;
    const std::string jo = b.names("jo"), ji = b.names("ji");
    const int64_t chunks = (count + vec - 1) / vec;
    Expr begin = vec == 1 ? Var(jo) : ir::Min(ir::Mul(Var(jo), IntImm(vec)), IntImm(count - vec));
    return ir::For(jo, IntImm(chunks), chunks, ForKind::kSerial,
                   ir::For(ji, IntImm(vec), vec, vec > 1 ? ForKind::kVectorized : ForKind::kSerial,
                           body(ir::Add(ir::Add(IntImm(first), begin), Var(ji)))));
  };
  // Vertical: t[iw] over the window's rows inside the image; the rows inside, counted.
  Expr rows_inside;
  auto vertical = [&](Expr iw) {
    Expr acc;
    for (int64_t rh = 0; rh < k[0]; ++rh) {
      Expr ih = ir::Add(ir::Mul(Var(oh), IntImm(st[0])), IntImm(rh * dil[0] - pads[0]));
      Expr valid = ir::And(ir::LE(IntImm(0), ih), ir::LT(ih, IntImm(H)));
      Expr ihc = ir::Min(ir::Max(ih, IntImm(0)), IntImm(H - 1));
      acc = combine(acc, valid, ir::Load(x, ir::DType::kFloat32,
                                          ir::Add(ir::Mul(ir::Add(ir::Mul(Var(row), IntImm(H)), ihc), IntImm(W)), iw)));
    }
    return ir::Store(t, iw, acc);
  };
  for (int64_t rh = 0; rh < k[0]; ++rh) {
    Expr ih = ir::Add(ir::Mul(Var(oh), IntImm(st[0])), IntImm(rh * dil[0] - pads[0]));
    Expr one = ir::Select(ir::And(ir::LE(IntImm(0), ih), ir::LT(ih, IntImm(H))), FloatImm(1.0), FloatImm(0.0));
    rows_inside = rows_inside ? ir::Add(rows_inside, one) : one;
  }
  // Horizontal, over window start s (the input column of its first tap plus the pad):
  // the reduction of t over the window's columns inside the image.
  auto horizontal = [&](Expr start, bool interior) {
    Expr acc, columns_inside;
    for (int64_t rw = 0; rw < k[1]; ++rw) {
      Expr iw = ir::Add(start, IntImm(rw * dil[1] - pads[1]));
      Expr valid = ir::EQ(IntImm(0), IntImm(0));
      if (!interior) {
        valid = ir::And(ir::LE(IntImm(0), iw), ir::LT(iw, IntImm(W)));
        iw = ir::Min(ir::Max(iw, IntImm(0)), IntImm(W - 1));
      }
      acc = combine(acc, valid, ir::Load(t, ir::DType::kFloat32, iw));
      Expr one = ir::Select(valid, FloatImm(1.0), FloatImm(0.0));
      columns_inside = columns_inside ? ir::Add(columns_inside, one) : one;
    }
    if (is_max) return acc;
    if (include_pad) return ir::Div(acc, FloatImm(static_cast<double>(k[0] * k[1])));
    return ir::Div(acc, ir::Mul(rows_inside, interior ? FloatImm(static_cast<double>(k[1])) : columns_inside));
  };
  // Window starts s whose taps all lie inside the image: pad <= s <= W - 1 + pad - (k - 1) dilation.
  const int64_t starts = (OW - 1) * st[1] + 1;  // window starts at stride 1, 0 .. (OW - 1) * stride
  const int64_t lo = std::min(starts, pads[1]);
  const int64_t hi = std::max(lo, std::min(starts, W + pads[1] - (k[1] - 1) * dil[1]));
  const Expr out_row = ir::Mul(ir::Add(ir::Mul(Var(row), IntImm(OH)), Var(oh)), IntImm(OW));
  std::vector<Stmt> steps = {row_loop(0, W, true, vertical)};
  // At stride 1 window start s is output column s; otherwise s goes into u.
  const bool direct = st[1] == 1;
  for (auto [first, last, interior] : {std::tuple<int64_t, int64_t, bool>{0, lo, false}, {lo, hi, true},
                                       {hi, starts, false}}) {
    steps.push_back(row_loop(first, last, interior, [&, interior = interior](Expr start) {
      return direct ? ir::Store(y, ir::Add(out_row, start), horizontal(start, interior))
                    : ir::Store(u, start, horizontal(start, interior));
    }));
  }
  if (!direct) {
    const std::string ow = b.names("ow");
    steps.push_back(ir::For(ow, IntImm(OW), OW, ForKind::kSerial,
                            ir::Store(y, ir::Add(out_row, Var(ow)),
                                      ir::Load(u, ir::DType::kFloat32, ir::Mul(Var(ow), IntImm(st[1]))))));
  }
  Stmt body = ir::For(oh, IntImm(OH), OH, ForKind::kSerial, ir::Block(steps));
  body = ir::Allocate(t, ir::DType::kFloat32, W, body);
  if (st[1] != 1) body = ir::Allocate(u, ir::DType::kFloat32, starts, body);
  return b.Finish(ir::For(row, IntImm(in[0] * in[1]), in[0] * in[1], ForKind::kParallel, body));
}

absl::StatusOr<NodeKernel> Pool(const Graph& g, const Node& n, int lanes) {
  Builder b(g, n.op);
  const std::vector<int64_t>& in = b.Shape(n.inputs[0]);
  const std::vector<int64_t>& out = b.Shape(n.outputs[0]);
  if (n.outputs.size() > 1) return Unsupported(n, "MaxPool's Indices output");
  const size_t dims = in.size() - 2;
  const std::vector<int64_t> k = n.Ints("kernel_shape");
  const std::vector<int64_t> st = n.Ints("strides", std::vector<int64_t>(dims, 1));
  const std::vector<int64_t> dil = n.Ints("dilations", std::vector<int64_t>(dims, 1));
  const std::vector<int64_t> pads = n.Ints("pads", std::vector<int64_t>(2 * dims, 0));
  if (n.Int("storage_order", 0) != 0) return Unsupported(n, "storage_order 1");
  const bool is_max = n.op == "MaxPool", is_lp = n.op == "LpPool";
  const bool include_pad = n.Int("count_include_pad", 0) != 0;
  for (size_t d = 0; d < dims; ++d) {
    if (n.op == "AveragePool" && include_pad &&
        (out[d + 2] - 1) * st[d] - pads[d] + (k[d] - 1) * dil[d] >= in[d + 2] + pads[d + dims]) {
      return Unsupported(n, "count_include_pad with a window past the end padding (ceil_mode)");
    }
  }
  if (dims == 2 && !is_lp && in[3] <= kMaxPoolRow && (out[3] - 1) * st[1] + 1 <= kMaxPoolRow) {
    return Pool2d(g, n, lanes);
  }
  const int64_t p = n.Int("p", 2);
  if (is_lp && p < 1) return Unsupported(n, "p < 1");
  const std::string x = b.Param(n.inputs[0]);
  const std::string y = b.Param(n.outputs[0], true);
  const std::string row = b.names("nc"), acc = b.names("acc"), cnt = b.names("cnt");
  std::vector<std::string> o(dims), r(dims);
  for (size_t d = 0; d < dims; ++d) {
    o[d] = b.names("o");
    r[d] = b.names("r");
  }
  Expr inside, in_index = Var(row), out_index = Var(row);
  int64_t window = 1;
  for (size_t d = 0; d < dims; ++d) {
    const int64_t extent = in[d + 2];
    Expr i = ir::Add(ir::Sub(ir::Mul(Var(o[d]), IntImm(st[d])), IntImm(pads[d])), ir::Mul(Var(r[d]), IntImm(dil[d])));
    Expr here = ir::And(ir::LE(IntImm(0), i), ir::LT(i, IntImm(extent)));
    inside = inside ? ir::And(inside, here) : here;
    window *= k[d];
    in_index = ir::Add(ir::Mul(in_index, IntImm(extent)), i);
    out_index = ir::Add(ir::Mul(out_index, IntImm(out[d + 2])), Var(o[d]));
  }
  Expr value = ir::Load(x, ir::DType::kFloat32, in_index);
  if (is_lp) value = p == 1 ? ir::Call("abs", value) : p == 2 ? ir::Mul(value, value)
                                                              : PowConst(ir::Call("abs", value), static_cast<float>(p));
  Stmt update = ir::Store(acc, IntImm(0), is_max ? ir::Max(Scalar(acc), value) : ir::Add(Scalar(acc), value));
  Stmt tap = ir::IfThenElse(inside, update);
  if (n.op == "AveragePool" && !include_pad) {
    tap = ir::IfThenElse(inside, ir::Block({update, ir::Store(cnt, IntImm(0), ir::Add(Scalar(cnt), FloatImm(1.0)))}));
  }
  for (size_t d = dims; d-- > 0;) tap = ir::For(r[d], IntImm(k[d]), k[d], ForKind::kSerial, tap);
  std::vector<Stmt> pixel = {
      ir::Store(acc, IntImm(0), FloatImm(is_max ? -std::numeric_limits<float>::infinity() : 0.0))};
  if (n.op == "AveragePool") {
    pixel.push_back(ir::Store(cnt, IntImm(0), FloatImm(include_pad ? static_cast<double>(window) : 0.0)));
  }
  pixel.push_back(tap);
  Expr result = Scalar(acc);
  if (n.op == "AveragePool") result = ir::Div(result, Scalar(cnt));
  if (is_lp && p == 2) result = ir::Call("sqrt", result);
  if (is_lp && p > 2) result = PowConst(result, 1.0f / static_cast<float>(p));
  pixel.push_back(ir::Store(y, out_index, result));
  Stmt body = ir::Allocate(acc, ir::DType::kFloat32, 1, ir::Block(pixel));
  if (n.op == "AveragePool") body = ir::Allocate(cnt, ir::DType::kFloat32, 1, body);
  for (size_t d = dims; d-- > 0;) body = ir::For(o[d], IntImm(out[d + 2]), out[d + 2], ForKind::kSerial, body);
  return b.Finish(ir::For(row, IntImm(in[0] * in[1]), in[0] * in[1], ForKind::kParallel, body));
}

// ConvTranspose, direct: output element o of a spatial axis gathers input element
// i and kernel tap k where o = i * stride - pad + k * dilation. The tap loop runs
// over every k and keeps those whose (o + pad - k * dilation) is a non-negative
// multiple of the stride inside the input; the offset F (a multiple of the stride
// past the largest k * dilation) keeps the integer division non-negative.
absl::StatusOr<NodeKernel> ConvTranspose(const Graph& g, const Node& n) {
  Builder b(g, n.op);
  const std::vector<int64_t>& in = b.Shape(n.inputs[0]);
  const std::vector<int64_t>& w = b.Shape(n.inputs[1]);
  const std::vector<int64_t>& out = b.Shape(n.outputs[0]);
  const size_t dims = in.size() - 2;
  const std::vector<int64_t> st = n.Ints("strides", std::vector<int64_t>(dims, 1));
  const std::vector<int64_t> dil = n.Ints("dilations", std::vector<int64_t>(dims, 1));
  const std::vector<int64_t> pads = n.Ints("pads", std::vector<int64_t>(2 * dims, 0));
  const int64_t group = n.Int("group", 1);
  const int64_t C = in[1], M = out[1], cg = C / group, mg = M / group;
  const std::string x = b.Param(n.inputs[0]);
  const std::string wt = b.Param(n.inputs[1]);
  const std::string bias = n.inputs.size() > 2 && n.inputs[2] >= 0 ? b.Param(n.inputs[2]) : "";
  const std::string y = b.Param(n.outputs[0], true);
  const std::string row = b.names("nm"), c = b.names("c"), acc = b.names("acc");
  std::vector<std::string> o(dims), k(dims);
  for (size_t d = 0; d < dims; ++d) {
    o[d] = b.names("o");
    k[d] = b.names("k");
  }
  const int64_t in_spatial = Product(in, 2), k_spatial = Product(w, 2);
  Expr batch = ir::Div(Var(row), IntImm(M)), oc = ir::Mod(Var(row), IntImm(M));
  Expr ic = ir::Add(ir::Mul(ir::Div(oc, IntImm(mg)), IntImm(cg)), Var(c));
  Expr valid, in_index = IntImm(0), w_index = IntImm(0), out_index = Var(row);
  for (size_t d = 0; d < dims; ++d) {
    const int64_t reach = (w[d + 2] - 1) * dil[d] + std::max<int64_t>(0, -pads[d]);  // pads < 0 from output_shape
    const int64_t F = (reach + st[d] - 1) / st[d] * st[d];
    Expr t = ir::Sub(ir::Add(Var(o[d]), IntImm(pads[d] + F)), ir::Mul(Var(k[d]), IntImm(dil[d])));
    Expr here = ir::And(ir::And(ir::LE(IntImm(F), t), ir::LT(t, IntImm(F + st[d] * in[d + 2]))),
                        ir::EQ(ir::Mod(t, IntImm(st[d])), IntImm(0)));
    valid = valid ? ir::And(valid, here) : here;
    in_index = ir::Add(ir::Mul(in_index, IntImm(in[d + 2])), ir::Sub(ir::Div(t, IntImm(st[d])), IntImm(F / st[d])));
    w_index = ir::Add(ir::Mul(w_index, IntImm(w[d + 2])), Var(k[d]));
    out_index = ir::Add(ir::Mul(out_index, IntImm(out[d + 2])), Var(o[d]));
  }
  Expr xv = ir::Load(x, ir::DType::kFloat32,
                     ir::Add(ir::Mul(ir::Add(ir::Mul(batch, IntImm(C)), ic), IntImm(in_spatial)), in_index));
  Expr wv = ir::Load(wt, ir::DType::kFloat32,
                     ir::Add(ir::Mul(ir::Add(ir::Mul(ic, IntImm(mg)), ir::Mod(oc, IntImm(mg))), IntImm(k_spatial)),
                             w_index));
  Stmt tap = ir::IfThenElse(valid, ir::Store(acc, IntImm(0), ir::Add(Scalar(acc), ir::Mul(xv, wv))));
  for (size_t d = dims; d-- > 0;) tap = ir::For(k[d], IntImm(w[d + 2]), w[d + 2], ForKind::kSerial, tap);
  tap = ir::For(c, IntImm(cg), cg, ForKind::kSerial, tap);
  Stmt pixel = ir::Block({ir::Store(acc, IntImm(0), bias.empty() ? FloatImm(0.0) : ir::Load(bias, ir::DType::kFloat32, oc)),
                          tap, ir::Store(y, out_index, Scalar(acc))});
  Stmt body = ir::Allocate(acc, ir::DType::kFloat32, 1, pixel);
  for (size_t d = dims; d-- > 0;) body = ir::For(o[d], IntImm(out[d + 2]), out[d + 2], ForKind::kSerial, body);
  return b.Finish(ir::For(row, IntImm(in[0] * M), in[0] * M, ForKind::kParallel, body));
}

// GridSample as the ONNX reference computes it (PyTorch's grid_sample): per spatial
// axis the grid's normalized coordinate (the grid's last axis lists them from the
// innermost spatial axis out) is denormalized, rounded half to even for nearest,
// moved back inside [lo, hi] by clamping (border) or reflection when outside; then
// 1, 2 or 4 taps per axis from floor(x), each tap's index clamped, reflected, or
// read as 0 outside the input (zeros).
absl::StatusOr<NodeKernel> GridSample(const Graph& g, const Node& n) {
  Builder b(g, n.op);
  const std::vector<int64_t>& in = b.Shape(n.inputs[0]);
  const std::vector<int64_t>& out = b.Shape(n.outputs[0]);
  const size_t dims = in.size() - 2;
  const std::string mode = n.attrs.at("mode").text, padding = n.attrs.at("padding_mode").text;
  const bool align = n.Int("align_corners", 0) != 0;
  const std::string x = b.Param(n.inputs[0]);
  const std::string grid = b.Param(n.inputs[1]);
  const std::string y = b.Param(n.outputs[0], true);
  const std::string row = b.names("nc");
  std::vector<std::string> o(dims), pos(dims);
  for (size_t d = 0; d < dims; ++d) {
    o[d] = b.names("o");
    pos[d] = b.names("x");
  }
  const int64_t C = in[1], out_spatial = Product(out, 2), in_spatial = Product(in, 2);
  Expr batch = ir::Div(Var(row), IntImm(C));
  Expr pixel = IntImm(0);  // the output position within its spatial block
  for (size_t d = 0; d < dims; ++d) pixel = ir::Add(ir::Mul(pixel, IntImm(out[d + 2])), Var(o[d]));
  auto reflect = [](Expr v, double lo, double hi) {
    const double range = hi - lo;
    auto fold = [&](Expr dx, bool from_low) {  // dx >= 0 past the bound
      Expr turns = ir::Call("floor", ir::Div(dx, FloatImm(range)));
      Expr r = ir::Sub(dx, ir::Mul(turns, FloatImm(range)));
      Expr even = ir::EQ(ir::Mod(turns, FloatImm(2.0)), FloatImm(0.0));
      Expr near = from_low ? ir::Add(FloatImm(lo), r) : ir::Sub(FloatImm(hi), r);
      Expr far = from_low ? ir::Sub(FloatImm(hi), r) : ir::Add(FloatImm(lo), r);
      return ir::Select(even, near, far);
    };
    Expr below = fold(ir::Sub(FloatImm(lo), v), true);
    Expr above = fold(ir::Sub(v, FloatImm(hi)), false);
    return ir::Select(ir::LT(v, FloatImm(lo)), below, ir::Select(ir::LT(FloatImm(hi), v), above, v));
  };
  std::vector<Stmt> body;
  std::vector<double> lo(dims), hi(dims);
  for (size_t d = 0; d < dims; ++d) {
    const double L = static_cast<double>(in[d + 2]);
    lo[d] = align ? 0.0 : -0.5;
    hi[d] = align ? L - 1 : L - 0.5;
    Expr normalized = ir::Load(grid, ir::DType::kFloat32,
                               ir::Add(ir::Mul(ir::Add(ir::Mul(batch, IntImm(out_spatial)), pixel), IntImm(static_cast<int64_t>(dims))),
                                       IntImm(static_cast<int64_t>(dims - 1 - d))));
    Expr v = align ? ir::Mul(ir::Mul(ir::Add(normalized, FloatImm(1.0)), FloatImm(0.5)), FloatImm(L - 1))
                   : ir::Mul(ir::Sub(ir::Mul(ir::Add(normalized, FloatImm(1.0)), FloatImm(L)), FloatImm(1.0)), FloatImm(0.5));
    if (mode == "nearest") v = ir::Call("round", v);
    if (padding == "border") {  // only a coordinate outside [lo, hi] is clamped
      v = ir::Select(ir::LT(v, FloatImm(lo[d])), FloatImm(0.0),
                     ir::Select(ir::LT(FloatImm(hi[d]), v), FloatImm(L - 1), v));
    }
    if (padding == "reflection") v = reflect(v, lo[d], hi[d]);
    body.push_back(ir::Store(pos[d], IntImm(0), v));
  }
  // Taps per axis: (index as float, weight or null).
  std::vector<std::vector<std::pair<Expr, Expr>>> taps(dims);
  for (size_t d = 0; d < dims; ++d) {
    Expr v = Scalar(pos[d]);
    if (mode == "nearest") {
      taps[d].push_back({v, nullptr});
      continue;
    }
    Expr base = ir::Call("floor", v);
    Expr t = ir::Sub(v, base);
    const double a = -0.75;
    if (mode == "linear") {
      taps[d].push_back({base, ir::Sub(FloatImm(1.0), t)});
      taps[d].push_back({ir::Add(base, FloatImm(1.0)), t});
    } else {
      Expr t1 = ir::Add(t, FloatImm(1.0)), u = ir::Sub(FloatImm(1.0), t), u1 = ir::Sub(FloatImm(2.0), t);
      auto far = [&](Expr z) {  // ((a z - 5a) z + 8a) z - 4a
        return ir::Sub(ir::Mul(ir::Add(ir::Mul(ir::Sub(ir::Mul(FloatImm(a), z), FloatImm(5 * a)), z), FloatImm(8 * a)), z),
                       FloatImm(4 * a));
      };
      auto near = [&](Expr z) {  // ((a + 2) z - (a + 3)) z z + 1
        return ir::Add(ir::Mul(ir::Mul(ir::Sub(ir::Mul(FloatImm(a + 2), z), FloatImm(a + 3)), z), z), FloatImm(1.0));
      };
      taps[d].push_back({ir::Sub(base, FloatImm(1.0)), far(t1)});
      taps[d].push_back({base, near(t)});
      taps[d].push_back({ir::Add(base, FloatImm(1.0)), near(u)});
      taps[d].push_back({ir::Add(base, FloatImm(2.0)), far(u1)});
    }
  }
  // Sum over every combination of taps.
  struct Term {
    Expr offset, weight, inside;
  };
  std::vector<Term> terms = {{IntImm(0), nullptr, nullptr}};
  for (size_t d = 0; d < dims; ++d) {
    const double L = static_cast<double>(in[d + 2]);
    std::vector<Term> next;
    for (const Term& term : terms) {
      for (const auto& [index, weight] : taps[d]) {
        Expr i = index;
        Expr inside = nullptr;
        if (padding == "zeros") {
          inside = ir::And(ir::LE(FloatImm(0.0), i), ir::LT(i, FloatImm(L)));
        } else if (padding == "reflection" && mode != "nearest") {
          i = reflect(i, lo[d], hi[d]);
        }
        i = ir::Min(ir::Max(i, FloatImm(0.0)), FloatImm(L - 1));  // a safe address; zeros reads 0 outside
        Expr offset = ir::Add(ir::Mul(term.offset, IntImm(in[d + 2])), ir::ToInt(i));
        Expr w = !weight ? term.weight : term.weight ? ir::Mul(term.weight, weight) : weight;
        Expr ok = !inside ? term.inside : term.inside ? ir::And(term.inside, inside) : inside;
        next.push_back({offset, w, ok});
      }
    }
    terms = std::move(next);
  }
  Expr sum;
  for (const Term& term : terms) {
    Expr v = ir::Load(x, ir::DType::kFloat32, ir::Add(ir::Mul(Var(row), IntImm(in_spatial)), term.offset));
    if (term.inside) v = ir::Select(term.inside, v, FloatImm(0.0));
    if (term.weight) v = ir::Mul(term.weight, v);
    sum = sum ? ir::Add(sum, v) : v;
  }
  body.push_back(ir::Store(y, ir::Add(ir::Mul(Var(row), IntImm(out_spatial)), pixel), sum));
  Stmt st = ir::Block(body);
  for (size_t d = 0; d < dims; ++d) st = ir::Allocate(pos[d], ir::DType::kFloat32, 1, st);
  for (size_t d = dims; d-- > 0;) st = ir::For(o[d], IntImm(out[d + 2]), out[d + 2], ForKind::kSerial, st);
  return b.Finish(ir::For(row, IntImm(in[0] * C), in[0] * C, ForKind::kParallel, st));
}

// OneHot: out[..., j, ...] = on where the index (plus depth when negative) is the
// whole number j, else off. A non-integer, NaN or out-of-range index selects no j
// (the ONNX text: all off).
absl::StatusOr<NodeKernel> OneHot(const Graph& g, const Node& n) {
  Builder b(g, n.op);
  const std::vector<int64_t>& out = b.Shape(n.outputs[0]);
  const int64_t axis = n.Int("axis", 0), depth = n.Int("tf_depth", 1);
  const int64_t outer = Product(out, 0, static_cast<size_t>(axis)), inner = Product(out, static_cast<size_t>(axis) + 1);
  const std::string x = b.Param(n.inputs[0]);
  const std::string values = b.Param(n.inputs[2]);
  const std::string y = b.Param(n.outputs[0], true);
  const std::string o = b.names("o"), j = b.names("j"), i = b.names("i");
  Expr v = ir::Load(x, ir::DType::kFloat32, ir::Add(ir::Mul(Var(o), IntImm(inner)), Var(i)));
  v = ir::Select(ir::LT(v, FloatImm(0.0)), ir::Add(v, FloatImm(static_cast<double>(depth))), v);
  v = ir::Select(ir::EQ(v, ir::Call("floor", v)), v, FloatImm(-1.0));  // NaN and non-integers: no match
  Expr index = ir::ToInt(ir::Min(ir::Max(v, FloatImm(-1.0)), FloatImm(static_cast<double>(depth))));
  Expr value = ir::Select(ir::EQ(index, Var(j)), ir::Load(values, ir::DType::kFloat32, IntImm(1)),
                          ir::Load(values, ir::DType::kFloat32, IntImm(0)));
  Stmt store = ir::Store(y, ir::Add(ir::Mul(ir::Add(ir::Mul(Var(o), IntImm(depth)), Var(j)), IntImm(inner)), Var(i)),
                         value);
  Stmt body = ir::For(j, IntImm(depth), depth, ForKind::kSerial, ir::For(i, IntImm(inner), inner, ForKind::kSerial, store));
  return b.Finish(ir::For(o, IntImm(outer), outer, ForKind::kParallel, body));
}

// MeanVarianceNormalization: (x - mean) / (sqrt(E[x^2] - mean^2) + 1e-9) over `axes`
// (the ONNX function's formula), for every combination of the other axes.
absl::StatusOr<NodeKernel> MeanVarianceNormalization(const Graph& g, const Node& n) {
  Builder b(g, n.op);
  const std::vector<int64_t>& shape = b.Shape(n.inputs[0]);
  const std::vector<int64_t> axes = n.Ints("axes");
  const std::vector<int64_t> strides = RowMajorStrides(shape);
  std::vector<size_t> kept, reduced;
  for (size_t d = 0; d < shape.size(); ++d) {
    (std::find(axes.begin(), axes.end(), static_cast<int64_t>(d)) != axes.end() ? reduced : kept).push_back(d);
  }
  // The flat offset of element `flat` of the index space over `dims`.
  auto offset = [&](const std::vector<size_t>& dims, Expr flat) {
    Expr e = IntImm(0);
    int64_t below = 1;
    for (size_t k = dims.size(); k-- > 0;) {
      const int64_t extent = shape[dims[k]];
      e = ir::Add(e, ir::Mul(ir::Mod(ir::Div(flat, IntImm(below)), IntImm(extent)), IntImm(strides[dims[k]])));
      below *= extent;
    }
    return e;
  };
  int64_t rows = 1, count = 1;
  for (size_t d : kept) rows *= shape[d];
  for (size_t d : reduced) count *= shape[d];
  const std::string x = b.Param(n.inputs[0]);
  const std::string y = b.Param(n.outputs[0], true);
  const std::string p = b.names("p"), q = b.names("q"), q2 = b.names("q"), sum = b.names("sum"), sq = b.names("sq");
  Expr at = ir::Add(offset(kept, Var(p)), offset(reduced, Var(q)));
  Expr xv = ir::Load(x, ir::DType::kFloat32, at);
  Stmt accumulate = ir::Block({ir::Store(sum, IntImm(0), ir::Add(Scalar(sum), xv)),
                               ir::Store(sq, IntImm(0), ir::Add(Scalar(sq), ir::Mul(xv, xv)))});
  const double inv = 1.0 / static_cast<double>(count);
  Expr mean = ir::Mul(Scalar(sum), FloatImm(inv));
  Expr std_dev = ir::Call("sqrt", ir::Sub(ir::Mul(Scalar(sq), FloatImm(inv)), ir::Mul(mean, mean)));
  Expr at2 = ir::Add(offset(kept, Var(p)), offset(reduced, Var(q2)));
  Stmt write = ir::Store(y, at2, ir::Div(ir::Sub(ir::Load(x, ir::DType::kFloat32, at2), mean),
                                         ir::Add(std_dev, FloatImm(1e-9))));
  Stmt body = ir::Block({ir::Store(sum, IntImm(0), FloatImm(0.0)), ir::Store(sq, IntImm(0), FloatImm(0.0)),
                         ir::For(q, IntImm(count), count, ForKind::kSerial, accumulate),
                         ir::For(q2, IntImm(count), count, ForKind::kSerial, write)});
  body = ir::Allocate(sum, ir::DType::kFloat32, 1, ir::Allocate(sq, ir::DType::kFloat32, 1, body));
  return b.Finish(ir::For(p, IntImm(rows), rows, ForKind::kParallel, body));
}

// The taps of one axis of a Resize: output element o reads input elements
// idx[o * taps + t] with weights w[o * taps + t]. Computed in double as the ONNX
// reference does: the transformed coordinate x, its n neighbours starting at
// ceil(x) - n / 2 (clamped to the edge), the mode's coefficients (antialiased ones
// widen with the downscale), zeros moved to the end so `taps` is the most any
// output element needs (1 for nearest).
struct ResizeAxis {
  int64_t taps = 1;
  bool identity = true;  // output element o is input element o
  std::vector<float> idx, w;
  // tf_crop_and_resize: 1 where output element o maps outside the input (its value is
  // then extrapolation_value); empty when none does.
  std::vector<float> outside;
};

// `axis`: which axis of the input (for tf_crop_and_resize's region of interest).
ResizeAxis ResizeTaps(const Node& n, size_t axis, int64_t in_len, int64_t out_len, double scale) {
  auto text = [&](const char* key) { return n.attrs.at(key).text; };
  const std::string mode = text("mode"), transform = text("coordinate_transformation_mode"),
                    nearest = text("nearest_mode");
  const bool antialias = n.Int("antialias", 0) != 0, exclude_outside = n.Int("exclude_outside", 0) != 0;
  const double a = n.Float("cubic_coeff_a", -0.75f);
  const double L = static_cast<double>(in_len), out_width = scale * L;
  std::vector<std::vector<std::pair<int64_t, double>>> rows;
  std::vector<float> outside(static_cast<size_t>(out_len), 0.0f);
  bool any_outside = false;
  for (int64_t o = 0; o < out_len; ++o) {
    const double od = static_cast<double>(o);
    double x = 0;
    if (transform == "tf_crop_and_resize") {
      const std::vector<float>& roi = n.attrs.at("tf_roi").floats;
      const double start = roi[axis], end = roi[roi.size() / 2 + axis];
      x = out_width == 1 ? (end - start) * (L - 1) / 2 : od * (end - start) * (L - 1) / (out_width - 1);
      x += start * (L - 1);
      if (x < 0 || x > L - 1) {  // outside: no taps, the value is extrapolation_value
        outside[static_cast<size_t>(o)] = 1.0f;
        any_outside = true;
        rows.emplace_back();
        continue;
      }
    } else if (transform == "align_corners") {
      x = out_width == 1 ? 0.0 : od * (L - 1) / (out_width - 1);
    } else if (transform == "asymmetric") {
      x = od / scale;
    } else if (transform == "pytorch_half_pixel") {
      x = out_len > 1 ? (od + 0.5) / scale - 0.5 : 0.0;
    } else if (transform == "half_pixel_symmetric") {
      const double offset = L / 2 * (1 - static_cast<double>(out_len) / out_width);
      x = offset + (od + 0.5) / scale - 0.5;
    } else {  // half_pixel
      x = (od + 0.5) / scale - 0.5;
    }
    const double xi = std::floor(x);
    const double ratio = x == xi ? 1.0 : x - xi;
    std::vector<double> c;
    const double s = std::min(scale, 1.0);
    if (mode == "nearest") {
      if (ratio == 1.0) {
        c = {0, 1};
      } else if (nearest == "round_prefer_floor") {
        c = {ratio <= 0.5 ? 1.0 : 0.0, ratio > 0.5 ? 1.0 : 0.0};
      } else if (nearest == "round_prefer_ceil") {
        c = {ratio < 0.5 ? 1.0 : 0.0, ratio >= 0.5 ? 1.0 : 0.0};
      } else {
        c = nearest == "floor" ? std::vector<double>{1, 0} : std::vector<double>{0, 1};
      }
    } else if (mode == "linear" && !antialias) {
      c = {1 - ratio, ratio};
    } else if (mode == "linear") {
      const int64_t start = static_cast<int64_t>(std::floor(-1 / s)) + 1;
      for (int64_t i = start; i < 2 - start; ++i) {
        c.push_back(std::clamp(1 - std::fabs((static_cast<double>(i) - ratio) * s), 0.0, 1.0));
      }
    } else if (!antialias) {  // cubic
      const double r = ratio, q = 1 - ratio;
      c = {((a * (r + 1) - 5 * a) * (r + 1) + 8 * a) * (r + 1) - 4 * a, ((a + 2) * r - (a + 3)) * r * r + 1,
           ((a + 2) * q - (a + 3)) * q * q + 1, ((a * (q + 1) - 5 * a) * (q + 1) + 8 * a) * (q + 1) - 4 * a};
    } else {
      auto coeff = [&](double v) {
        v = std::fabs(v);
        if (v <= 1) return (a + 2) * v * v * v - (a + 3) * v * v + 1;
        if (v < 2) return a * v * v * v - 5 * a * v * v + 8 * a * v - 4 * a;
        return 0.0;
      };
      const int64_t start = static_cast<int64_t>(std::floor(-2 / s)) + 1;
      for (int64_t i = start; i < 2 - start; ++i) c.push_back(coeff(s * (static_cast<double>(i) - ratio)));
    }
    if (antialias) {
      double sum = 0;
      for (double v : c) sum += v;
      for (double& v : c) v /= sum;
    }
    const int64_t count = static_cast<int64_t>(c.size());
    const int64_t first = static_cast<int64_t>(ratio == 1.0 ? xi : xi + 1) - count / 2;
    if (exclude_outside) {
      double sum = 0;
      for (int64_t t = 0; t < count; ++t) {
        if (first + t < 0 || first + t >= in_len) c[static_cast<size_t>(t)] = 0;
        sum += c[static_cast<size_t>(t)];
      }
      for (double& v : c) v /= sum;
    }
    std::vector<std::pair<int64_t, double>> row;
    for (int64_t t = 0; t < count; ++t) {
      if (c[static_cast<size_t>(t)] != 0) row.push_back({std::clamp<int64_t>(first + t, 0, in_len - 1), c[static_cast<size_t>(t)]});
    }
    rows.push_back(std::move(row));
  }
  ResizeAxis taps;
  taps.identity = in_len == out_len;
  taps.taps = 1;
  for (int64_t o = 0; o < out_len; ++o) {
    const auto& row = rows[static_cast<size_t>(o)];
    taps.taps = std::max<int64_t>(taps.taps, static_cast<int64_t>(row.size()));
    taps.identity &= row.size() == 1 && row[0].first == o && row[0].second == 1.0;
  }
  for (const auto& row : rows) {
    for (int64_t t = 0; t < taps.taps; ++t) {
      const bool used = t < static_cast<int64_t>(row.size());
      taps.idx.push_back(used ? static_cast<float>(row[static_cast<size_t>(t)].first) : 0.0f);
      taps.w.push_back(used ? static_cast<float>(row[static_cast<size_t>(t)].second) : 0.0f);
    }
  }
  if (any_outside) taps.outside = std::move(outside);
  return taps;
}

// Resize: each output element the weighted sum of its taps' input elements, the
// taps of every axis from tables (constants) computed at build time.
absl::StatusOr<NodeKernel> Resize(const Graph& g, const Node& n, int lanes) {
  Builder b(g, n.op);
  const std::vector<int64_t>& in = b.Shape(n.inputs[0]);
  const std::vector<int64_t>& out = b.Shape(n.outputs[0]);
  const size_t rank = in.size();
  std::vector<double> scale;
  for (absl::string_view part : absl::StrSplit(n.attrs.at("tf_scales").text, ',')) {
    double v = 0;
    if (!absl::SimpleAtod(part, &v)) return Unsupported(n, "a malformed tf_scales attribute");
    scale.push_back(v);
  }
  if (scale.size() != rank) return Unsupported(n, "a malformed tf_scales attribute");
  std::vector<ResizeAxis> axes;
  int64_t terms = 1;
  for (size_t d = 0; d < rank; ++d) {
    axes.push_back(ResizeTaps(n, d, in[d], out[d], scale[d]));
    terms *= axes.back().identity ? 1 : axes.back().taps;
  }
  if (terms > 4096) return Unsupported(n, absl::StrCat("a resize of ", terms, " taps per output element"));
  const std::string x = b.Param(n.inputs[0]);
  const std::string y = b.Param(n.outputs[0], true);
  std::vector<std::string> idx_table(rank), w_table(rank), outside_table(rank);
  for (size_t d = 0; d < rank; ++d) {
    if (!axes[d].outside.empty()) outside_table[d] = b.Constant(axes[d].outside);
    if (axes[d].identity) continue;
    idx_table[d] = b.Constant(axes[d].idx);
    bool all_one = true;
    for (float v : axes[d].w) all_one &= v == 1.0f;
    if (!all_one) w_table[d] = b.Constant(axes[d].w);
  }
  const std::vector<int64_t> in_strides = RowMajorStrides(in);
  // One parallel loop over every output row (all axes but the last), then the row.
  const int64_t rows = Product(out, 0, rank - 1);
  const std::string p = b.names("p");
  std::vector<Expr> o(rank);
  int64_t inner = 1;
  for (size_t d = rank - 1; d-- > 0;) {
    o[d] = ir::Mod(ir::Div(Var(p), IntImm(inner)), IntImm(out[d]));
    inner *= out[d];
  }
  const int64_t last = out[rank - 1];
  Stmt row = RowLoop(
      last, lanes,
      [&](Expr j) {
        std::vector<Expr> at = o;
        at[rank - 1] = j;
        // Sum over every combination of taps, axis by axis.
        std::vector<std::pair<Expr, Expr>> partial = {{IntImm(0), nullptr}};  // (input offset, weight)
        for (size_t d = 0; d < rank; ++d) {
          std::vector<std::pair<Expr, Expr>> next;
          const int64_t taps = axes[d].identity ? 1 : axes[d].taps;
          for (const auto& [offset, weight] : partial) {
            for (int64_t t = 0; t < taps; ++t) {
              Expr slot = ir::Add(ir::Mul(at[d], IntImm(taps)), IntImm(t));
              Expr i = axes[d].identity ? at[d] : ir::ToInt(ir::Load(idx_table[d], ir::DType::kFloat32, slot));
              Expr w = w_table[d].empty() ? nullptr : ir::Load(w_table[d], ir::DType::kFloat32, slot);
              next.push_back({ir::Add(offset, ir::Mul(i, IntImm(in_strides[d]))),
                              !w ? weight : weight ? ir::Mul(weight, w) : w});
            }
          }
          partial = std::move(next);
        }
        Expr sum;
        for (const auto& [offset, weight] : partial) {
          Expr term = ir::Load(x, ir::DType::kFloat32, offset);
          if (weight) term = ir::Mul(weight, term);
          sum = sum ? ir::Add(sum, term) : term;
        }
        // tf_crop_and_resize: extrapolation_value where any axis maps outside the input.
        Expr outside;
        for (size_t d = 0; d < rank; ++d) {
          if (outside_table[d].empty()) continue;
          Expr flag = ir::Load(outside_table[d], ir::DType::kFloat32, at[d]);
          outside = outside ? ir::Add(outside, flag) : flag;
        }
        if (outside) sum = ir::Select(ir::LT(FloatImm(0.5), outside), FloatImm(n.Float("extrapolation_value", 0.0f)), sum);
        Expr flat = ir::Add(ir::Mul(Var(p), IntImm(last)), j);
        return ir::Store(y, flat, sum);
      },
      b.names);
  return b.Finish(ir::For(p, IntImm(rows), rows, ForKind::kParallel, row));
}

// A convolution no template takes (asymmetric padding, dilation, groups): direct,
// padding by bounds checks.
absl::StatusOr<NodeKernel> DirectConv(const Graph& g, const Node& n) {
  Builder b(g, n.op);
  const std::vector<int64_t>& in = b.Shape(n.inputs[0]);
  const std::vector<int64_t>& w = b.Shape(n.inputs[1]);
  const std::vector<int64_t>& out = b.Shape(n.outputs[0]);
  const std::vector<int64_t> st = n.Ints("strides", {1, 1});
  const std::vector<int64_t> dil = n.Ints("dilations", {1, 1});
  const std::vector<int64_t> pads = n.Ints("pads", {0, 0, 0, 0});
  const int64_t group = n.Int("group", 1);
  const std::string x = b.Param(n.inputs[0]);
  const std::string f = b.Param(n.inputs[1]);
  const bool has_bias = n.inputs.size() > 2 && n.inputs[2] >= 0;
  const std::string bias = has_bias ? b.Param(n.inputs[2]) : "";
  const std::string y = b.Param(n.outputs[0], true);
  const int64_t C = in[1], H = in[2], W = in[3], K = out[1], OH = out[2], OW = out[3];
  const int64_t cg = w[1], kg = K / group;
  const std::string row = b.names("nk"), oh = b.names("oh"), ow = b.names("ow"), c = b.names("c"),
                    r = b.names("r"), s = b.names("s"), acc = b.names("acc");
  Expr nn = ir::Div(Var(row), IntImm(K)), kk = ir::Mod(Var(row), IntImm(K));
  Expr ch = ir::Add(ir::Mul(ir::Div(kk, IntImm(kg)), IntImm(cg)), Var(c));
  Expr ih = ir::Add(ir::Sub(ir::Mul(Var(oh), IntImm(st[0])), IntImm(pads[0])), ir::Mul(Var(r), IntImm(dil[0])));
  Expr iw = ir::Add(ir::Sub(ir::Mul(Var(ow), IntImm(st[1])), IntImm(pads[1])), ir::Mul(Var(s), IntImm(dil[1])));
  Expr inside = ir::And(ir::And(ir::LE(IntImm(0), ih), ir::LT(ih, IntImm(H))),
                        ir::And(ir::LE(IntImm(0), iw), ir::LT(iw, IntImm(W))));
  Expr xv = ir::Load(x, ir::DType::kFloat32,
                     ir::Add(ir::Mul(ir::Add(ir::Mul(nn, IntImm(C)), ch), IntImm(H * W)),
                             ir::Add(ir::Mul(ih, IntImm(W)), iw)));
  Expr fv = ir::Load(f, ir::DType::kFloat32,
                     ir::Add(ir::Mul(ir::Add(ir::Mul(kk, IntImm(cg)), Var(c)), IntImm(w[2] * w[3])),
                             ir::Add(ir::Mul(Var(r), IntImm(w[3])), Var(s))));
  Stmt update = ir::IfThenElse(inside, ir::Store(acc, IntImm(0), ir::Add(Scalar(acc), ir::Mul(xv, fv))));
  Stmt reduce = ir::For(c, IntImm(cg), cg, ForKind::kSerial,
                        ir::For(r, IntImm(w[2]), w[2], ForKind::kSerial,
                                ir::For(s, IntImm(w[3]), w[3], ForKind::kSerial, update)));
  Stmt pixel = ir::Block(
      {ir::Store(acc, IntImm(0), has_bias ? ir::Load(bias, ir::DType::kFloat32, kk) : FloatImm(0.0)), reduce,
       ir::Store(y, ir::Add(ir::Mul(Var(row), IntImm(OH * OW)), ir::Add(ir::Mul(Var(oh), IntImm(OW)), Var(ow))),
                 Scalar(acc))});
  Stmt body = ir::Allocate(acc, ir::DType::kFloat32, 1, pixel);
  body = ir::For(oh, IntImm(OH), OH, ForKind::kSerial, ir::For(ow, IntImm(OW), OW, ForKind::kSerial, body));
  return b.Finish(ir::For(row, IntImm(in[0] * K), in[0] * K, ForKind::kParallel, body));
}

// MatMul (broadcast batch dimensions, 1-D operands) and Gemm (transA/transB,
// alpha, beta) that no template takes: one output row at a time, vectorized over
// the row's columns when B's rows are contiguous.
absl::StatusOr<NodeKernel> GenericMatMul(const Graph& g, const Node& n, int lanes) {
  Builder b(g, n.op);
  std::vector<int64_t> a_shape = b.Shape(n.inputs[0]), b_shape = b.Shape(n.inputs[1]);
  const std::vector<int64_t>& out = b.Shape(n.outputs[0]);
  const bool gemm = n.op == "Gemm";
  const bool ta = gemm && n.Int("transA", 0) != 0, tb = gemm && n.Int("transB", 0) != 0;
  const float alpha = gemm ? n.Float("alpha", 1.0f) : 1.0f, beta = gemm ? n.Float("beta", 1.0f) : 1.0f;
  // Treat 1-D operands as matrices, as MatMul does.
  if (a_shape.size() == 1) a_shape.insert(a_shape.begin(), 1);
  if (b_shape.size() == 1) b_shape.push_back(1);
  const size_t ar = a_shape.size(), br = b_shape.size();
  const int64_t M = ta ? a_shape[ar - 1] : a_shape[ar - 2];
  const int64_t K = ta ? a_shape[ar - 2] : a_shape[ar - 1];
  const int64_t N = tb ? b_shape[br - 2] : b_shape[br - 1];
  const std::vector<int64_t> as = RowMajorStrides(a_shape), bs = RowMajorStrides(b_shape);
  // Batch dimensions of the output (everything but the last two of the matrix
  // product), broadcast against A's and B's.
  std::vector<int64_t> batch;
  const int64_t nb = std::max<int64_t>(static_cast<int64_t>(ar), static_cast<int64_t>(br)) - 2;
  std::vector<int64_t> a_bstride(static_cast<size_t>(nb), 0), b_bstride(static_cast<size_t>(nb), 0);
  for (int64_t d = 0; d < nb; ++d) {
    const int64_t ad = d - (nb - static_cast<int64_t>(ar - 2)), bd = d - (nb - static_cast<int64_t>(br - 2));
    int64_t e = 1;
    if (ad >= 0 && a_shape[static_cast<size_t>(ad)] != 1) {
      e = a_shape[static_cast<size_t>(ad)];
      a_bstride[static_cast<size_t>(d)] = as[static_cast<size_t>(ad)];
    }
    if (bd >= 0 && b_shape[static_cast<size_t>(bd)] != 1) {
      e = b_shape[static_cast<size_t>(bd)];
      b_bstride[static_cast<size_t>(d)] = bs[static_cast<size_t>(bd)];
    }
    batch.push_back(e);
  }
  const int64_t a_ri = ta ? 1 : as[ar - 2], a_rk = ta ? as[ar - 2] : 1;
  const int64_t b_rk = tb ? 1 : bs[br - 2], b_rj = tb ? bs[br - 2] : 1;
  const std::string A = b.Param(n.inputs[0]), B = b.Param(n.inputs[1]);
  const bool has_c = gemm && n.inputs.size() > 2 && n.inputs[2] >= 0 && beta != 0.0f;
  View cview;
  if (has_c) cview = Broadcast(b.Param(n.inputs[2]), b.Shape(n.inputs[2]), {M, N});
  const std::string Y = b.Param(n.outputs[0], true);
  (void)out;
  const std::string p = b.names("p"), k = b.names("k"), acc = b.names("acc");
  // Row p of the output: batch index and i.
  std::vector<int64_t> row_dims = batch;
  row_dims.push_back(M);
  const std::vector<Expr> bi = ir::Unflatten(Var(p), row_dims);  // batch indices, then i
  const Expr i = bi.back();
  Expr abase = ir::Mul(i, IntImm(a_ri)), bbase = IntImm(0);
  for (size_t d = batch.size(); d-- > 0;) {
    abase = ir::Add(abase, ir::Mul(bi[d], IntImm(a_bstride[d])));
    bbase = ir::Add(bbase, ir::Mul(bi[d], IntImm(b_bstride[d])));
  }
  const int64_t vec = lanes > 1 && b_rj == 1 && N >= lanes ? lanes : 1;
  // For a block of `width` columns starting at column j0 (vector lane v).
  auto block = [&](Expr j0, int64_t width, ForKind kind) {
    const std::string v = b.names("v"), v2 = b.names("v"), v3 = b.names("v");
    Expr aval = ir::Load(A, ir::DType::kFloat32, ir::Add(abase, ir::Mul(Var(k), IntImm(a_rk))));
    auto bval = [&](const std::string& lane) {
      return ir::Load(B, ir::DType::kFloat32,
                      ir::Add(ir::Add(bbase, ir::Mul(Var(k), IntImm(b_rk))),
                              ir::Mul(ir::Add(j0, Var(lane)), IntImm(b_rj))));
    };
    Stmt init = ir::For(v, IntImm(width), width, kind, ir::Store(acc, Var(v), FloatImm(0.0)));
    Stmt step = ir::For(k, IntImm(K), K, ForKind::kSerial,
                        ir::For(v2, IntImm(width), width, kind,
                                ir::Store(acc, Var(v2), ir::Add(ir::Load(acc, ir::DType::kFloat32, Var(v2)),
                                                                ir::Mul(aval, bval(v2))))));
    Expr jj = ir::Add(j0, Var(v3));
    Expr result = ir::Mul(ir::Load(acc, ir::DType::kFloat32, Var(v3)), FloatImm(alpha));
    if (has_c) result = ir::Add(result, ir::Mul(LoadAt(cview, {i, jj}), FloatImm(beta)));
    Stmt write = ir::For(v3, IntImm(width), width, kind,
                         ir::Store(Y, ir::Add(ir::Mul(Var(p), IntImm(N)), jj), result));
    return ir::Allocate(acc, ir::DType::kFloat32, width, ir::Block({init, step, write}));
  };
  std::vector<Stmt> row;
  const std::string jo = b.names("jo"), jt = b.names("jt");
  // Whole vectors of columns, then the columns left one at a time (all of them when
  // the row is not vectorized).
  const int64_t vectorized = vec > 1 ? N / vec * vec : 0;
  if (vectorized > 0) {
    row.push_back(ir::For(jo, IntImm(N / vec), N / vec, ForKind::kSerial,
                          block(ir::Mul(Var(jo), IntImm(vec)), vec, ForKind::kVectorized)));
  }
  if (N > vectorized) {
    row.push_back(ir::For(jt, IntImm(N - vectorized), N - vectorized, ForKind::kSerial,
                          block(ir::Add(IntImm(vectorized), Var(jt)), 1, ForKind::kSerial)));
  }
  const int64_t rows = Product(batch) * M;
  return b.Finish(ir::For(p, IntImm(rows), rows, ForKind::kParallel, ir::Block(row)));
}

// BatchNormalization that no convolution absorbed: y = x * scale' + shift' per channel.
absl::StatusOr<NodeKernel> BatchNorm(const Graph& g, const Node& n, int lanes) {
  Builder b(g, n.op);
  const std::vector<int64_t>& shape = b.Shape(n.inputs[0]);
  const int64_t C = shape[1];
  const float eps = n.Float("epsilon", 1e-5f);
  std::vector<int64_t> per_channel(shape.size(), 1);
  per_channel[1] = C;
  bool constant = true;
  for (size_t i = 1; i < 5; ++i) constant &= T(g, n.inputs[i]).constant;
  if (!constant) {  // parameters computed at run time: (x - mean) / sqrt(var + eps) * scale + bias
    std::vector<View> in = {Contiguous(b.Param(n.inputs[0]), shape)};
    for (size_t i = 1; i < 5; ++i) in.push_back(Broadcast(b.Param(n.inputs[i]), per_channel, shape));
    View out = Contiguous(b.Param(n.outputs[0], true), shape);
    return b.Finish(ElementwiseNest(
        shape, out, in,
        [&](auto& v) {
          return ir::Add(ir::Mul(ir::Div(ir::Sub(v[0], v[3]), ir::Call("sqrt", ir::Add(v[4], FloatImm(eps)))), v[1]),
                         v[2]);
        },
        lanes, b.names));
  }
  std::vector<float> scale(static_cast<size_t>(C)), shift(static_cast<size_t>(C));
  const auto& gamma = T(g, n.inputs[1]).f32;
  const auto& beta = T(g, n.inputs[2]).f32;
  const auto& mean = T(g, n.inputs[3]).f32;
  const auto& var = T(g, n.inputs[4]).f32;
  for (size_t c = 0; c < static_cast<size_t>(C); ++c) {
    scale[c] = gamma[c] / std::sqrt(var[c] + eps);
    shift[c] = beta[c] - mean[c] * scale[c];
  }
  const std::string x = b.Param(n.inputs[0]);
  View sv = Broadcast(b.Constant(scale), per_channel, shape);
  View hv = Broadcast(b.Constant(shift), per_channel, shape);
  View out = Contiguous(b.Param(n.outputs[0], true), shape);
  return b.Finish(ElementwiseNest(shape, out, {Contiguous(x, shape), sv, hv},
                                  [](auto& v) { return ir::Add(ir::Mul(v[0], v[1]), v[2]); }, lanes,
                                  b.names));
}

}  // namespace

bool IsAliasOp(const std::string& op) {
  return op == "Reshape" || op == "Flatten" || op == "Squeeze" || op == "Unsqueeze" || op == "Identity" ||
         op == "Dropout" ||                    // inference: the output is the input (import checks the mode)
         op == "Cast" || op == "CastLike";  // at run time only to the same type (import checks)
}

bool IsElementwiseOp(const std::string& op) {
  return op == "Add" || op == "Sub" || op == "Mul" || op == "Div" || op == "Mod" || op == "Pow" || op == "Clip" ||
         op == "PRelu" || op == "Sum" || op == "Max" || op == "Min" || op == "Mean" || op == "Where" ||
         IsComparisonOrLogicOp(op) || IsUnaryElementwiseOp(op);
}

std::vector<int> ChainInputs(const Graph& g, const std::vector<int>& nodes) {
  std::set<int> inside;
  for (int i : nodes) inside.insert(g.nodes[static_cast<size_t>(i)].outputs[0]);
  std::vector<int> external;
  for (int i : nodes) {
    for (int t : ElementwiseInputs(g, g.nodes[static_cast<size_t>(i)])) {
      if (!inside.count(t) && std::find(external.begin(), external.end(), t) == external.end()) {
        external.push_back(t);
      }
    }
  }
  return external;
}

absl::StatusOr<Expr> ChainValue(const Graph& g, const std::vector<int>& nodes,
                                const std::function<Expr(int tensor)>& value) {
  std::map<int, Expr> known;
  for (int t : ChainInputs(g, nodes)) known[t] = value(t);
  for (int i : nodes) {
    const Node& n = g.nodes[static_cast<size_t>(i)];
    std::vector<Expr> operands;
    for (int t : ElementwiseInputs(g, n)) operands.push_back(known.at(t));
    ASSIGN_OR_RETURN(Expr e, ElementwiseExpr(g, n, operands));
    known[n.outputs[0]] = e;
  }
  return known.at(g.nodes[static_cast<size_t>(nodes.back())].outputs[0]);
}

absl::StatusOr<NodeKernel> GenerateElementwiseKernel(const Graph& g, const std::vector<int>& nodes, int lanes) {
  std::string name;
  for (int i : nodes) name += (name.empty() ? "" : "_") + g.nodes[static_cast<size_t>(i)].op;
  Builder b(g, nodes.size() > 3 ? "fused" : name);
  const int result = g.nodes[static_cast<size_t>(nodes.back())].outputs[0];
  const std::vector<int64_t>& out_shape = b.Shape(result);
  // The tensors the chain reads from outside: its parameters.
  const std::vector<int> external = ChainInputs(g, nodes);
  std::vector<View> ins;
  for (int t : external) ins.push_back(Broadcast(b.Param(t), b.Shape(t), out_shape));
  View out = Contiguous(b.Param(result, true), out_shape);
  absl::Status error;
  auto f = [&](const std::vector<Expr>& loaded) -> Expr {
    absl::StatusOr<Expr> e = ChainValue(g, nodes, [&](int t) {
      return loaded[static_cast<size_t>(std::find(external.begin(), external.end(), t) - external.begin())];
    });
    if (!e.ok()) {
      error = e.status();
      return FloatImm(0.0);
    }
    return *e;
  };
  Stmt body = ElementwiseNest(out_shape, out, ins, f, lanes, b.names);
  RETURN_IF_ERROR(error);
  return b.Finish(body);
}

absl::StatusOr<NodeKernel> GenerateNodeKernel(const Graph& g, int node, int lanes) {
  const Node& n = g.nodes[static_cast<size_t>(node)];
  const std::string& op = n.op;
  if (IsElementwiseOp(op)) return GenerateElementwiseKernel(g, {node}, lanes);
  if (op == "Transpose" || op == "Slice" || op == "Concat" || op == "Split" || op == "Gather" ||
      op == "DepthToSpace" || op == "SpaceToDepth" || op == "Pad" || op == "Expand" || op == "Tile") {
    return DataMovement(g, n, lanes);
  }
  if (op == "Trilu") return Trilu(g, n, lanes);
  if (op == "CumSum") return CumSum(g, n);
  if (op == "ArgMax" || op == "ArgMin") return ArgExtreme(g, n);
  if (op == "GatherElements") return GatherElements(g, n, lanes);
  if (op == "TopK") return TopK(g, n);
  if (op == "DFT") return Dft(g, n);
  if (op == "Det") return Det(g, n);
  if (op == "DeformConv") return DeformConv(g, n);
  if (op == "ScatterND") return ScatterND(g, n, lanes);
  if (op == "LpNormalization") return LpNormalization(g, n, lanes);
  if (op == "Softmax" || op == "LogSoftmax" || op == "Hardmax") return Softmax(g, n, lanes, g.opset);
  if (op == "LayerNormalization" || op == "InstanceNormalization" || op == "GroupNormalization") {
    return LayerNorm(g, n, lanes);
  }
  if (op == "LRN") return Lrn(g, n, lanes);
  if (IsReduceOp(op)) {
    std::vector<int64_t> axes = n.Ints("axes");
    if (n.inputs.size() > 1 && n.inputs[1] >= 0) axes = T(g, n.inputs[1]).i64;
    if (axes.empty()) {
      if (n.Int("noop_with_empty_axes", 0) != 0) return Unsupported(n, "noop_with_empty_axes");
      for (size_t i = 0; i < T(g, n.inputs[0]).shape.size(); ++i) axes.push_back(static_cast<int64_t>(i));
    }
    return Reduce(g, n, lanes, op, axes);
  }
  if (op == "GlobalAveragePool" || op == "GlobalMaxPool") {  // over every spatial axis
    std::vector<int64_t> spatial;
    for (size_t d = 2; d < T(g, n.inputs[0]).shape.size(); ++d) spatial.push_back(static_cast<int64_t>(d));
    return Reduce(g, n, lanes, op == "GlobalMaxPool" ? "ReduceMax" : "ReduceMean", spatial);
  }
  if (op == "MaxPool" || op == "AveragePool" || op == "LpPool") return Pool(g, n, lanes);
  if (op == "Conv") return DirectConv(g, n);
  if (op == "ConvTranspose") return ConvTranspose(g, n);
  if (op == "GridSample") return GridSample(g, n);
  if (op == "OneHot") return OneHot(g, n);
  if (op == "MeanVarianceNormalization") return MeanVarianceNormalization(g, n);
  if (op == "Resize" || op == "Upsample") return Resize(g, n, lanes);
  if (op == "MatMul" || op == "Gemm") return GenericMatMul(g, n, lanes);
  if (op == "BatchNormalization") return BatchNorm(g, n, lanes);
  return Unsupported(n, "this operator");
}

Expr EpilogueExpr(const Graph& g, const TaskUse& use, Expr value, const std::vector<Expr>& addends) {
  for (const Expr& a : addends) value = ir::Add(value, a);
  if (use.activation == "relu") value = ir::Max(value, FloatImm(0.0));
  if (use.activation == "clip") {
    auto [lo, hi] = ClipBounds(g, g.nodes[static_cast<size_t>(use.clip_node)]);
    value = ClipExpr(value, lo, hi);
  }
  return value;
}

}  // namespace tuneforge::graph

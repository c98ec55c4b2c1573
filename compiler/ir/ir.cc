// Loop-IR expression and statement constructors, with constant folding.
#include "compiler/ir/ir.h"

#include <algorithm>
#include <cmath>

#include "compiler/support/status.h"

namespace tuneforge::ir {
namespace {

Expr MakeBinary(ExprKind kind, DType dtype, Expr a, Expr b) {
  TF_CHECK(a && b, "null operand");
  auto node = std::make_shared<ExprNode>();
  node->kind = kind;
  node->dtype = dtype;
  node->operands = Operands(std::move(a), std::move(b));
  return node;
}

bool IsFloatConst(const Expr& e, double v) {
  return e->kind == ExprKind::kFloatImm && e->float_value == v;
}

// Arithmetic and comparisons take two operands of one type; u8 and s8 values are
// converted first (Cast), so no 8-bit arithmetic ever wraps unnoticed.
void CheckOperands(const char* op, const Expr& a, const Expr& b) {
  TF_CHECK(a && b, "null operand of ", op);
  const bool quantized = IsQuantizedInt(a->dtype) || IsQuantizedInt(b->dtype);
  if (!quantized) return;
  TF_CHECK(a->dtype == b->dtype, op, " of ", DTypeName(a->dtype), " and ", DTypeName(b->dtype),
           ": cast one of them first");
  TF_CHECK(a->dtype == DType::kInt32, op, " of ", DTypeName(a->dtype),
           " values: cast them to s32 or float32 first");
}

}  // namespace

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kInt64: return "int64";
    case DType::kFloat32: return "float32";
    case DType::kBool: return "bool";
    case DType::kUInt8: return "u8";
    case DType::kInt8: return "s8";
    case DType::kInt32: return "s32";
  }
  return "?";
}

int DTypeBytes(DType dtype) {
  switch (dtype) {
    case DType::kInt64: return 8;
    case DType::kFloat32: case DType::kInt32: return 4;
    case DType::kBool: case DType::kUInt8: case DType::kInt8: return 1;
  }
  return 1;
}

bool IsQuantizedInt(DType dtype) {
  return dtype == DType::kUInt8 || dtype == DType::kInt8 || dtype == DType::kInt32;
}

void Operands::push_back(Expr e) {
  TF_CHECK(size_ < 3, "an expression has at most three operands");
  items_[size_++] = std::move(e);
}

bool IsConst(const Expr& e, int64_t* value) {
  if (!e || e->kind != ExprKind::kIntImm) return false;
  if (value) *value = e->int_value;
  return true;
}

Expr IntImm(int64_t v) {
  auto make = [](int64_t value) {
    auto node = std::make_shared<ExprNode>();
    node->kind = ExprKind::kIntImm;
    node->dtype = DType::kInt64;
    node->int_value = value;
    return node;
  };
  // Small constants (offsets, strides, extents) are shared within a thread rather than
  // allocated anew: lowering a candidate the cost model scores builds thousands. Built
  // on first use, so a thread holds only the constants it used (at most 4,160 nodes,
  // freed when it exits).
  constexpr int64_t kSmallMin = -64, kSmallEnd = 4096;
  if (v < kSmallMin || v >= kSmallEnd) return make(v);
  thread_local std::vector<Expr> small(kSmallEnd - kSmallMin);
  Expr& shared = small[v - kSmallMin];
  if (!shared) shared = make(v);
  return shared;
}

Expr FloatImm(double v) {
  auto node = std::make_shared<ExprNode>();
  node->kind = ExprKind::kFloatImm;
  node->dtype = DType::kFloat32;
  node->float_value = v;
  return node;
}

Expr Var(const std::string& name) {
  auto node = std::make_shared<ExprNode>();
  node->kind = ExprKind::kVar;
  node->dtype = DType::kInt64;
  node->name = name;
  return node;
}

Expr Add(Expr a, Expr b) {
  CheckOperands("add", a, b);
  int64_t x, y;
  if (IsConst(a, &x) && IsConst(b, &y)) return IntImm(x + y);
  if (IsConst(a, &x) && x == 0) return b;
  if (IsConst(b, &y) && y == 0) return a;
  if (a->dtype == DType::kFloat32 && IsFloatConst(b, 0.0)) return a;
  // Keep constants on the right and fold (x + c1) + c2.
  if (IsConst(a)) std::swap(a, b);
  if (IsConst(b, &y) && a->kind == ExprKind::kAdd && IsConst(a->operands[1], &x))
    return Add(a->operands[0], IntImm(x + y));
  return MakeBinary(ExprKind::kAdd, a->dtype, a, b);
}

Expr Sub(Expr a, Expr b) {
  CheckOperands("subtract", a, b);
  int64_t x, y;
  if (IsConst(a, &x) && IsConst(b, &y)) return IntImm(x - y);
  if (IsConst(b, &y) && y == 0) return a;
  if (a == b && a->dtype == DType::kInt64) return IntImm(0);
  return MakeBinary(ExprKind::kSub, a->dtype, a, b);
}

Expr Mul(Expr a, Expr b) {
  CheckOperands("multiply", a, b);
  int64_t x, y;
  if (IsConst(a, &x) && IsConst(b, &y)) return IntImm(x * y);
  if (IsConst(a)) std::swap(a, b);
  if (IsConst(b, &y)) {
    if (y == 0) return IntImm(0);
    if (y == 1) return a;
  }
  if (a->dtype == DType::kFloat32 && IsFloatConst(b, 1.0)) return a;
  return MakeBinary(ExprKind::kMul, a->dtype, a, b);
}

Expr Div(Expr a, Expr b) {
  TF_CHECK(a && b && !IsQuantizedInt(a->dtype) && !IsQuantizedInt(b->dtype),
           "divide of quantized values: cast them to float32 first");
  int64_t x, y;
  TF_CHECK(!(IsConst(b, &y) && y == 0), "division by zero");
  if (IsConst(a, &x) && IsConst(b, &y)) return IntImm(x / y);
  if (IsConst(b, &y) && y == 1) return a;
  return MakeBinary(ExprKind::kDiv, a->dtype, a, b);
}

Expr Mod(Expr a, Expr b) {
  TF_CHECK(a && b && !IsQuantizedInt(a->dtype) && !IsQuantizedInt(b->dtype),
           "modulo of quantized values: cast them to float32 first");
  int64_t x, y;
  TF_CHECK(!(IsConst(b, &y) && y == 0), "modulo by zero");
  if (IsConst(a, &x) && IsConst(b, &y)) return IntImm(x % y);
  if (IsConst(b, &y) && y == 1) return IntImm(0);
  return MakeBinary(ExprKind::kMod, a->dtype, a, b);
}

Expr Min(Expr a, Expr b) {
  CheckOperands("min", a, b);
  int64_t x, y;
  if (IsConst(a, &x) && IsConst(b, &y)) return IntImm(std::min(x, y));
  if (a == b) return a;
  return MakeBinary(ExprKind::kMin, a->dtype, a, b);
}

Expr Max(Expr a, Expr b) {
  CheckOperands("max", a, b);
  int64_t x, y;
  if (IsConst(a, &x) && IsConst(b, &y)) return IntImm(std::max(x, y));
  if (a == b) return a;
  return MakeBinary(ExprKind::kMax, a->dtype, a, b);
}

Expr LT(Expr a, Expr b) {
  CheckOperands("compare", a, b);
  return MakeBinary(ExprKind::kLT, DType::kBool, a, b);
}
Expr LE(Expr a, Expr b) {
  CheckOperands("compare", a, b);
  return MakeBinary(ExprKind::kLE, DType::kBool, a, b);
}
Expr EQ(Expr a, Expr b) {
  CheckOperands("compare", a, b);
  return MakeBinary(ExprKind::kEQ, DType::kBool, a, b);
}
Expr And(Expr a, Expr b) { return MakeBinary(ExprKind::kAnd, DType::kBool, a, b); }

Expr ToInt(Expr x) {
  TF_CHECK(x->dtype == DType::kFloat32, "ToInt of a non-float");
  auto node = std::make_shared<ExprNode>();
  node->kind = ExprKind::kToInt;
  node->dtype = DType::kInt64;
  node->operands = Operands(std::move(x));
  return node;
}

Expr Select(Expr condition, Expr a, Expr b) {
  TF_CHECK(condition->dtype == DType::kBool, "select on a non-bool condition");
  TF_CHECK(a->dtype == b->dtype, "select between values of two types");
  if (a == b) return a;
  auto node = std::make_shared<ExprNode>();
  node->kind = ExprKind::kSelect;
  node->dtype = a->dtype;
  node->operands = Operands{std::move(condition), std::move(a), std::move(b)};
  return node;
}

Expr Load(const std::string& buffer, DType dtype, Expr index) {
  auto node = std::make_shared<ExprNode>();
  node->kind = ExprKind::kLoad;
  node->dtype = dtype;
  node->name = buffer;
  node->operands = Operands(std::move(index));
  return node;
}

Expr Cast(DType to, Expr x) {
  TF_CHECK(x, "cast of a null expression");
  TF_CHECK(to != DType::kBool && x->dtype != DType::kBool, "no cast from or to bool");
  if (x->dtype == to) return x;
  auto node = std::make_shared<ExprNode>();
  node->kind = ExprKind::kCast;
  node->dtype = to;
  node->operands = Operands(std::move(x));
  return node;
}

Expr Dot4(Expr acc, Expr a, Expr b) {
  TF_CHECK(acc && a && b, "dot4 with a null operand");
  TF_CHECK(acc->dtype == DType::kInt32, "dot4 accumulates into s32, not ", DTypeName(acc->dtype));
  for (const Expr* e : {&a, &b}) {
    TF_CHECK((*e)->kind == ExprKind::kLoad &&
                 ((*e)->dtype == DType::kUInt8 || (*e)->dtype == DType::kInt8),
             "dot4 multiplies loads of u8 or s8 buffers, not ", ToString(*e));
  }
  auto node = std::make_shared<ExprNode>();
  node->kind = ExprKind::kDot4;
  node->dtype = DType::kInt32;
  node->operands = Operands{std::move(acc), std::move(a), std::move(b)};
  return node;
}

const std::vector<std::string>& MathFunctions() {
  static const std::vector<std::string> names = {
      "exp",  "log",  "sqrt", "erf",  "tanh",  "abs",  "floor", "ceil", "round", "sin",
      "cos",  "tan",  "asin", "acos", "atan",  "sinh", "cosh",  "step"};
  return names;
}

float EvalMathFunction(const std::string& function, float x) {
  if (function == "exp") return std::exp(x);
  if (function == "log") return std::log(x);
  if (function == "sqrt") return std::sqrt(x);
  if (function == "erf") return std::erf(x);
  if (function == "tanh") return std::tanh(x);
  if (function == "abs") return std::fabs(x);
  if (function == "floor") return std::floor(x);
  if (function == "ceil") return std::ceil(x);
  if (function == "round") return std::nearbyint(x);  // halves to even (default rounding mode)
  if (function == "sin") return std::sin(x);
  if (function == "cos") return std::cos(x);
  if (function == "tan") return std::tan(x);
  if (function == "asin") return std::asin(x);
  if (function == "acos") return std::acos(x);
  if (function == "atan") return std::atan(x);
  if (function == "sinh") return std::sinh(x);
  if (function == "cosh") return std::cosh(x);
  if (function == "step") return x > 0.0f ? 1.0f : 0.0f;
  TF_CHECK(false, "unknown math function ", function);
  return 0.0f;
}

Expr Call(const std::string& function, Expr arg) {
  const std::vector<std::string>& known = MathFunctions();
  TF_CHECK(std::find(known.begin(), known.end(), function) != known.end(),
           "unknown math function ", function);
  TF_CHECK(arg->dtype == DType::kFloat32, "math function of a non-float argument");
  auto node = std::make_shared<ExprNode>();
  node->kind = ExprKind::kCall;
  node->dtype = DType::kFloat32;
  node->name = function;
  node->operands = Operands(std::move(arg));
  return node;
}

const char* ForKindName(ForKind kind) {
  switch (kind) {
    case ForKind::kSerial: return "serial";
    case ForKind::kParallel: return "parallel";
    case ForKind::kVectorized: return "vectorized";
    case ForKind::kUnrolled: return "unrolled";
  }
  return "?";
}

Stmt For(const std::string& var, Expr extent, int64_t max_extent, ForKind kind, Stmt body) {
  TF_CHECK(extent && body, "For needs an extent and a body");
  int64_t c;
  if (IsConst(extent, &c)) TF_CHECK(c == max_extent, "constant extent ", c, " != max ", max_extent);
  auto node = std::make_shared<StmtNode>();
  node->kind = StmtKind::kFor;
  node->var = var;
  node->extent = std::move(extent);
  node->max_extent = max_extent;
  node->for_kind = kind;
  node->body = std::move(body);
  return node;
}

Stmt Store(const std::string& buffer, Expr index, Expr value) {
  auto node = std::make_shared<StmtNode>();
  node->kind = StmtKind::kStore;
  node->buffer = buffer;
  node->index = std::move(index);
  node->value = std::move(value);
  return node;
}

Stmt Prefetch(const std::string& buffer, Expr index) {
  auto node = std::make_shared<StmtNode>();
  node->kind = StmtKind::kPrefetch;
  node->buffer = buffer;
  node->index = std::move(index);
  return node;
}

Stmt MatrixDot(const std::string& acc, Expr acc_index, MatrixDotOperands operands) {
  const MatrixDotOperands& m = operands;
  TF_CHECK(m.rows >= 1 && m.rows <= 32, "MatrixDot: rows ", m.rows, " outside 1..32");
  TF_CHECK(m.cols == 16 || m.cols == 32, "MatrixDot: cols ", m.cols, " is not 16 or 32");
  TF_CHECK(m.groups > 0 && (m.groups < 16 || m.groups % 16 == 0), "MatrixDot: groups ", m.groups,
           " is neither 1..15 nor a multiple of 16");
  TF_CHECK(m.a_stride > 0, "MatrixDot: a_stride ", m.a_stride, " is not positive");
  TF_CHECK(m.segments >= 1, "MatrixDot: segments ", m.segments, " is not positive");
  TF_CHECK(m.cols == 16 || m.b_panel_stride >= 64 * m.groups * m.segments, "MatrixDot: b_panel_stride ",
           m.b_panel_stride,
           " is shorter than a panel");
  TF_CHECK(m.a_index && m.b_index && acc_index, "MatrixDot: missing index");
  auto node = std::make_shared<StmtNode>();
  node->kind = StmtKind::kMatrixDot;
  node->buffer = acc;
  node->index = std::move(acc_index);
  node->matrix = std::make_shared<const MatrixDotOperands>(std::move(operands));
  return node;
}

Stmt TileConfig(int64_t rows, int64_t cols, int64_t step_groups) {
  TF_CHECK(rows >= 1 && rows <= 32, "TileConfig: rows ", rows, " outside 1..32");
  TF_CHECK(cols == 16 || cols == 32, "TileConfig: cols ", cols, " is not 16 or 32");
  TF_CHECK(step_groups >= 1 && step_groups <= 16, "TileConfig: step_groups ", step_groups, " outside 1..16");
  MatrixDotOperands shape;
  shape.rows = rows;
  shape.cols = cols;
  shape.groups = step_groups;
  auto node = std::make_shared<StmtNode>();
  node->kind = StmtKind::kTileConfig;
  node->matrix = std::make_shared<const MatrixDotOperands>(std::move(shape));
  return node;
}

Stmt Block(std::vector<Stmt> stmts) {
  if (stmts.size() == 1) return stmts[0];
  auto node = std::make_shared<StmtNode>();
  node->kind = StmtKind::kBlock;
  node->stmts = std::move(stmts);
  return node;
}

Stmt IfThenElse(Expr condition, Stmt then_case, Stmt else_case) {
  auto node = std::make_shared<StmtNode>();
  node->kind = StmtKind::kIfThenElse;
  node->condition = std::move(condition);
  node->body = std::move(then_case);
  node->else_case = std::move(else_case);
  return node;
}

Stmt Allocate(const std::string& buffer, DType dtype, int64_t size, Stmt body,
              MemoryScope scope) {
  TF_CHECK(size > 0, "allocation of ", size, " elements");
  auto node = std::make_shared<StmtNode>();
  node->kind = StmtKind::kAllocate;
  node->buffer = buffer;
  node->alloc_dtype = dtype;
  node->alloc_size = size;
  node->alloc_scope = scope;
  node->body = std::move(body);
  return node;
}

int64_t BufferParam::NumElements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace tuneforge::ir

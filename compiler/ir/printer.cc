// Text form of the loop IR, e.g.
//   parallel for (i.o, 0, 16) {
//     for (k, 0, 512) {
//       C[i*512 + j] = C[i*512 + j] + A[...] * B[...]
#include <sstream>
#include <string_view>

#include "compiler/ir/ir.h"

namespace tuneforge::ir {
namespace {

const char* BinarySymbol(ExprKind kind) {
  switch (kind) {
    case ExprKind::kAdd: return " + ";
    case ExprKind::kSub: return " - ";
    case ExprKind::kMul: return "*";
    case ExprKind::kDiv: return "/";
    case ExprKind::kMod: return " % ";
    case ExprKind::kLT: return " < ";
    case ExprKind::kLE: return " <= ";
    case ExprKind::kEQ: return " == ";
    case ExprKind::kAnd: return " && ";
    default: return nullptr;
  }
}

// Binding strength, to print parentheses only where needed.
int Precedence(ExprKind kind) {
  switch (kind) {
    case ExprKind::kAnd: return 1;
    case ExprKind::kLT: case ExprKind::kLE: case ExprKind::kEQ: return 2;
    case ExprKind::kAdd: case ExprKind::kSub: return 3;
    case ExprKind::kMul: case ExprKind::kDiv: case ExprKind::kMod: return 4;
    default: return 5;
  }
}

void Print(std::ostream& os, const Expr& e, int outer_precedence);

// `name(operand, ...)`: calls, conversions, select, min and max.
void PrintApplication(std::ostream& os, std::string_view name, const Expr& e) {
  os << name << "(";
  for (size_t i = 0; i < e->operands.size(); ++i) {
    if (i) os << ", ";
    Print(os, e->operands[i], 0);
  }
  os << ")";
}

void Print(std::ostream& os, const Expr& e, int outer_precedence) {
  switch (e->kind) {
    case ExprKind::kIntImm: os << e->int_value; return;
    case ExprKind::kFloatImm: os << e->float_value << "f"; return;
    case ExprKind::kVar: os << e->name; return;
    case ExprKind::kLoad:
      os << e->name << "[";
      Print(os, e->operands[0], 0);
      os << "]";
      return;
    case ExprKind::kCall: PrintApplication(os, e->name, e); return;
    case ExprKind::kCast: PrintApplication(os, DTypeName(e->dtype), e); return;
    case ExprKind::kDot4: PrintApplication(os, "dot4", e); return;
    case ExprKind::kToInt: PrintApplication(os, "int", e); return;
    case ExprKind::kSelect: PrintApplication(os, "select", e); return;
    case ExprKind::kMin: PrintApplication(os, "min", e); return;
    case ExprKind::kMax: PrintApplication(os, "max", e); return;
    default: break;
  }
  int p = Precedence(e->kind);
  bool parens = p < outer_precedence;
  if (parens) os << "(";
  Print(os, e->operands[0], p);
  os << BinarySymbol(e->kind);
  // Right operand of - and / binds tighter: a - (b + c).
  Print(os, e->operands[1], p + 1);
  if (parens) os << ")";
}

void PrintStmt(std::ostream& os, const Stmt& s, int indent) {
  std::string pad(indent * 2, ' ');
  switch (s->kind) {
    case StmtKind::kFor:
      os << pad << (s->for_kind == ForKind::kSerial ? "" : std::string(ForKindName(s->for_kind)) + " ")
         << "for (" << s->var << ", 0, " << ToString(s->extent) << ")";
      if (!IsConst(s->extent)) os << "  // <= " << s->max_extent;
      os << " {\n";
      PrintStmt(os, s->body, indent + 1);
      os << pad << "}\n";
      return;
    case StmtKind::kStore:
      os << pad << s->buffer << "[" << ToString(s->index) << "] = " << ToString(s->value) << "\n";
      return;
    case StmtKind::kPrefetch:
      os << pad << "prefetch " << s->buffer << "[" << ToString(s->index) << "]\n";
      return;
    case StmtKind::kMatrixDot: {
      const MatrixDotOperands& m = *s->matrix;
      os << pad << "matrix_dot " << m.rows << "x" << m.cols << "x" << 4 * m.groups << " " << s->buffer << "["
         << ToString(s->index) << "] " << (m.accumulate ? "+=" : "=") << " " << m.a << "[" << ToString(m.a_index)
         << ", row stride " << m.a_stride;
      if (m.segments > 1) os << ", " << m.segments << " segments " << m.a_segment_stride << " apart";
      os << "] x " << m.b << "[" << ToString(m.b_index) << ", panel stride "
         << m.b_panel_stride << "]" << (m.configured ? " (configured)" : "") << "\n";
      return;
    }
    case StmtKind::kTileConfig:
      os << pad << "tile_config " << s->matrix->rows << "x" << s->matrix->cols << "x" << 4 * s->matrix->groups << "\n";
      return;
    case StmtKind::kBlock:
      for (const Stmt& c : s->stmts) PrintStmt(os, c, indent);
      return;
    case StmtKind::kIfThenElse:
      os << pad << "if (" << ToString(s->condition) << ") {\n";
      PrintStmt(os, s->body, indent + 1);
      if (s->else_case) {
        os << pad << "} else {\n";
        PrintStmt(os, s->else_case, indent + 1);
      }
      os << pad << "}\n";
      return;
    case StmtKind::kAllocate:
      os << pad << (s->alloc_scope == MemoryScope::kHeap ? "allocate heap " : "allocate ")
         << s->buffer << "[" << DTypeName(s->alloc_dtype) << " * " << s->alloc_size << "]\n";
      PrintStmt(os, s->body, indent);
      return;
  }
}

}  // namespace

std::string ToString(const Expr& e) {
  std::ostringstream os;
  Print(os, e, 0);
  return os.str();
}

std::string ToString(const Stmt& s, int indent) {
  std::ostringstream os;
  PrintStmt(os, s, indent);
  return os.str();
}

std::string ToString(const LoweredFunc& f) {
  std::ostringstream os;
  os << "func " << f.name << "(";
  for (size_t i = 0; i < f.params.size(); ++i) {
    const BufferParam& p = f.params[i];
    os << (i ? ", " : "") << p.name << ": " << DTypeName(p.dtype) << "[";
    for (size_t d = 0; d < p.shape.size(); ++d) os << (d ? ", " : "") << p.shape[d];
    os << "]" << (p.is_output ? " (output)" : "") << (p.is_internal ? " (internal)" : "");
  }
  os << ") {\n";
  if (f.prepack) os << "  prepack (once, untimed):\n" << ToString(f.prepack, 2) << "  kernel:\n";
  os << ToString(f.body, 1);
  if (f.unpack) os << "  unpack (untimed, before each check):\n" << ToString(f.unpack, 2);
  os << "}\n";
  return os.str();
}

}  // namespace tuneforge::ir

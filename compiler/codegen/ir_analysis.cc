// Loop-IR analyses for codegen: dependences, linear strides, used names, vectorizability.
#include "compiler/codegen/ir_analysis.h"

namespace tuneforge::codegen {
namespace {

void CollectExpr(const ir::Expr& e, UsedNames* names) {
  if (!e) return;
  if (e->kind == ir::ExprKind::kVar) names->vars.insert(e->name);
  if (e->kind == ir::ExprKind::kLoad) names->buffers.insert(e->name);
  for (const ir::Expr& op : e->operands) CollectExpr(op, names);
}

void CollectStmt(const ir::Stmt& s, UsedNames* names) {
  if (!s) return;
  switch (s->kind) {
    case ir::StmtKind::kFor:
      CollectExpr(s->extent, names);
      CollectStmt(s->body, names);
      break;
    case ir::StmtKind::kStore:
      names->buffers.insert(s->buffer);
      CollectExpr(s->index, names);
      CollectExpr(s->value, names);
      break;
    case ir::StmtKind::kPrefetch:
      names->buffers.insert(s->buffer);
      CollectExpr(s->index, names);
      break;
    case ir::StmtKind::kTileConfig:
      break;
    case ir::StmtKind::kMatrixDot:
      names->buffers.insert({s->buffer, s->matrix->a, s->matrix->b});
      CollectExpr(s->index, names);
      CollectExpr(s->matrix->a_index, names);
      CollectExpr(s->matrix->b_index, names);
      break;
    case ir::StmtKind::kBlock:
      for (const ir::Stmt& child : s->stmts) CollectStmt(child, names);
      break;
    case ir::StmtKind::kIfThenElse:
      CollectExpr(s->condition, names);
      CollectStmt(s->body, names);
      CollectStmt(s->else_case, names);
      break;
    case ir::StmtKind::kAllocate:
      CollectStmt(s->body, names);
      break;
  }
}

}  // namespace

bool DependsOn(const ir::Expr& e, const std::string& var) {
  if (!e) return false;
  if (e->kind == ir::ExprKind::kVar) return e->name == var;
  for (const ir::Expr& op : e->operands) {
    if (DependsOn(op, var)) return true;
  }
  return false;
}

std::optional<int64_t> LinearStride(const ir::Expr& index, const std::string& var) {
  switch (index->kind) {
    case ir::ExprKind::kIntImm:
      return 0;
    case ir::ExprKind::kVar:
      return index->name == var ? 1 : 0;
    case ir::ExprKind::kAdd:
    case ir::ExprKind::kSub: {
      std::optional<int64_t> a = LinearStride(index->operands[0], var);
      std::optional<int64_t> b = LinearStride(index->operands[1], var);
      if (!a || !b) return std::nullopt;
      return index->kind == ir::ExprKind::kAdd ? *a + *b : *a - *b;
    }
    case ir::ExprKind::kMul: {
      const ir::Expr& a = index->operands[0];
      const ir::Expr& b = index->operands[1];
      const bool a_dep = DependsOn(a, var);
      const bool b_dep = DependsOn(b, var);
      if (!a_dep && !b_dep) return 0;
      int64_t factor = 0;
      if (!a_dep && ir::IsConst(a, &factor)) {
        std::optional<int64_t> sb = LinearStride(b, var);
        if (sb) return *sb * factor;
      } else if (!b_dep && ir::IsConst(b, &factor)) {
        std::optional<int64_t> sa = LinearStride(a, var);
        if (sa) return *sa * factor;
      }
      return std::nullopt;
    }
    default:
      if (DependsOn(index, var)) return std::nullopt;
      return 0;
  }
}

UsedNames CollectUsedNames(const ir::Stmt& s) {
  UsedNames names;
  CollectStmt(s, &names);
  return names;
}

bool IsVectorizableBody(const ir::Stmt& body, const std::string& var) {
  if (!body) return true;
  switch (body->kind) {
    case ir::StmtKind::kFor:
      return body->var != var && !DependsOn(body->extent, var) &&
             IsVectorizableBody(body->body, var);
    case ir::StmtKind::kStore:
    case ir::StmtKind::kPrefetch:
      return true;
    case ir::StmtKind::kBlock:
      for (const ir::Stmt& child : body->stmts) {
        if (!IsVectorizableBody(child, var)) return false;
      }
      return true;
    case ir::StmtKind::kIfThenElse:
      return !DependsOn(body->condition, var) && IsVectorizableBody(body->body, var) &&
             IsVectorizableBody(body->else_case, var);
    case ir::StmtKind::kAllocate:
    case ir::StmtKind::kMatrixDot:  // tile registers, not vector lanes
    case ir::StmtKind::kTileConfig:
      return false;
  }
  return false;
}

}  // namespace tuneforge::codegen

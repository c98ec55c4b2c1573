#include "compiler/ir/ir.h"
#include "compiler/support/status.h"

namespace tuneforge::ir {

Expr Substitute(const Expr& e, const std::map<std::string, Expr>& vars) {
  switch (e->kind) {
    case ExprKind::kIntImm:
    case ExprKind::kFloatImm:
      return e;
    case ExprKind::kVar: {
      auto it = vars.find(e->name);
      return it == vars.end() ? e : it->second;
    }
    case ExprKind::kLoad: {
      Expr index = Substitute(e->operands[0], vars);
      return index == e->operands[0] ? e : Load(e->name, e->dtype, index);
    }
    case ExprKind::kCall: {
      Expr arg = Substitute(e->operands[0], vars);
      return arg == e->operands[0] ? e : Call(e->name, arg);
    }
    default: break;
  }
  Expr a = Substitute(e->operands[0], vars);
  Expr b = Substitute(e->operands[1], vars);
  if (a == e->operands[0] && b == e->operands[1]) return e;
  switch (e->kind) {
    case ExprKind::kAdd: return Add(a, b);
    case ExprKind::kSub: return Sub(a, b);
    case ExprKind::kMul: return Mul(a, b);
    case ExprKind::kDiv: return Div(a, b);
    case ExprKind::kMod: return Mod(a, b);
    case ExprKind::kMin: return Min(a, b);
    case ExprKind::kMax: return Max(a, b);
    case ExprKind::kLT: return LT(a, b);
    case ExprKind::kLE: return LE(a, b);
    case ExprKind::kEQ: return EQ(a, b);
    case ExprKind::kAnd: return And(a, b);
    default: TF_CHECK(false, "unhandled expression kind");
  }
}

Stmt Substitute(const Stmt& s, const std::map<std::string, Expr>& vars) {
  if (!s || vars.empty()) return s;
  // Unchanged subtrees are shared, not rebuilt: templates substitute into large bodies
  // (a loop of extent 1 becomes 0 everywhere), and most of a body has no such variable.
  switch (s->kind) {
    case StmtKind::kFor: {
      Expr extent = Substitute(s->extent, vars);
      Stmt body;
      if (vars.count(s->var)) {  // the loop variable shadows a substitution of its name
        std::map<std::string, Expr> inner = vars;
        inner.erase(s->var);
        body = Substitute(s->body, inner);
      } else {
        body = Substitute(s->body, vars);
      }
      if (extent == s->extent && body == s->body) return s;
      int64_t c;
      int64_t max_extent = IsConst(extent, &c) ? c : s->max_extent;
      return For(s->var, extent, max_extent, s->for_kind, body);
    }
    case StmtKind::kStore: {
      Expr index = Substitute(s->index, vars), value = Substitute(s->value, vars);
      if (index == s->index && value == s->value) return s;
      return Store(s->buffer, index, value);
    }
    case StmtKind::kPrefetch: {
      Expr index = Substitute(s->index, vars);
      return index == s->index ? s : Prefetch(s->buffer, index);
    }
    case StmtKind::kBlock: {
      std::vector<Stmt> stmts;
      stmts.reserve(s->stmts.size());
      bool changed = false;
      for (const Stmt& c : s->stmts) {
        stmts.push_back(Substitute(c, vars));
        changed |= stmts.back() != c;
      }
      return changed ? Block(std::move(stmts)) : s;
    }
    case StmtKind::kIfThenElse: {
      Expr condition = Substitute(s->condition, vars);
      Stmt then_case = Substitute(s->body, vars), else_case = Substitute(s->else_case, vars);
      if (condition == s->condition && then_case == s->body && else_case == s->else_case) return s;
      return IfThenElse(condition, then_case, else_case);
    }
    case StmtKind::kAllocate: {
      Stmt body = Substitute(s->body, vars);
      return body == s->body ? s : Allocate(s->buffer, s->alloc_dtype, s->alloc_size, body, s->alloc_scope);
    }
  }
  return s;
}

void CollectVars(const Expr& e, std::set<std::string>* vars) {
  if (e->kind == ExprKind::kVar) vars->insert(e->name);
  for (const Expr& o : e->operands) CollectVars(o, vars);
}

Stmt Rewrite(const Stmt& s, const std::function<Stmt(const Stmt&)>& post) {
  if (!s) return s;
  Stmt rebuilt = s;
  switch (s->kind) {
    case StmtKind::kFor: {
      Stmt body = Rewrite(s->body, post);
      if (body != s->body) rebuilt = For(s->var, s->extent, s->max_extent, s->for_kind, body);
      break;
    }
    case StmtKind::kStore:
    case StmtKind::kPrefetch:
      break;
    case StmtKind::kBlock: {
      std::vector<Stmt> stmts;
      bool changed = false;
      for (const Stmt& c : s->stmts) {
        stmts.push_back(Rewrite(c, post));
        changed |= stmts.back() != c;
      }
      if (changed) rebuilt = Block(std::move(stmts));
      break;
    }
    case StmtKind::kIfThenElse: {
      Stmt then_case = Rewrite(s->body, post), else_case = Rewrite(s->else_case, post);
      if (then_case != s->body || else_case != s->else_case)
        rebuilt = IfThenElse(s->condition, then_case, else_case);
      break;
    }
    case StmtKind::kAllocate: {
      Stmt body = Rewrite(s->body, post);
      if (body != s->body)
        rebuilt = Allocate(s->buffer, s->alloc_dtype, s->alloc_size, body, s->alloc_scope);
      break;
    }
  }
  return post(rebuilt);
}

std::vector<Expr> Unflatten(Expr index, const std::vector<int64_t>& dims) {
  std::vector<Expr> out(dims.size());
  for (size_t d = dims.size(); d-- > 0;) {
    if (d == 0) {
      out[0] = index;
      break;
    }
    out[d] = Mod(index, IntImm(dims[d]));
    index = Div(index, IntImm(dims[d]));
  }
  return out;
}

namespace {

bool ExprReads(const Expr& e, const std::string& buffer) {
  if (!e) return false;
  if (e->kind == ExprKind::kLoad && e->name == buffer) return true;
  for (const Expr& o : e->operands)
    if (ExprReads(o, buffer)) return true;
  return false;
}

}  // namespace

bool ReadsBuffer(const Stmt& s, const std::string& buffer) {
  if (!s) return false;
  switch (s->kind) {
    case StmtKind::kFor:
      return ExprReads(s->extent, buffer) || ReadsBuffer(s->body, buffer);
    case StmtKind::kStore:
      return ExprReads(s->index, buffer) || ExprReads(s->value, buffer);
    case StmtKind::kPrefetch:  // not a read of the data
      return false;
    case StmtKind::kBlock:
      for (const Stmt& c : s->stmts)
        if (ReadsBuffer(c, buffer)) return true;
      return false;
    case StmtKind::kIfThenElse:
      return ExprReads(s->condition, buffer) || ReadsBuffer(s->body, buffer) ||
             ReadsBuffer(s->else_case, buffer);
    case StmtKind::kAllocate:
      return ReadsBuffer(s->body, buffer);
  }
  return false;
}

}  // namespace tuneforge::ir

// Loop-IR rewrites: substitution, generic post-order rewriting, index helpers.
#include "compiler/ir/ir.h"

#include <map>
#include <memory>
#include <string>

#include "compiler/support/status.h"

namespace tuneforge::ir {

namespace {

// The substitutions of a Substitute call, found by name. Lowering substitutes one to a
// few variables into bodies of thousands of nodes, and most names it meets are not
// among them: FewVars scans a handful comparing lengths first, where a std::map lookup
// compared the bytes of every name. MapVars is the map, for many variables.
class FewVars {
 public:
  static constexpr size_t kMax = 8;
  explicit FewVars(const std::map<std::string, Expr>& vars) {
    for (const auto& [name, value] : vars) items_[size_++] = {&name, &value};
  }
  bool empty() const { return size_ == 0; }
  const Expr* Find(const std::string& name) const {
    for (size_t i = 0; i < size_; ++i) {
      if (items_[i].name->size() == name.size() && *items_[i].name == name) return items_[i].value;
    }
    return nullptr;
  }
  FewVars Without(const std::string& name) const {
    FewVars out;
    for (size_t i = 0; i < size_; ++i)
      if (*items_[i].name != name) out.items_[out.size_++] = items_[i];
    return out;
  }

 private:
  FewVars() = default;
  struct Item {
    const std::string* name;
    const Expr* value;
  };
  Item items_[kMax] = {};
  size_t size_ = 0;
};

class MapVars {
 public:
  explicit MapVars(const std::map<std::string, Expr>& vars) : vars_(&vars) {}
  bool empty() const { return vars_->empty(); }
  const Expr* Find(const std::string& name) const {
    auto it = vars_->find(name);
    return it == vars_->end() ? nullptr : &it->second;
  }
  MapVars Without(const std::string& name) const {
    auto owned = std::make_shared<std::map<std::string, Expr>>(*vars_);
    owned->erase(name);
    MapVars out(*owned);
    out.owned_ = std::move(owned);
    return out;
  }

 private:
  const std::map<std::string, Expr>* vars_;
  std::shared_ptr<const std::map<std::string, Expr>> owned_;  // set by Without
};

template <typename Vars>
Expr SubstituteIn(const Expr& e, const Vars& vars) {
  switch (e->kind) {
    case ExprKind::kIntImm:
    case ExprKind::kFloatImm:
      return e;
    case ExprKind::kVar: {
      const Expr* value = vars.Find(e->name);
      return value ? *value : e;
    }
    case ExprKind::kLoad: {
      Expr index = SubstituteIn(e->operands[0], vars);
      return index == e->operands[0] ? e : Load(e->name, e->dtype, index);
    }
    case ExprKind::kCall: {
      Expr arg = SubstituteIn(e->operands[0], vars);
      return arg == e->operands[0] ? e : Call(e->name, arg);
    }
    case ExprKind::kToInt: {
      Expr arg = SubstituteIn(e->operands[0], vars);
      return arg == e->operands[0] ? e : ToInt(arg);
    }
    case ExprKind::kCast: {
      Expr arg = SubstituteIn(e->operands[0], vars);
      return arg == e->operands[0] ? e : Cast(e->dtype, arg);
    }
    case ExprKind::kDot4: {
      Expr acc = SubstituteIn(e->operands[0], vars);
      Expr a = SubstituteIn(e->operands[1], vars), b = SubstituteIn(e->operands[2], vars);
      if (acc == e->operands[0] && a == e->operands[1] && b == e->operands[2]) return e;
      return Dot4(acc, a, b);
    }
    case ExprKind::kSelect: {
      Expr c = SubstituteIn(e->operands[0], vars);
      Expr a = SubstituteIn(e->operands[1], vars), b = SubstituteIn(e->operands[2], vars);
      if (c == e->operands[0] && a == e->operands[1] && b == e->operands[2]) return e;
      return Select(c, a, b);
    }
    default: break;
  }
  Expr a = SubstituteIn(e->operands[0], vars);
  Expr b = SubstituteIn(e->operands[1], vars);
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

template <typename Vars>
Stmt SubstituteIn(const Stmt& s, const Vars& vars) {
  if (!s || vars.empty()) return s;
  // Unchanged subtrees are shared, not rebuilt: templates substitute into large bodies
  // (a loop of extent 1 becomes 0 everywhere), and most of a body has no such variable.
  switch (s->kind) {
    case StmtKind::kFor: {
      Expr extent = SubstituteIn(s->extent, vars);
      // The loop variable shadows a substitution of its name.
      Stmt body = vars.Find(s->var) ? SubstituteIn(s->body, vars.Without(s->var)) : SubstituteIn(s->body, vars);
      if (extent == s->extent && body == s->body) return s;
      int64_t c;
      int64_t max_extent = IsConst(extent, &c) ? c : s->max_extent;
      return For(s->var, extent, max_extent, s->for_kind, body);
    }
    case StmtKind::kStore: {
      Expr index = SubstituteIn(s->index, vars), value = SubstituteIn(s->value, vars);
      if (index == s->index && value == s->value) return s;
      return Store(s->buffer, index, value);
    }
    case StmtKind::kPrefetch: {
      Expr index = SubstituteIn(s->index, vars);
      return index == s->index ? s : Prefetch(s->buffer, index);
    }
    case StmtKind::kMatrixDot: {
      Expr index = SubstituteIn(s->index, vars);
      Expr a_index = SubstituteIn(s->matrix->a_index, vars), b_index = SubstituteIn(s->matrix->b_index, vars);
      if (index == s->index && a_index == s->matrix->a_index && b_index == s->matrix->b_index) return s;
      MatrixDotOperands m = *s->matrix;
      m.a_index = a_index;
      m.b_index = b_index;
      return MatrixDot(s->buffer, index, std::move(m));
    }
    case StmtKind::kTileConfig:
      return s;
    case StmtKind::kBlock: {
      std::vector<Stmt> stmts;
      stmts.reserve(s->stmts.size());
      bool changed = false;
      for (const Stmt& c : s->stmts) {
        stmts.push_back(SubstituteIn(c, vars));
        changed |= stmts.back() != c;
      }
      return changed ? Block(std::move(stmts)) : s;
    }
    case StmtKind::kIfThenElse: {
      Expr condition = SubstituteIn(s->condition, vars);
      Stmt then_case = SubstituteIn(s->body, vars), else_case = SubstituteIn(s->else_case, vars);
      if (condition == s->condition && then_case == s->body && else_case == s->else_case) return s;
      return IfThenElse(condition, then_case, else_case);
    }
    case StmtKind::kAllocate: {
      Stmt body = SubstituteIn(s->body, vars);
      return body == s->body ? s : Allocate(s->buffer, s->alloc_dtype, s->alloc_size, body, s->alloc_scope);
    }
  }
  return s;
}

}  // namespace

Expr Substitute(const Expr& e, const std::map<std::string, Expr>& vars) {
  if (vars.empty()) return e;
  if (vars.size() <= FewVars::kMax) return SubstituteIn(e, FewVars(vars));
  return SubstituteIn(e, MapVars(vars));
}

Stmt Substitute(const Stmt& s, const std::map<std::string, Expr>& vars) {
  if (!s || vars.empty()) return s;
  if (vars.size() <= FewVars::kMax) return SubstituteIn(s, FewVars(vars));
  return SubstituteIn(s, MapVars(vars));
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
    case StmtKind::kMatrixDot:
    case StmtKind::kTileConfig:
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
    case StmtKind::kTileConfig:
      return false;
    case StmtKind::kMatrixDot:
      return s->matrix->a == buffer || s->matrix->b == buffer || (s->matrix->accumulate && s->buffer == buffer) ||
             ExprReads(s->index, buffer) || ExprReads(s->matrix->a_index, buffer) ||
             ExprReads(s->matrix->b_index, buffer);
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

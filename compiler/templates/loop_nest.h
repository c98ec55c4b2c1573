// Small builders for the loop nests templates write by hand (layout transforms,
// Winograd's stages): a row-major flat index and a nest of loops. Internal to
// compiler/templates.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "compiler/ir/ir.h"

namespace tuneforge {

// Row-major flat index of `idx` in a tensor of `dims`.
inline ir::Expr Flat(const std::vector<ir::Expr>& idx, const std::vector<int64_t>& dims) {
  ir::Expr e = ir::IntImm(0);
  for (size_t i = 0; i < idx.size(); ++i) e = ir::Add(ir::Mul(e, ir::IntImm(dims[i])), idx[i]);
  return e;
}

// One loop of a hand-written nest: variable, extent, kind.
struct LoopSpec {
  std::string var;
  int64_t extent;
  ir::ForKind kind = ir::ForKind::kSerial;
};

// The variable of a loop of `extent`, or 0 where Loops leaves the loop out.
inline ir::Expr LoopVar(const std::string& var, int64_t extent) {
  return extent > 1 ? ir::Var(var) : ir::IntImm(0);
}

// How Loops treats the variables of the loops it leaves out.
enum class LeftOutVars {
  kSubstitute,  // the body names them: replaced by 0 in one pass over it
  kAbsent,      // the body was written with LoopVar: nothing to replace (no pass)
};

// Loops around `body`, outermost first. A loop of extent 1 is left out and its
// variable replaced by 0.
inline ir::Stmt Loops(const std::vector<LoopSpec>& loops, ir::Stmt body,
                      LeftOutVars left_out = LeftOutVars::kSubstitute) {
  // The variables of the left-out loops, replaced in one pass over the body. A loop
  // inside one of them with the same name would shadow it; the nests written with
  // this never reuse a name.
  std::map<std::string, ir::Expr> zeros;
  if (left_out == LeftOutVars::kSubstitute)
    for (const LoopSpec& l : loops)
      if (l.extent <= 1) zeros.emplace(l.var, ir::IntImm(0));
  body = ir::Substitute(body, zeros);
  for (auto it = loops.rbegin(); it != loops.rend(); ++it) {
    if (it->extent > 1) body = ir::For(it->var, ir::IntImm(it->extent), it->extent, it->kind, body);
  }
  return body;
}

}  // namespace tuneforge

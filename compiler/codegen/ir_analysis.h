// Small analyses of the loop IR that codegen needs before it emits a statement:
// which names a subtree uses (for closures of outlined parallel loops), whether an
// expression depends on a loop variable, and the stride of an index in that variable
// (for vector loads and stores). Pure IR; no LLVM.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>

#include "compiler/ir/ir.h"

namespace tuneforge::codegen {

// Whether `e` mentions the variable `var` anywhere (also inside Load indices).
bool DependsOn(const ir::Expr& e, const std::string& var);

// If `index` is `stride * var + (terms without var)` with a constant `stride`, returns
// the stride (0 when `var` does not occur). Understands IntImm, Var, Add, Sub and Mul
// by a constant; anything else that mentions `var` gives nullopt.
std::optional<int64_t> LinearStride(const ir::Expr& index, const std::string& var);

// Every variable name read in `s` (extents, conditions, indices, values) and every
// buffer name loaded or stored in `s`, including names that `s` binds itself.
struct UsedNames {
  std::set<std::string> vars;
  std::set<std::string> buffers;
};
UsedNames CollectUsedNames(const ir::Stmt& s);

// Whether the body of a vectorized loop over `var` can run all lanes at once with
// scalar control flow: no nested loop extent or if-condition depends on `var`, no
// nested loop rebinds `var`, and no Allocate (a per-iteration private buffer would be
// shared by all lanes). Codegen scalarises a vectorized loop whose body fails this.
bool IsVectorizableBody(const ir::Stmt& body, const std::string& var);

}  // namespace tuneforge::codegen

// A reference interpreter of the loop IR (tests check codegen against it).
#include "compiler/ir/interpreter.h"

#include <algorithm>
#include <cmath>

#include "compiler/support/status.h"

namespace tuneforge::ir {
namespace {

class Interpreter {
 public:
  explicit Interpreter(std::map<std::string, std::vector<float>>* buffers) : buffers_(buffers) {}

  absl::Status Exec(const Stmt& s) {
    switch (s->kind) {
      case StmtKind::kFor: {
        int64_t extent = Int(s->extent);
        if (extent > s->max_extent) {
          return absl::InternalError("loop " + s->var + " extent " + std::to_string(extent) +
                                     " exceeds its bound " + std::to_string(s->max_extent));
        }
        for (int64_t i = 0; i < extent; ++i) {
          vars_[s->var] = i;
          RETURN_IF_ERROR(Exec(s->body));
        }
        vars_.erase(s->var);
        return absl::OkStatus();
      }
      case StmtKind::kStore: {
        float value = static_cast<float>(Float(s->value));
        ASSIGN_OR_RETURN(float* slot, Slot(s->buffer, Int(s->index)));
        *slot = value;
        return absl::OkStatus();
      }
      case StmtKind::kPrefetch:  // a hint: nothing to compute, and any index is allowed
        return buffers_->count(s->buffer) ? absl::OkStatus()
                                          : absl::InternalError("unknown buffer " + s->buffer);
      case StmtKind::kBlock:
        for (const Stmt& c : s->stmts) RETURN_IF_ERROR(Exec(c));
        return absl::OkStatus();
      case StmtKind::kIfThenElse:
        if (Int(s->condition)) return Exec(s->body);
        return s->else_case ? Exec(s->else_case) : absl::OkStatus();
      case StmtKind::kAllocate: {
        // Uninitialised memory in real code: NaN here so a missing init shows.
        (*buffers_)[s->buffer] = std::vector<float>(s->alloc_size, std::nanf(""));
        absl::Status st = Exec(s->body);
        buffers_->erase(s->buffer);
        return st;
      }
    }
    return absl::InternalError("unknown statement");
  }

  absl::Status error() const { return error_; }

 private:
  absl::StatusOr<float*> Slot(const std::string& buffer, int64_t index) {
    auto it = buffers_->find(buffer);
    if (it == buffers_->end()) return absl::InternalError("unknown buffer " + buffer);
    if (index < 0 || index >= static_cast<int64_t>(it->second.size())) {
      return absl::InternalError("out of bounds: " + buffer + "[" + std::to_string(index) +
                                 "], size " + std::to_string(it->second.size()));
    }
    return &it->second[index];
  }

  int64_t Int(const Expr& e) {
    switch (e->kind) {
      case ExprKind::kIntImm: return e->int_value;
      case ExprKind::kVar: {
        auto it = vars_.find(e->name);
        TF_CHECK(it != vars_.end(), "unbound variable ", e->name);
        return it->second;
      }
      case ExprKind::kSelect:
        return Int(e->operands[0]) ? Int(e->operands[1]) : Int(e->operands[2]);
      case ExprKind::kToInt:
        return static_cast<int64_t>(static_cast<float>(Float(e->operands[0])));
      case ExprKind::kLT:
      case ExprKind::kLE:
      case ExprKind::kEQ:
        if (e->operands[0]->dtype == DType::kFloat32) {
          const double x = Float(e->operands[0]), y = Float(e->operands[1]);
          return e->kind == ExprKind::kLT ? x < y : e->kind == ExprKind::kLE ? x <= y : x == y;
        }
        break;
      default: break;
    }
    int64_t a = Int(e->operands[0]), b = Int(e->operands[1]);
    switch (e->kind) {
      case ExprKind::kAdd: return a + b;
      case ExprKind::kSub: return a - b;
      case ExprKind::kMul: return a * b;
      case ExprKind::kDiv: return a / b;
      case ExprKind::kMod: return a % b;
      case ExprKind::kMin: return std::min(a, b);
      case ExprKind::kMax: return std::max(a, b);
      case ExprKind::kLT: return a < b;
      case ExprKind::kLE: return a <= b;
      case ExprKind::kEQ: return a == b;
      case ExprKind::kAnd: return a && b;
      default: TF_CHECK(false, "not an integer expression: ", ToString(e));
    }
  }

  double Float(const Expr& e) {
    switch (e->kind) {
      case ExprKind::kFloatImm: return static_cast<float>(e->float_value);
      case ExprKind::kLoad: {
        absl::StatusOr<float*> slot = Slot(e->name, Int(e->operands[0]));
        if (!slot.ok()) {
          if (error_.ok()) error_ = slot.status();
          return std::nan("");
        }
        return **slot;
      }
      case ExprKind::kAdd: return static_cast<float>(Float(e->operands[0]) + Float(e->operands[1]));
      case ExprKind::kSub: return static_cast<float>(Float(e->operands[0]) - Float(e->operands[1]));
      case ExprKind::kMul: return static_cast<float>(Float(e->operands[0]) * Float(e->operands[1]));
      case ExprKind::kDiv: return static_cast<float>(Float(e->operands[0]) / Float(e->operands[1]));
      case ExprKind::kMod:
        return std::fmod(static_cast<float>(Float(e->operands[0])), static_cast<float>(Float(e->operands[1])));
      case ExprKind::kCall:
        return EvalMathFunction(e->name, static_cast<float>(Float(e->operands[0])));
      case ExprKind::kMin: return std::min(Float(e->operands[0]), Float(e->operands[1]));
      case ExprKind::kMax: return std::max(Float(e->operands[0]), Float(e->operands[1]));
      case ExprKind::kSelect: return Int(e->operands[0]) ? Float(e->operands[1]) : Float(e->operands[2]);
      default: TF_CHECK(false, "not a float expression: ", ToString(e));
    }
  }

  std::map<std::string, std::vector<float>>* buffers_;
  std::map<std::string, int64_t> vars_;
  absl::Status error_;
};

}  // namespace

absl::Status Interpret(const LoweredFunc& func, std::map<std::string, std::vector<float>>* buffers) {
  for (const BufferParam& p : func.params) {
    auto it = buffers->find(p.name);
    if (it == buffers->end() || static_cast<int64_t>(it->second.size()) != p.NumElements()) {
      return absl::InvalidArgumentError("buffer " + p.name + " missing or of the wrong size");
    }
  }
  Interpreter interp(buffers);
  if (func.prepack) RETURN_IF_ERROR(interp.Exec(func.prepack));
  RETURN_IF_ERROR(interp.Exec(func.body));
  if (func.unpack) RETURN_IF_ERROR(interp.Exec(func.unpack));
  return interp.error();
}

}  // namespace tuneforge::ir

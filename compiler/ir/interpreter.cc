// A reference interpreter of the loop IR (tests check codegen against it).
#include "compiler/ir/interpreter.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <utility>

#include "compiler/support/status.h"

namespace tuneforge::ir {
namespace {

// What an element of a local integer buffer holds before its first store.
constexpr int64_t kUnwritten = std::numeric_limits<int64_t>::min();

int64_t MinOf(DType t) {
  switch (t) {
    case DType::kUInt8: return 0;
    case DType::kInt8: return -128;
    case DType::kInt32: return std::numeric_limits<int32_t>::min();
    default: return std::numeric_limits<int64_t>::min();
  }
}

int64_t MaxOf(DType t) {
  switch (t) {
    case DType::kUInt8: return 255;
    case DType::kInt8: return 127;
    case DType::kInt32: return std::numeric_limits<int32_t>::max();
    default: return std::numeric_limits<int64_t>::max();
  }
}

// s32 arithmetic wraps around (two's complement), as the CPU's does.
int64_t Wrap32(int64_t v) { return static_cast<int32_t>(static_cast<uint32_t>(v)); }

// Cast() of a float32 value to an integer type: nearest, halves to even, saturated.
int64_t FloatToInt(DType to, double x) {
  if (std::isnan(x)) return 0;
  const double r = std::nearbyint(static_cast<float>(x));
  if (r <= static_cast<double>(MinOf(to))) return MinOf(to);
  if (r >= static_cast<double>(MaxOf(to))) return MaxOf(to);
  return static_cast<int64_t>(r);
}

class Interpreter {
 public:
  Interpreter(FloatBuffers* floats, IntBuffers* ints) : floats_(floats), ints_(ints) {}

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
          // An iteration of a parallel loop may run on a thread whose tiles nothing
          // has configured yet.
          if (s->for_kind == ForKind::kParallel) tile_config_.reset();
          RETURN_IF_ERROR(Exec(s->body));
        }
        if (s->for_kind == ForKind::kParallel) tile_config_.reset();
        vars_.erase(s->var);
        return absl::OkStatus();
      }
      case StmtKind::kStore: {
        auto int_it = ints_->find(s->buffer);
        if (int_it != ints_->end()) {
          const DType type = int_types_[s->buffer];
          if (s->value->dtype != type) {
            return absl::InternalError("store of a " + std::string(DTypeName(s->value->dtype)) +
                                       " value into " + DTypeName(type) + " buffer " + s->buffer);
          }
          const int64_t value = Int(s->value);
          ASSIGN_OR_RETURN(int64_t* slot, IntSlot(s->buffer, Int(s->index)));
          *slot = value;
          return absl::OkStatus();
        }
        float value = static_cast<float>(Float(s->value));
        ASSIGN_OR_RETURN(float* slot, Slot(s->buffer, Int(s->index)));
        *slot = value;
        return absl::OkStatus();
      }
      case StmtKind::kMatrixDot:
        return ExecMatrixDot(s);
      case StmtKind::kTileConfig:
        tile_config_ = TileShape{s->matrix->rows, s->matrix->cols, s->matrix->groups};
        return absl::OkStatus();
      case StmtKind::kPrefetch:  // a hint: nothing to compute, and any index is allowed
        return floats_->count(s->buffer) || ints_->count(s->buffer)
                   ? absl::OkStatus()
                   : absl::InternalError("unknown buffer " + s->buffer);
      case StmtKind::kBlock:
        for (const Stmt& c : s->stmts) RETURN_IF_ERROR(Exec(c));
        return absl::OkStatus();
      case StmtKind::kIfThenElse:
        if (Int(s->condition)) return Exec(s->body);
        return s->else_case ? Exec(s->else_case) : absl::OkStatus();
      case StmtKind::kAllocate: {
        absl::Status st;
        if (IsQuantizedInt(s->alloc_dtype)) {
          (*ints_)[s->buffer] = std::vector<int64_t>(s->alloc_size, kUnwritten);
          int_types_[s->buffer] = s->alloc_dtype;
          st = Exec(s->body);
          ints_->erase(s->buffer);
          int_types_.erase(s->buffer);
        } else {
          // Uninitialised memory in real code: NaN here so a missing init shows.
          (*floats_)[s->buffer] = std::vector<float>(s->alloc_size, std::nanf(""));
          st = Exec(s->body);
          floats_->erase(s->buffer);
        }
        return st;
      }
    }
    return absl::InternalError("unknown statement");
  }

  void DeclareInt(const std::string& name, DType type) { int_types_[name] = type; }
  absl::Status error() const { return error_; }

 private:
  absl::StatusOr<float*> Slot(const std::string& buffer, int64_t index) {
    auto it = floats_->find(buffer);
    if (it == floats_->end()) return absl::InternalError("unknown float32 buffer " + buffer);
    if (index < 0 || index >= static_cast<int64_t>(it->second.size())) {
      return absl::InternalError("out of bounds: " + buffer + "[" + std::to_string(index) +
                                 "], size " + std::to_string(it->second.size()));
    }
    return &it->second[index];
  }

  // kMatrixDot, element by element in int64; a sum outside int32 is an error.
  absl::Status ExecMatrixDot(const Stmt& s) {
    const MatrixDotOperands& m = *s->matrix;
    const std::pair<const std::string*, DType> types[] = {
        {&s->buffer, DType::kInt32}, {&m.a, DType::kUInt8}, {&m.b, DType::kInt8}};
    for (const auto& [name, type] : types) {
      auto it = int_types_.find(*name);
      if (it == int_types_.end() || it->second != type) {
        return absl::InternalError("matrix_dot: " + *name + " must be a " + DTypeName(type) + " buffer");
      }
    }
    const TileShape shape{m.rows, m.cols, StepGroups(m.groups)};
    if (m.configured && tile_config_ != shape) {
      return absl::InternalError("matrix_dot " + shape.ToString() + " (configured) runs on tiles " +
                                 (tile_config_ ? "configured for " + tile_config_->ToString()
                                               : std::string("nothing configured")));
    }
    tile_config_ = shape;
    const int64_t acc = Int(s->index), a = Int(m.a_index), b = Int(m.b_index);
    for (int64_t r = 0; r < m.rows; ++r) {
      for (int64_t c = 0; c < m.cols; ++c) {
        int64_t sum = m.accumulate ? ReadInt(s->buffer, acc + r * m.cols + c) : 0;
        for (int64_t e = 0; e < m.segments; ++e) {
          for (int64_t x = 0; x < 4 * m.groups; ++x) {
            const int64_t g = e * m.groups + x / 4, t = x % 4;
            sum += ReadInt(m.a, a + e * m.a_segment_stride + r * m.a_stride + x) *
                   ReadInt(m.b, b + (c / 16) * m.b_panel_stride + 64 * g + 4 * (c % 16) + t);
          }
        }
        RETURN_IF_ERROR(error_);
        if (sum < std::numeric_limits<int32_t>::min() || sum > std::numeric_limits<int32_t>::max()) {
          return absl::InternalError("matrix_dot: int32 overflow in " + s->buffer);
        }
        ASSIGN_OR_RETURN(int64_t* slot, IntSlot(s->buffer, acc + r * m.cols + c));
        *slot = sum;
      }
    }
    return absl::OkStatus();
  }

  absl::StatusOr<int64_t*> IntSlot(const std::string& buffer, int64_t index) {
    auto it = ints_->find(buffer);
    if (it == ints_->end()) return absl::InternalError("unknown integer buffer " + buffer);
    if (index < 0 || index >= static_cast<int64_t>(it->second.size())) {
      return absl::InternalError("out of bounds: " + buffer + "[" + std::to_string(index) +
                                 "], size " + std::to_string(it->second.size()));
    }
    return &it->second[index];
  }

  // An element of an integer buffer; records the first error and reads 0 on one.
  int64_t ReadInt(const std::string& buffer, int64_t index) {
    absl::StatusOr<int64_t*> slot = IntSlot(buffer, index);
    if (slot.ok() && **slot == kUnwritten) {
      slot = absl::InternalError("read of " + buffer + "[" + std::to_string(index) +
                                 "] before anything was stored there");
    }
    if (!slot.ok()) {
      if (error_.ok()) error_ = slot.status();
      return 0;
    }
    return **slot;
  }

  int64_t Dot4Value(const Expr& e) {
    int64_t sum = Int(e->operands[0]);
    const Expr& a = e->operands[1];
    const Expr& b = e->operands[2];
    const int64_t ia = Int(a->operands[0]), ib = Int(b->operands[0]);
    for (int64_t t = 0; t < 4; ++t) sum += ReadInt(a->name, ia + t) * ReadInt(b->name, ib + t);
    return Wrap32(sum);
  }

  int64_t CastToInt(const Expr& e) {
    const Expr& x = e->operands[0];
    if (x->dtype == DType::kFloat32) return FloatToInt(e->dtype, Float(x));
    return std::clamp(Int(x), MinOf(e->dtype), MaxOf(e->dtype));
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
      case ExprKind::kLoad:
        TF_CHECK(IsQuantizedInt(e->dtype), "not an integer expression: ", ToString(e));
        return ReadInt(e->name, Int(e->operands[0]));
      case ExprKind::kCast:
        return CastToInt(e);
      case ExprKind::kDot4:
        return Dot4Value(e);
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
    const bool s32 = e->dtype == DType::kInt32;
    switch (e->kind) {
      case ExprKind::kAdd: return s32 ? Wrap32(a + b) : a + b;
      case ExprKind::kSub: return s32 ? Wrap32(a - b) : a - b;
      case ExprKind::kMul: return s32 ? Wrap32(a * b) : a * b;
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
      case ExprKind::kCast:
        TF_CHECK(e->dtype == DType::kFloat32, "not a float expression: ", ToString(e));
        return static_cast<float>(e->operands[0]->dtype == DType::kFloat32 ? Float(e->operands[0])
                                                                            : Int(e->operands[0]));
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

  FloatBuffers* floats_;
  IntBuffers* ints_;
  std::map<std::string, DType> int_types_;
  std::map<std::string, int64_t> vars_;
  absl::Status error_;
  // The shape the tile registers are configured for, if any: rows x cols x groups
  // of four k per step.
  struct TileShape {
    int64_t rows, cols, step_groups;
    bool operator!=(const TileShape& o) const {
      return rows != o.rows || cols != o.cols || step_groups != o.step_groups;
    }
    std::string ToString() const {
      return std::to_string(rows) + "x" + std::to_string(cols) + "x" + std::to_string(4 * step_groups);
    }
  };
  std::optional<TileShape> tile_config_;
};

}  // namespace

absl::Status Interpret(const LoweredFunc& func, FloatBuffers* buffers) {
  IntBuffers no_ints;
  return Interpret(func, buffers, &no_ints);
}

absl::Status Interpret(const LoweredFunc& func, FloatBuffers* float_buffers,
                       IntBuffers* int_buffers) {
  Interpreter interp(float_buffers, int_buffers);
  for (const BufferParam& p : func.params) {
    int64_t size = -1;
    if (IsQuantizedInt(p.dtype)) {
      auto it = int_buffers->find(p.name);
      if (it != int_buffers->end()) {
        size = static_cast<int64_t>(it->second.size());
        for (int64_t v : it->second) {
          if (v < MinOf(p.dtype) || v > MaxOf(p.dtype)) {
            return absl::InvalidArgumentError("buffer " + p.name + " holds " + std::to_string(v) +
                                              ", outside the range of " + DTypeName(p.dtype));
          }
        }
      }
      interp.DeclareInt(p.name, p.dtype);
    } else if (p.dtype == DType::kFloat32) {
      auto it = float_buffers->find(p.name);
      if (it != float_buffers->end()) size = static_cast<int64_t>(it->second.size());
    } else {
      return absl::InvalidArgumentError("buffer " + p.name + " is of type " + DTypeName(p.dtype) +
                                        ", not float32, u8, s8 or s32");
    }
    if (size != p.NumElements()) {
      return absl::InvalidArgumentError("buffer " + p.name + " missing or of the wrong size");
    }
  }
  if (func.prepack) RETURN_IF_ERROR(interp.Exec(func.prepack));
  RETURN_IF_ERROR(interp.Exec(func.body));
  if (func.unpack) RETURN_IF_ERROR(interp.Exec(func.unpack));
  return interp.error();
}

}  // namespace tuneforge::ir

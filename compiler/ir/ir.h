// The loop IR: what lowering produces, what the printer shows, what LLVM codegen and
// feature extraction consume.
//
// A tour: Expr and Stmt are immutable, reference-counted nodes (std::shared_ptr to
// const). A pass changes IR by building new nodes. Buffers are flat: lowering turns
// every multi-dimensional access into one row-major index. The most interesting
// node is For: its extent may be a non-constant expression (tails of splits that do
// not divide). A For marked kVectorized is one vector when its extent is a constant
// where codegen meets it (a constant, or an expression over unrolled variables that
// folds to one, e.g. a tail tile's last vector min(16, 24 - j.v * 16)); otherwise its
// lanes run one after another. A local Allocate always has a constant size.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace tuneforge::ir {

// kInt64: loop variables and indices. kFloat32: tensor data. kBool: conditions.
// kUInt8, kInt8, kInt32: quantized tensor data and its accumulators (docs/int8.md).
// u8 and s8 values take part in arithmetic only through Cast (to s32 or float32) or
// Dot4; s32 arithmetic wraps around in two's complement, as the CPU's does.
enum class DType { kInt64, kFloat32, kBool, kUInt8, kInt8, kInt32 };
const char* DTypeName(DType dtype);  // "int64", "float32", "bool", "u8", "s8", "s32"
int DTypeBytes(DType dtype);         // bytes of one element in a buffer (bool: 1)
// Whether values of `dtype` are integers that buffers hold (u8, s8, s32).
bool IsQuantizedInt(DType dtype);

enum class ExprKind {
  kIntImm,    // int_value, dtype kInt64
  kFloatImm,  // float_value, dtype kFloat32
  kVar,       // name; an int64 loop variable
  kAdd, kSub, kMul,
  kDiv,       // integer division of non-negative values (floor == trunc here)
  kMod,       // integer remainder of non-negative values; of float32, C's fmod (the dividend's sign)
  kMin, kMax,
  kLT, kLE, kEQ,  // comparisons of two int64 or two float32, dtype kBool
  kAnd,           // logical and of two kBool
  kSelect,        // operands {condition (kBool), a, b}: a where the condition holds, else b
  kToInt,         // the int64 of a float32 operand, rounded toward zero (an index read from a table)
  kLoad,      // name = buffer, operands[0] = flat index; dtype of the buffer
  kCall,      // name = a float32 math function of one float32 operand (MathFunctions())
  kCast,      // operands[0] converted to dtype; see Cast()
  kDot4,      // operands {acc (s32), a, b (loads of u8/s8)}; see Dot4()
};

struct ExprNode;
using Expr = std::shared_ptr<const ExprNode>;

// An expression's operands (at most three), held in the node: one allocation per node,
// not two (lowering builds thousands of nodes per candidate the cost model scores).
// Reads like the std::vector it replaces.
class Operands {
 public:
  Operands() = default;
  Operands(std::initializer_list<Expr> list) {
    for (const Expr& e : list) push_back(e);
  }
  explicit Operands(Expr a) : items_{std::move(a), nullptr, nullptr}, size_(1) {}
  Operands(Expr a, Expr b) : items_{std::move(a), std::move(b), nullptr}, size_(2) {}
  void push_back(Expr e);  // TF_CHECKs that there is room
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const Expr& operator[](size_t i) const { return items_[i]; }
  const Expr* begin() const { return items_; }
  const Expr* end() const { return items_ + size_; }

 private:
  Expr items_[3];
  size_t size_ = 0;
};

struct ExprNode {
  ExprKind kind;
  DType dtype;
  int64_t int_value = 0;
  double float_value = 0.0;
  std::string name;    // kVar: variable; kLoad: buffer
  Operands operands;   // binary ops: {a, b}; kLoad, kCall: {operand}; kSelect: {c, a, b}
};

// Constructors. Arithmetic constructors fold constants and drop identities
// (x + 0, x * 1, x * 0, min of two constants, ...), so lowered IR stays readable.
Expr IntImm(int64_t v);
Expr FloatImm(double v);
Expr Var(const std::string& name);
Expr Add(Expr a, Expr b);
Expr Sub(Expr a, Expr b);
Expr Mul(Expr a, Expr b);
Expr Div(Expr a, Expr b);
Expr Mod(Expr a, Expr b);
Expr Min(Expr a, Expr b);
Expr Max(Expr a, Expr b);
Expr LT(Expr a, Expr b);
Expr LE(Expr a, Expr b);
Expr EQ(Expr a, Expr b);
Expr And(Expr a, Expr b);
// `a` where `condition` (kBool) holds, else `b` (both of one type; no arithmetic
// between them, so an infinite or NaN value in the branch not taken does not leak).
Expr Select(Expr condition, Expr a, Expr b);
// The int64 of float32 `x`, rounded toward zero (x must be within int64's range).
Expr ToInt(Expr x);
Expr Load(const std::string& buffer, DType dtype, Expr index);
// `x` converted to `to`. Between integer types (int64, s32, u8, s8) the value is kept
// when it fits and saturated to the nearest end of `to`'s range when it does not.
// Integer to float32 rounds to nearest. Float32 to an integer type rounds to nearest,
// halves to even, then saturates; NaN gives 0 (onnxruntime's QuantizeLinear rounding).
// No conversion from or to bool. TF_CHECKs the types.
Expr Cast(DType to, Expr x);
// The 4-way dot-product accumulate of quantized kernels: acc + sum over t < 4 of
// a[i + t] * b[j + t], where `a` and `b` are Loads of u8 or s8 buffers at the first of
// the four elements (a = Load(A, u8, i), b = Load(B, s8, j)) and `acc` is s32; the
// result is s32 (wrapping). In a vectorized loop each lane computes its own group of
// four, so a lane's four bytes are one 32-bit word: a word index with stride 4 in the
// vector variable reads one vector, stride 0 broadcasts one word. Codegen uses the
// CPU's dot-product instruction where the target has it (vpdpbusd for u8 x s8).
Expr Dot4(Expr acc, Expr a, Expr b);
// A float32 math function of one float32 argument: "exp", "log", "sqrt", "erf",
// "tanh" (what the model operators need). TF_CHECKs the name.
Expr Call(const std::string& function, Expr arg);
const std::vector<std::string>& MathFunctions();
// Evaluates a math function of MathFunctions() on one value (the interpreter's and the
// tests' reference).
float EvalMathFunction(const std::string& function, float x);

bool IsConst(const Expr& e, int64_t* value = nullptr);

enum class ForKind { kSerial, kParallel, kVectorized, kUnrolled };
const char* ForKindName(ForKind kind);

enum class StmtKind { kFor, kStore, kBlock, kIfThenElse, kAllocate, kPrefetch, kMatrixDot, kTileConfig };

// Where an Allocate lives: kLocal is a small constant-size tile (a stack slot that
// codegen can promote to registers); kHeap is a large scratch buffer (e.g. a packed
// operand), 64-byte aligned, allocated on entry to the Allocate and freed after it.
enum class MemoryScope { kLocal, kHeap };

struct StmtNode;
using Stmt = std::shared_ptr<const StmtNode>;

// The operands of a kMatrixDot statement: a block of uint8 x int8 products summed in
// int32 by the CPU's matrix unit (x86 AMX: tdpbusd on tile registers),
//   acc[acc_index + r*cols + c] (+)= sum over e < segments, g < groups, t < 4 of
//     a[a_index + e*a_segment_stride + r*a_stride + 4g + t] *
//     b[b_index + (c/16)*b_panel_stride + 64(e*groups + g) + 4(c%16) + t]
// for r < rows and c < cols: `a` uint8 with rows a_stride bytes apart (rows may
// overlap: a convolution's neighbouring pixels share input), `b` int8 in panels of 16
// columns ([segments*groups][16][4] bytes each, b_panel_stride bytes apart: the
// packed layout of the int8 GEMM with a 16-wide panel), `acc` int32, rows x cols,
// dense. The reduction is `segments` runs of 4*groups bytes of each A row, the runs
// a_segment_stride bytes apart (a convolution's filter rows: the next input row),
// B's groups contiguous across them. `accumulate`: add to acc's values, else
// overwrite them.
// The tile registers must be configured for the block's shape (rows, cols, and the
// groups of one reduction step: StepGroups(groups)) on the
// thread that runs it: a MatrixDot does that itself (an ldtilecfg: a few hundred
// cycles, serialising) unless `configured`, which says an earlier kTileConfig
// statement of the same shape did, on this thread: in the same iteration of any
// enclosing parallel loop, with no MatrixDot of another shape in between. The
// interpreter checks that.
struct MatrixDotOperands {
  std::string a, b;
  Expr a_index, b_index;
  int64_t a_stride = 0, b_panel_stride = 0;
  int64_t rows = 0;    // 1..32: up to two tiles of 16 rows
  int64_t cols = 0;    // 16 or 32: one or two tiles of 16 int32 columns
  // Groups of four k per segment: a positive multiple of 16 (64-byte tile rows), or
  // 1..15 (one shorter tile row per segment: a convolution with few input channels).
  int64_t groups = 0;
  int64_t segments = 1, a_segment_stride = 0;
  bool accumulate = false;
  bool configured = false;
};

// The groups of four k one tile step reduces: 16 (a 64-byte tile row), or all of a
// shorter segment's.
inline int64_t StepGroups(int64_t groups) { return groups < 16 ? groups : 16; }

struct StmtNode {
  StmtKind kind;
  // kFor: loop `var` from 0 to `extent` (exclusive), annotated with `for_kind`.
  //   `max_extent` is a static upper bound of `extent` (equal when constant).
  std::string var;
  Expr extent;
  int64_t max_extent = 0;
  ForKind for_kind = ForKind::kSerial;
  // kStore: buffer[index] = value.  kPrefetch: a hint that buffer[index] will be read
  //   soon (no effect on results; the index may lie outside the buffer: a prefetch
  //   never faults).  kAllocate: a local buffer of `alloc_size`
  //   elements of `alloc_dtype`, visible in `body`, uninitialised.
  std::string buffer;
  Expr index;
  Expr value;
  DType alloc_dtype = DType::kFloat32;
  int64_t alloc_size = 0;
  MemoryScope alloc_scope = MemoryScope::kLocal;
  // kIfThenElse: condition; then_case = body, else_case may be null.
  Expr condition;
  Stmt body;
  Stmt else_case;
  // kBlock: run in order.
  std::vector<Stmt> stmts;
  // kMatrixDot: acc is `buffer` from `index`; the rest is here. kTileConfig: the
  // shape (rows, cols, groups per step) the tiles are configured for.
  std::shared_ptr<const MatrixDotOperands> matrix;
};

Stmt For(const std::string& var, Expr extent, int64_t max_extent, ForKind kind, Stmt body);
Stmt Store(const std::string& buffer, Expr index, Expr value);
Stmt Prefetch(const std::string& buffer, Expr index);
Stmt Block(std::vector<Stmt> stmts);
Stmt IfThenElse(Expr condition, Stmt then_case, Stmt else_case = nullptr);
Stmt Allocate(const std::string& buffer, DType dtype, int64_t size, Stmt body,
              MemoryScope scope = MemoryScope::kLocal);
// TF_CHECKs the shape limits of MatrixDotOperands.
Stmt MatrixDot(const std::string& acc, Expr acc_index, MatrixDotOperands operands);
// Configures the tile registers for MatrixDot blocks of rows x cols reducing
// step_groups groups of four k per tile step (see above).
Stmt TileConfig(int64_t rows, int64_t cols, int64_t step_groups = 16);

// A kernel argument. Arguments are global buffers of float32 or of a quantized
// integer type (u8, s8, s32), in entry-point order.
struct BufferParam {
  std::string name;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  bool is_output = false;
  // An internal-layout buffer: neither an input nor the output. The caller allocates
  // it and never fills or reads it. Written by the prepack statements (weights packed
  // into panels, activations into a blocked layout) or by the body (a blocked output
  // that the unpack statements convert); see LoweredFunc.
  bool is_internal = false;
  int64_t NumElements() const;
};

// The result of lowering: one function, the unit codegen compiles.
struct LoweredFunc {
  std::string name;                  // becomes the entry symbol
  std::vector<BufferParam> params;
  Stmt body;
  // Optional (null = none): run once before `body`, by its own entry point
  // `<name>_prepack(void** buffers)` taking the same buffers, to fill the is_internal
  // buffers from constant inputs (inference weights). Not part of the timed region.
  // Also converts activations into a blocked layout the kernel computes in, as a
  // layout transform that runs once, like oneDNN's reorders that benchmarks leave out.
  Stmt prepack;
  // Optional (null = none): the output layout transform, `<name>_unpack(void**
  // buffers)`: converts the kernel's internal output (an is_internal buffer in a
  // blocked layout) into the task's output buffer. Run after the kernel, before each
  // check of the output; not part of the timed region.
  Stmt unpack;
};

// Human-readable text of the IR (what `tuneforge show` prints).
std::string ToString(const Expr& e);
std::string ToString(const Stmt& s, int indent = 0);
std::string ToString(const LoweredFunc& f);

}  // namespace tuneforge::ir

// ---- Utilities over the IR (compiler/ir/mutate.cc) ----
namespace tuneforge::ir {

// Replaces variables by expressions, rebuilding (and re-folding) only what changed.
Expr Substitute(const Expr& e, const std::map<std::string, Expr>& vars);
Stmt Substitute(const Stmt& s, const std::map<std::string, Expr>& vars);
// Names of the variables `e` reads.
void CollectVars(const Expr& e, std::set<std::string>* vars);
// Rebuilds `s` bottom-up: each statement's children are rewritten first, then `post`
// gets the statement (with its new children) and returns its replacement (itself to
// keep it). Unchanged subtrees are shared, not copied.
Stmt Rewrite(const Stmt& s, const std::function<Stmt(const Stmt&)>& post);
// The row-major indices of the flat `index` into a tensor of `dims`: index mod
// dims[d] for the inner dimensions, the remaining quotient for the outermost (so
// `index` < the product of `dims` is assumed, not checked). Empty for no dims.
std::vector<Expr> Unflatten(Expr index, const std::vector<int64_t>& dims);
// Whether `s` loads from `buffer` anywhere.
bool ReadsBuffer(const Stmt& s, const std::string& buffer);

}  // namespace tuneforge::ir

// The int8 GEMM kernel: compute definition, weight prepack, zero-point write-back.
#include "compiler/templates/quantized_matmul.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "compiler/schedule/compute.h"
#include "compiler/schedule/schedule.h"
#include "compiler/support/status.h"
#include "compiler/templates/matmul_template.h"

namespace tuneforge {

QuantizedEpilogue QuantizedEpilogueOf(const TuningTask& task) {
  QuantizedEpilogue e;
  e.a_zero = task.Param("a_zero");
  const std::string out = task.QuantizedOutput();
  e.out = out == "s32" ? QuantizedOutput::kS32 : out == "f32" ? QuantizedOutput::kF32 : QuantizedOutput::kU8;
  e.scale = task.Param("per_channel") ? QuantizedScale::kPerChannel : QuantizedScale::kPerTensor;
  e.out_zero = task.Param("out_zero");
  e.bias = task.Param("bias") == 1;
  return e;
}

absl::Status CheckQuantizedEpilogue(const QuantizedEpilogue& e, const std::string& what) {
  if (e.a_zero < 0 || e.a_zero > 255) {
    return absl::InvalidArgumentError(what + ": a_zero = " + std::to_string(e.a_zero) + " is outside 0..255");
  }
  if (e.out_zero < 0 || e.out_zero > 255 || (e.out_zero != 0 && e.out != QuantizedOutput::kU8)) {
    return absl::InvalidArgumentError(what + ": out_zero = " + std::to_string(e.out_zero) +
                                      " (a u8 output's zero point, 0..255; 0 for other outputs)");
  }
  return absl::OkStatus();
}

ir::DType QuantizedOutputType(const QuantizedEpilogue& e) {
  return e.out == QuantizedOutput::kS32   ? ir::DType::kInt32
         : e.out == QuantizedOutput::kF32 ? ir::DType::kFloat32
                                          : ir::DType::kUInt8;
}

std::vector<ir::BufferParam> QuantizedEpilogueParams(const QuantizedEpilogue& e, int64_t channels) {
  std::vector<ir::BufferParam> params;
  if (e.dynamic) {
    if (e.bias) params.push_back(ir::BufferParam{"bias", ir::DType::kFloat32, {channels}, false});
    params.push_back(ir::BufferParam{"scale", ir::DType::kFloat32, {channels}, false});
    params.push_back(ir::BufferParam{"A.offset", ir::DType::kInt32, {channels}, false});
    return params;
  }
  if (e.bias) params.push_back(ir::BufferParam{"bias", ir::DType::kInt32, {channels}, false});
  if (e.out != QuantizedOutput::kS32) {
    params.push_back(ir::BufferParam{
        "scale", ir::DType::kFloat32, {e.scale == QuantizedScale::kPerChannel ? channels : 1}, false});
  }
  return params;
}

// The bias is an input like the weights: prepack runs again whenever they change.
ir::Stmt QuantizedChannelOffsets(const QuantizedEpilogue& e, int64_t channels, int64_t reduction,
                                 const std::string& weights,
                                 const std::function<ir::Expr(ir::Expr j, ir::Expr t)>& weight_index,
                                 const std::string& offsets,
                                 const std::function<ir::Expr(ir::Expr j)>& bias_value) {
  using namespace ir;  // NOLINT
  Expr j = Var("s.j"), t = Var("s.t");
  Stmt zero = Store(offsets, j, Cast(DType::kInt32, IntImm(0)));
  Stmt add = Store(offsets, j,
                   Add(Load(offsets, DType::kInt32, j), Cast(DType::kInt32, Load(weights, DType::kInt8, weight_index(j, t)))));
  Expr offset = Mul(Load(offsets, DType::kInt32, j), Cast(DType::kInt32, IntImm(-e.a_zero)));
  if (e.bias) offset = Add(offset, bias_value ? bias_value(j) : Load("bias", DType::kInt32, j));
  return For("s.j", IntImm(channels), channels, ForKind::kSerial,
             Block({zero, For("s.t", IntImm(reduction), reduction, ForKind::kSerial, add), Store(offsets, j, offset)}));
}

ir::Expr QuantizedWriteBack(const QuantizedEpilogue& e, ir::Expr acc, const ir::Expr& channel,
                            const std::string& offsets, const ir::Expr& row) {
  using namespace ir;  // NOLINT
  if (e.dynamic) {
    Expr out = Mul(Cast(DType::kFloat32, Add(acc, Load("A.offset", DType::kInt32, channel))),
                   Load("scale", DType::kFloat32, channel));
    if (e.bias) out = Add(out, Load("bias", DType::kFloat32, channel));
    return e.then && row ? e.then(out, row, channel) : out;
  }
  if (HasChannelOffsets(e)) acc = Add(acc, Load(offsets, DType::kInt32, channel));
  if (e.out == QuantizedOutput::kS32) return acc;
  const bool per_channel = e.scale == QuantizedScale::kPerChannel;
  Expr out = Mul(Cast(DType::kFloat32, acc), Load("scale", DType::kFloat32, per_channel ? channel : IntImm(0)));
  if (e.out == QuantizedOutput::kU8) {
    out = Cast(DType::kUInt8, Add(Call("round", out), FloatImm(static_cast<double>(e.out_zero))));
  }
  return out;
}

namespace {

using namespace ir;  // NOLINT: the expression builders read like math here.

// B.packed[(j / panel)*K*panel + (k / 4)*panel*4 + (j % panel)*4 + k % 4] = B[k*N + j]:
// panels, then groups of four k, then the panel's columns, each column's four bytes
// one word. Serial: it runs once per set of weights.
Stmt PackQuantizedB(int64_t n, int64_t k, int64_t panel) {
  Expr jp = Var("p.j"), q = Var("p.q"), jr = Var("p.r"), t = Var("p.t");
  Expr kk = Add(Mul(q, IntImm(4)), t);
  Stmt s = Store("B.packed",
                 Add(Add(Add(Mul(jp, IntImm(k * panel)), Mul(q, IntImm(4 * panel))), Mul(jr, IntImm(4))), t),
                 Load("B", DType::kInt8, Add(Mul(kk, IntImm(n)), Add(Mul(jp, IntImm(panel)), jr))));
  s = For("p.t", IntImm(4), 4, ForKind::kUnrolled, s);
  s = For("p.r", IntImm(panel), panel, ForKind::kSerial, s);
  s = For("p.q", IntImm(k / 4), k / 4, ForKind::kSerial, s);
  return For("p.j", IntImm(n / panel), n / panel, ForKind::kSerial, s);
}

// The prepack entry: B into panels of `panel` columns, and the column offsets when
// the write-back needs them.
Stmt Prepack(const QuantizedMatmulShape& shape, int64_t panel) {
  Stmt pack = PackQuantizedB(shape.n, shape.k, panel);
  if (!HasChannelOffsets(shape)) return pack;
  const int64_t n = shape.n;
  return Block({pack, QuantizedChannelOffsets(
                          shape, n, shape.k, "B", [n](Expr j, Expr t) { return Add(Mul(t, IntImm(n)), j); },
                          "B.offset")});
}

// The parameters after A and B: bias, scale, the internal packed B (panels of
// `panel` columns) and column sums, and C.
std::vector<BufferParam> ParamsAfterB(const QuantizedMatmulShape& shape, int64_t panel) {
  const int64_t m = shape.m, n = shape.n, k = shape.k;
  std::vector<BufferParam> params = QuantizedEpilogueParams(shape, n);
  BufferParam packed{"B.packed", DType::kInt8, {n / panel, k / 4, panel, 4}, false};
  packed.is_internal = true;
  BufferParam offset{"B.offset", DType::kInt32, {n}, false};
  offset.is_internal = true;
  params.push_back(packed);
  params.push_back(offset);
  params.push_back(BufferParam{"C", QuantizedOutputType(shape), {m, n}, true});
  return params;
}

absl::Status CheckShape(const QuantizedMatmulShape& shape) {
  if (shape.m < 1 || shape.n < 1 || shape.k < 1) return absl::InvalidArgumentError("int8 matmul needs M, N, K >= 1");
  if (shape.k % 4 != 0) {
    return absl::InvalidArgumentError("int8 matmul: K = " + std::to_string(shape.k) +
                                      " is not a multiple of 4 (padding K is not implemented yet)");
  }
  return CheckQuantizedEpilogue(shape, "int8 matmul");
}

}  // namespace

absl::StatusOr<LoweredFunc> QuantizedMatmulKernel(const QuantizedMatmulShape& shape, const Config& config,
                                                  const Target& target, const std::string& name) {
  const int64_t m = shape.m, n = shape.n, k = shape.k;
  RETURN_IF_ERROR(CheckShape(shape));
  if (config.Str("engine", "vnni") == "amx") return QuantizedMatmulAmxKernel(shape, config, target, name);
  const int64_t lanes = config.Int("vec_lanes"), vecs = config.Int("tile_j_vecs");
  const int64_t panel = lanes * vecs;
  if (panel < 1 || n % panel != 0) {
    return absl::InvalidArgumentError("int8 matmul: the register tile width vec_lanes x tile_j_vecs = " +
                                      std::to_string(panel) + " must divide N = " + std::to_string(n));
  }
  const int64_t groups = k / 4;
  if (config.Int("tile_k") > groups || config.Int("tile_k") % config.Int("unroll_k") != 0) {
    return absl::InvalidArgumentError("int8 matmul: tile_k (groups of four k) must be at most K/4 = " +
                                      std::to_string(groups) + " and a multiple of unroll_k");
  }
  if (shape.out != QuantizedOutput::kS32 &&
      (config.Int("tile_k") != groups || config.Str("accumulate") != "registers")) {
    return absl::InvalidArgumentError(
        "int8 matmul with a float32 or u8 output: tile_k must be K/4 = " + std::to_string(groups) +
        " and accumulate registers (the sums are finished in the register tile)");
  }

  ComputeDef def;
  def.name = name;
  // Entry point order: A, B (inserted after lowering), bias, scale, internals, C.
  def.params = {BufferParam{"A", DType::kUInt8, {m, k}, false}};
  for (BufferParam& p : ParamsAfterB(shape, panel)) def.params.push_back(std::move(p));
  def.axes = {{"i", m, false}, {"jp", n / panel, false}, {"jr", panel, false}, {"k", groups, true}};
  Expr i = Var("i"), jp = Var("jp"), jr = Var("jr"), q = Var("k");
  Expr j = Add(Mul(jp, IntImm(panel)), jr);
  def.output_index = Add(Mul(i, IntImm(n)), j);
  def.accumulator = DType::kInt32;
  def.value_is_update = true;
  def.value = Dot4(Accumulator(DType::kInt32), Load("A", DType::kUInt8, Add(Mul(i, IntImm(k)), Mul(q, IntImm(4)))),
                   Load("B.packed", DType::kInt8,
                        Add(Add(Mul(jp, IntImm(k * panel)), Mul(q, IntImm(4 * panel))), Mul(jr, IntImm(4)))));
  const bool scaled = shape.out != QuantizedOutput::kS32;
  const Expr out = QuantizedWriteBack(shape, ReducedValue(DType::kInt32), j, "B.offset", i);
  if (HasChannelOffsets(shape) || scaled) def.epilogue = out;

  Schedule s(std::move(def));
  RETURN_IF_ERROR(ScheduleGemm(&s, config, /*packed=*/true, /*batch=*/0, m, n, target));
  ASSIGN_OR_RETURN(LoweredFunc func, Lower(s, name));
  func.params.insert(func.params.begin() + 1, BufferParam{"B", DType::kInt8, {k, n}, false});

  func.prepack = Prepack(shape, panel);
  return func;
}

absl::StatusOr<LoweredFunc> QuantizedMatmulAmxKernel(const QuantizedMatmulShape& shape, const Config& config,
                                                     const Target& target, const std::string& name) {
  RETURN_IF_ERROR(CheckShape(shape));
  if (!target.HasFeature("amx-int8") || !target.HasFeature("amx-tile")) {
    return absl::InvalidArgumentError("int8 matmul: engine amx needs a target with AMX (amx-tile, amx-int8)");
  }
  const int64_t m = shape.m, n = shape.n, k = shape.k;
  if (n % 16 != 0 || k % 64 != 0) {
    return absl::InvalidArgumentError("int8 matmul: engine amx needs N % 16 == 0 and K % 64 == 0 (N = " +
                                      std::to_string(n) + ", K = " + std::to_string(k) + ")");
  }
  const int64_t block_rows = config.Int("block_rows"), block_cols = config.Int("block_cols");
  if ((block_rows != 16 && block_rows != 32) || (block_cols != 16 && block_cols != 32)) {
    return absl::InvalidArgumentError("int8 matmul: block_rows and block_cols are 16 or 32");
  }
  const bool rows_outer = config.Str("loop_order") == "ij";
  const bool parallel = config.Int("parallel") == 1;
  LoweredFunc func;
  func.name = name;
  func.params = {BufferParam{"A", DType::kUInt8, {m, k}, false}, BufferParam{"B", DType::kInt8, {k, n}, false}};
  for (BufferParam& p : ParamsAfterB(shape, 16)) func.params.push_back(std::move(p));
  const int64_t panel_bytes = k * 16;
  // One block: the sums of rows x cols outputs from (row0, col0) in the local
  // accumulator tile, then their write-back row by row, 16 columns a vector.
  auto block = [&](const Expr& row0, const Expr& col0, int64_t rows, int64_t cols, bool configured) {
    MatrixDotOperands o;
    o.configured = configured;
    o.a = "A";
    o.b = "B.packed";
    o.a_index = Mul(row0, IntImm(k));
    o.b_index = Mul(Div(col0, IntImm(16)), IntImm(panel_bytes));
    o.a_stride = k;
    o.b_panel_stride = panel_bytes;
    o.rows = rows;
    o.cols = cols;
    o.groups = k / 4;
    Expr r = Var("w.r"), c = Var("w.c");
    Expr j = Add(col0, c);
    Stmt store = Store("C", Add(Mul(Add(row0, r), IntImm(n)), j),
                       QuantizedWriteBack(shape, Load("acc", DType::kInt32, Add(Mul(r, IntImm(cols)), c)), j, "B.offset",
                                          Add(row0, r)));
    Stmt write =
        For("w.r", IntImm(rows), rows, ForKind::kSerial, For("w.c", IntImm(cols), cols, ForKind::kVectorized, store));
    return Block({MatrixDot("acc", IntImm(0), o), write});
  };
  // The outer loop walks blocks along one dimension (rows for ij, columns for ji), the
  // inner loop along the other; a dimension's last block may be partial.
  struct Axis {
    std::string var;
    int64_t block, size;
  };
  const Axis rows{"ib", block_rows, m}, cols{"jb", block_cols, n};
  const Axis& outer = rows_outer ? rows : cols;
  const Axis& inner = rows_outer ? cols : rows;
  // (outer, inner) -> (rows, columns).
  auto oriented = [&](auto outer_value, auto inner_value) {
    return rows_outer ? std::make_pair(outer_value, inner_value) : std::make_pair(inner_value, outer_value);
  };
  const Expr outer0 = Mul(Var(outer.var), IntImm(outer.block));
  // The blocks of one outer step, `extent` long in the outer dimension: the inner
  // loop's full blocks on one tile configuration, loaded once (ldtilecfg serialises
  // the tile unit: once per block cost 12 % on BERT's 128 x 768 x 768), and a last,
  // partial block that configures its own tiles. (Issuing the next block's tile work
  // before this block's write-back, two accumulator slots, gained nothing here: 0.80
  // against 0.82 of oneDNN.)
  auto step = [&](int64_t extent) {
    std::vector<Stmt> stmts;
    const int64_t full = inner.size / inner.block, tail = inner.size % inner.block;
    if (full > 0) {
      const auto [r, c] = oriented(extent, inner.block);
      const auto [row0, col0] = oriented(outer0, Mul(Var(inner.var), IntImm(inner.block)));
      stmts.push_back(Allocate("acc", DType::kInt32, r * c,
                               Block({TileConfig(r, c), For(inner.var, IntImm(full), full, ForKind::kSerial,
                                                            block(row0, col0, r, c, true))})));
    }
    if (tail != 0) {
      const auto [r, c] = oriented(extent, tail);
      const auto [row0, col0] = oriented(outer0, IntImm(full * inner.block));
      stmts.push_back(Allocate("acc", DType::kInt32, r * c, block(row0, col0, r, c, false)));
    }
    return Block(stmts);
  };
  const int64_t outer_blocks = (outer.size + outer.block - 1) / outer.block;
  Stmt body = step(outer.block);
  if (outer.size % outer.block != 0) {
    body = IfThenElse(LT(Var(outer.var), IntImm(outer_blocks - 1)), body, step(outer.size % outer.block));
  }
  body = For(outer.var, IntImm(outer_blocks), outer_blocks, parallel ? ForKind::kParallel : ForKind::kSerial, body);
  func.body = body;
  func.prepack = Prepack(shape, 16);
  return func;
}

absl::StatusOr<LoweredFunc> InstantiateDynamicQuantizedMatmulInModel(const TuningTask& task, const Target& target,
                                                                   const Config& config, bool bias,
                                                                   const QuantizedMatmulChain* chain) {
  ASSIGN_OR_RETURN(const Template* tmpl, FindTemplate(task));
  RETURN_IF_ERROR(SpaceOf(*tmpl, task, target)->Check(config));
  QuantizedMatmulShape shape = QuantizedMatmulShapeOf(task);
  if (shape.out != QuantizedOutput::kF32 || shape.scale != QuantizedScale::kPerChannel || shape.bias) {
    return absl::InvalidArgumentError("dynamic int8 matmul: the task must be dtype=u8s8f32 per_channel=1 bias=0");
  }
  shape.a_zero = 0;
  shape.bias = bias;
  shape.dynamic = true;
  if (chain) shape.then = chain->fn;
  ASSIGN_OR_RETURN(LoweredFunc kernel,
                   QuantizedMatmulKernel(shape, config, target, KernelSymbol(task, *tmpl, config) + "_dyn"));
  const int64_t m = shape.m, n = shape.n, k = shape.k;
  constexpr int64_t kLanes = 16;
  LoweredFunc func;
  func.name = kernel.name;
  func.params.push_back(BufferParam{"X", DType::kFloat32, {m, k}, false});
  func.params.push_back(BufferParam{"F", DType::kFloat32, {k, n}, false});
  if (bias) func.params.push_back(BufferParam{"bias", DType::kFloat32, {n}, false});
  func.params.push_back(BufferParam{"wscale", DType::kFloat32, {n}, false});
  if (chain) func.params.insert(func.params.end(), chain->inputs.begin(), chain->inputs.end());
  for (BufferParam p : kernel.params) {
    if (p.name == "bias") continue;
    p.is_internal = !p.is_output;
    func.params.push_back(std::move(p));
  }
  BufferParam part{"q.part", DType::kFloat32, {m, 2}, false};  // each row's max and min
  part.is_internal = true;
  BufferParam value{"q.value", DType::kFloat32, {2}, false};  // scale, zero point
  value.is_internal = true;
  func.params.insert(func.params.end() - 1, part);
  func.params.insert(func.params.end() - 1, value);

  const float inf = std::numeric_limits<float>::infinity();
  const Expr row = Var("d.i");
  auto x_at = [&](const Expr& c) { return Load("X", DType::kFloat32, Add(Mul(row, IntImm(k)), c)); };
  // body(index, lane) for index in [0, extent): kLanes at a time (lane the vector's
  // lane), then the rest one by one (lane 0).
  auto lanes = [&](const std::string& var, int64_t extent, const std::function<Stmt(Expr, Expr)>& body) {
    std::vector<Stmt> s;
    if (extent / kLanes > 0) {
      s.push_back(For(var + "o", IntImm(extent / kLanes), extent / kLanes, ForKind::kSerial,
                      For(var, IntImm(kLanes), kLanes, ForKind::kVectorized,
                          body(Add(Mul(Var(var + "o"), IntImm(kLanes)), Var(var)), Var(var)))));
    }
    if (extent % kLanes != 0) {
      s.push_back(For(var + "t", IntImm(extent % kLanes), extent % kLanes, ForKind::kSerial,
                      body(Add(IntImm(extent / kLanes * kLanes), Var(var + "t")), IntImm(0))));
    }
    return Block(s);
  };
  std::vector<Stmt> body;
  {  // Each row's maximum and minimum, in kLanes partial lanes.
    auto hi = [](const Expr& l) { return Load("d.hi", DType::kFloat32, l); };
    auto lo = [](const Expr& l) { return Load("d.lo", DType::kFloat32, l); };
    const Expr lane = Var("d.l");
    std::vector<Stmt> s;
    s.push_back(For("d.l", IntImm(kLanes), kLanes, ForKind::kVectorized,
                    Block({Store("d.hi", lane, FloatImm(-inf)), Store("d.lo", lane, FloatImm(inf))})));
    s.push_back(lanes("d.c", k, [&](const Expr& c, const Expr& l) {
      return Block({Store("d.hi", l, Max(hi(l), x_at(c))), Store("d.lo", l, Min(lo(l), x_at(c)))});
    }));
    for (int64_t l = 1; l < kLanes; ++l) {
      s.push_back(Store("d.hi", IntImm(0), Max(hi(IntImm(0)), hi(IntImm(l)))));
      s.push_back(Store("d.lo", IntImm(0), Min(lo(IntImm(0)), lo(IntImm(l)))));
    }
    s.push_back(Store("q.part", Mul(row, IntImm(2)), hi(IntImm(0))));
    s.push_back(Store("q.part", Add(Mul(row, IntImm(2)), IntImm(1)), lo(IntImm(0))));
    body.push_back(For("d.i", IntImm(m), m, ForKind::kParallel,
                       Allocate("d.hi", DType::kFloat32, kLanes, Allocate("d.lo", DType::kFloat32, kLanes, Block(s)))));
  }
  {  // The scale and the zero point, as DynamicQuantizeLinear defines them.
    auto v = [](int64_t i) { return Load("q.value", DType::kFloat32, IntImm(i)); };
    const Expr r = Var("d.r");
    std::vector<Stmt> s;
    s.push_back(Store("q.value", IntImm(0), FloatImm(0)));
    s.push_back(Store("q.value", IntImm(1), FloatImm(0)));
    s.push_back(For("d.r", IntImm(m), m, ForKind::kSerial,
                    Block({Store("q.value", IntImm(0), Max(v(0), Load("q.part", DType::kFloat32, Mul(r, IntImm(2))))),
                           Store("q.value", IntImm(1),
                                 Min(v(1), Load("q.part", DType::kFloat32, Add(Mul(r, IntImm(2)), IntImm(1)))))})));
    // value[0] = range = max - min (both clamped through 0 above); value[1] = min.
    s.push_back(Store("q.value", IntImm(0), Sub(v(0), v(1))));
    s.push_back(Store("q.value", IntImm(0),
                      Select(EQ(v(0), FloatImm(0)), FloatImm(1), Div(v(0), FloatImm(255)))));
    s.push_back(Store("q.value", IntImm(1),
                      Min(Max(Call("round", Div(Sub(FloatImm(0), v(1)), v(0))), FloatImm(0)), FloatImm(255))));
    body.push_back(Block(s));
  }
  {  // X to uint8, rows in parallel.
    const Expr scale = Load("q.value", DType::kFloat32, IntImm(0)), zero = Load("q.value", DType::kFloat32, IntImm(1));
    body.push_back(For("d.i", IntImm(m), m, ForKind::kParallel, lanes("d.c", k, [&](const Expr& c, const Expr&) {
      return Store("A", Add(Mul(row, IntImm(k)), c),
                   Cast(DType::kUInt8, Min(Max(Add(Call("round", Div(x_at(c), scale)), zero), FloatImm(0)),
                                           FloatImm(255))));
    })));
    // The write-back's per-column vectors.
    body.push_back(lanes("d.j", n, [&](const Expr& j, const Expr&) {
      return Block({Store("scale", j, Mul(scale, Load("wscale", DType::kFloat32, j))),
                    Store("A.offset", j,
                          Mul(Cast(DType::kInt32, Sub(FloatImm(0), zero)), Load("B.offset", DType::kInt32, j)))});
    }));
  }
  body.push_back(kernel.body);
  func.body = Block(body);
  // At load: F to int8 (its values are integers), packed, and its column sums.
  const Expr kk = Var("f.k"), jj = Var("f.j");
  Stmt convert = For("f.k", IntImm(k), k, ForKind::kSerial,
                     For("f.j", IntImm(n), n, ForKind::kSerial,
                         Store("B", Add(Mul(kk, IntImm(n)), jj),
                               Cast(DType::kInt8, Call("round", Load("F", DType::kFloat32, Add(Mul(kk, IntImm(n)), jj)))))));
  Stmt sums = For(
      "f.j", IntImm(n), n, ForKind::kSerial,
      Block({Store("B.offset", jj, Cast(DType::kInt32, IntImm(0))),
             For("f.k", IntImm(k), k, ForKind::kSerial,
                 Store("B.offset", jj,
                       Add(Load("B.offset", DType::kInt32, jj),
                           Cast(DType::kInt32, Load("B", DType::kInt8, Add(Mul(kk, IntImm(n)), jj))))))}));
  func.prepack = Block({convert, kernel.prepack, sums});
  return func;
}

QuantizedMatmulShape QuantizedMatmulShapeOf(const TuningTask& task) {
  QuantizedMatmulShape shape;
  static_cast<QuantizedEpilogue&>(shape) = QuantizedEpilogueOf(task);
  shape.m = task.Param("M"), shape.n = task.Param("N"), shape.k = task.Param("K");
  return shape;
}

namespace {

// The float32 GEMM's space over K/4 groups, B packed or not (for its heuristics).
ConfigSpace GroupedGemmSpace(const TuningTask& task, const Target& target, std::vector<nlohmann::json> pack) {
  return GemmSpace(task.Param("M"), task.Param("N"), task.Param("K") / 4, target,
                   {"pack_b", std::move(pack), "B in panels of the register tile's width (always, for int8)"});
}

bool UsesAmx(const TuningTask& task, const Target& target) {
  return target.HasFeature("amx-int8") && target.HasFeature("amx-tile") && task.Param("N") % 16 == 0 &&
         task.Param("K") % 64 == 0;
}

}  // namespace

ConfigSpace QuantizedMatmulTemplate::Space(const TuningTask& task, const Target& target) const {
  if (UsesAmx(task, target)) {
    std::vector<Knob> knobs = {
        {"engine", {"amx"}, "the matrix unit (AMX tiles); vnni where the target has none"},
        {"block_rows", task.Param("M") > 16 ? std::vector<nlohmann::json>{16, 32} : std::vector<nlohmann::json>{16},
         "rows of C per block: one or two 16-row tiles"},
        {"block_cols", task.Param("N") > 16 ? std::vector<nlohmann::json>{16, 32} : std::vector<nlohmann::json>{16},
         "columns of C per block: one or two 16-column tiles"},
        {"loop_order", {"ij", "ji"}, "row blocks outer (ij) or column blocks outer (ji)"},
        {"parallel", {0, 1}, "run the outer block loop on the runtime thread pool"},
    };
    return ConfigSpace(std::move(knobs), [](const Config&) { return absl::OkStatus(); });
  }
  auto gemm = std::make_shared<ConfigSpace>(GroupedGemmSpace(task, target, {1}));
  const bool finished_in_registers = task.QuantizedOutput() != "s32";
  std::vector<Knob> knobs;
  for (Knob k : gemm->knobs()) {
    if (k.name == "prefetch_k" || k.name == "pack_a") continue;
    if (finished_in_registers && k.name == "tile_k") k.values = {task.Param("K") / 4};
    if (finished_in_registers && k.name == "accumulate") k.values = {"registers"};
    if (k.name == "tile_k") k.doc = "groups of four k in a cache tile's reduction";
    if (k.name == "vec_lanes") k.doc = "int32 accumulator lanes per vector (1 = scalar)";
    knobs.push_back(std::move(k));
  }
  return ConfigSpace(std::move(knobs), [gemm](const Config& c) { return gemm->Check(c); });
}

Config QuantizedMatmulTemplate::Naive(const TuningTask& task, const Target& target) const {
  if (UsesAmx(task, target)) {
    return Config(nlohmann::json{
        {"engine", "amx"}, {"block_rows", 16}, {"block_cols", 16}, {"loop_order", "ij"}, {"parallel", 0}});
  }
  return Config(nlohmann::json{{"tile_i_reg", 1},
                               {"vec_lanes", 1},
                               {"tile_j_vecs", 1},
                               {"tile_i_blocks", 1},
                               {"tile_j_blocks", 1},
                               {"tile_k", task.Param("K") / 4},
                               {"unroll_k", 1},
                               {"loop_order", "ijk"},
                               {"parallel", 0},
                               {"accumulate", task.QuantizedOutput() == "s32" ? "memory" : "registers"},
                               {"pack_b", 1}});
}

std::vector<Config> QuantizedMatmulTemplate::Heuristics(const TuningTask& task, const Target& target) const {
  // The float32 GEMM's picks over K/4 groups, packed, with the reduction whole where
  // the output needs it.
  const ConfigSpace space = Space(task, target);
  std::vector<Config> out;
  if (UsesAmx(task, target)) {
    // Two by two tiles (each A and B tile used twice per load), the outer loop over
    // the longer side on every thread; then the other order and smaller blocks.
    const bool rows_first = task.Param("M") >= task.Param("N");
    for (int64_t rows : {32, 16}) {
      for (int64_t cols : {32, 16}) {
        for (const char* order : rows_first ? std::vector<const char*>{"ij", "ji"} : std::vector<const char*>{"ji", "ij"}) {
          Config c(nlohmann::json{{"engine", "amx"}, {"block_rows", rows}, {"block_cols", cols}, {"loop_order", order},
                                  {"parallel", target.num_threads > 1 ? 1 : 0}});
          if (space.Check(c).ok() && std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
        }
      }
    }
    return out;
  }
  for (const Config& c : GemmHeuristics(GroupedGemmSpace(task, target, {0, 1}), target, "pack_b", task.Param("M"),
                                        task.Param("N"), 0)) {
    nlohmann::json v = c.values();
    v["pack_b"] = 1;
    if (task.QuantizedOutput() != "s32") v["tile_k"] = task.Param("K") / 4, v["accumulate"] = "registers";
    for (const char* unused : {"prefetch_k", "pack_a"}) v.erase(unused);
    Config config(v);
    if (space.Check(config).ok() && std::find(out.begin(), out.end(), config) == out.end()) out.push_back(config);
  }
  return out;
}

absl::StatusOr<ir::LoweredFunc> QuantizedMatmulTemplate::Instantiate(const TuningTask& task, const Target& target,
                                                                     const Config& config) const {
  RETURN_IF_ERROR(SpaceOf(*this, task, target)->Check(config));
  return QuantizedMatmulKernel(QuantizedMatmulShapeOf(task), config, target, KernelSymbol(task, *this, config));
}

}  // namespace tuneforge

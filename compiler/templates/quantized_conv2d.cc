// The int8 convolution on AMX: layout transforms, the implicit-GEMM block loop nest.
#include "compiler/templates/quantized_conv2d.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "compiler/support/status.h"
#include "compiler/templates/loop_nest.h"

namespace tuneforge {

int64_t QuantizedConvShape::cp() const {
  int64_t channels = (c + 3) / 4 * 4;
  while (s * channels % 64 != 0) channels += 4;
  return channels;
}

QuantizedConvShape QuantizedConvShapeOf(const TuningTask& task) {
  QuantizedConvShape shape;
  static_cast<QuantizedEpilogue&>(shape) = QuantizedEpilogueOf(task);
  shape.n = task.Param("N"), shape.c = task.Param("C"), shape.h = task.Param("H"), shape.w = task.Param("W");
  shape.k = task.Param("K"), shape.r = task.Param("R"), shape.s = task.Param("S");
  shape.stride = task.Param("stride"), shape.pad = task.Param("pad");
  return shape;
}

std::vector<int64_t> QuantizedConvBlockRows(int64_t ow) {
  std::vector<int64_t> rows;
  for (int64_t most : {16, 32}) {
    const int64_t blocks = (ow + most - 1) / most;
    rows.push_back(std::min(most, ow));
    rows.push_back((ow + blocks - 1) / blocks);
  }
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  return rows;
}

namespace {

using namespace ir;  // NOLINT: the expression builders read like math here.

// I -> I.padded [N, Hp, Wp, Cp]: a_zero everywhere (border and extra channels), then
// the image. Written in full every time: in a model the buffer may be shared.
Stmt PadInput(const QuantizedConvShape& d) {
  const int64_t cp = d.cp();
  const std::vector<int64_t> dims = {d.n, d.hp(), d.wp(), cp};
  Stmt fill = Loops({{"p.n", d.n}, {"p.h", d.hp()}, {"p.w", d.wp()}, {"p.c", cp}},
                    Store("I.padded", Flat({Var("p.n"), Var("p.h"), Var("p.w"), Var("p.c")}, dims),
                          Cast(DType::kUInt8, IntImm(d.a_zero))));
  Stmt copy = Loops({{"i.n", d.n}, {"i.c", d.c}, {"i.h", d.h}, {"i.w", d.w}},
                    Store("I.padded",
                          Flat({Var("i.n"), Add(Var("i.h"), IntImm(d.pad)), Add(Var("i.w"), IntImm(d.pad)), Var("i.c")},
                               dims),
                          Load("I", DType::kUInt8, Flat({Var("i.n"), Var("i.c"), Var("i.h"), Var("i.w")},
                                                        {d.n, d.c, d.h, d.w}))));
  return Block({fill, copy});
}

// F -> F.packed [K/16][R][S*Cp/4][16][4]: byte x = s*Cp + c of filter row r for output
// channel k sits at group x/4, lane k%16, byte x%4; the extra channels' bytes are 0.
Stmt PackFilter(const QuantizedConvShape& d) {
  const int64_t cp = d.cp(), row_groups = d.s * cp / 4;
  const std::vector<int64_t> dims = {d.k / 16, d.r, row_groups, 16, 4};
  std::vector<Stmt> parts;
  if (cp != d.c) {
    parts.push_back(Loops({{"z.x", d.k * d.r * d.s * cp}},
                          Store("F.packed", Var("z.x"), Cast(DType::kInt8, IntImm(0)))));
  }
  Expr k = Var("f.k"), c = Var("f.c"), r = Var("f.r"), s = Var("f.s");
  Expr x = Add(Mul(s, IntImm(cp)), c);
  parts.push_back(Loops({{"f.k", d.k}, {"f.c", d.c}, {"f.r", d.r}, {"f.s", d.s}},
                        Store("F.packed",
                              Flat({Div(k, IntImm(16)), r, Div(x, IntImm(4)), Mod(k, IntImm(16)), Mod(x, IntImm(4))},
                                   dims),
                              Load("F", DType::kInt8, Flat({k, c, r, s}, {d.k, d.c, d.r, d.s})))));
  return Block(parts);
}

Stmt Prepack(const QuantizedConvShape& d) {
  std::vector<Stmt> parts = {PadInput(d), PackFilter(d)};
  if (HasChannelOffsets(d)) {
    const int64_t reduction = d.c * d.r * d.s;
    parts.push_back(QuantizedChannelOffsets(
        d, d.k, reduction, "F", [reduction](Expr j, Expr t) { return Add(Mul(j, IntImm(reduction)), t); },
        "F.offset"));
  }
  return Block(parts);
}

// O.nhwc -> O (NCHW).
Stmt Unpack(const QuantizedConvShape& d) {
  const DType type = QuantizedOutputType(d);
  return Loops({{"u.n", d.n}, {"u.k", d.k}, {"u.h", d.oh()}, {"u.w", d.ow()}},
               Store("O", Flat({Var("u.n"), Var("u.k"), Var("u.h"), Var("u.w")}, {d.n, d.k, d.oh(), d.ow()}),
                     Load("O.nhwc", type,
                          Flat({Var("u.n"), Var("u.h"), Var("u.w"), Var("u.k")}, {d.n, d.oh(), d.ow(), d.k}))));
}

absl::Status CheckConv(const QuantizedConvShape& d, const Target& target) {
  RETURN_IF_ERROR(CheckQuantizedEpilogue(d, "int8 convolution"));
  if (d.n < 1 || d.c < 1 || d.h < 1 || d.w < 1 || d.k < 1 || d.r < 1 || d.s < 1 || d.stride < 1 || d.pad < 0 ||
      d.oh() < 1 || d.ow() < 1) {
    return absl::InvalidArgumentError("int8 convolution: bad shape");
  }
  if (!target.HasFeature("amx-int8") || !target.HasFeature("amx-tile")) {
    return absl::InvalidArgumentError(
        "int8 convolution: only the AMX kernel exists so far, and target " + target.ToString() +
        " has no AMX (amx-tile, amx-int8); the vpdpbusd kernel for other CPUs is not implemented yet");
  }
  if (d.k % 16 != 0) {
    return absl::InvalidArgumentError("int8 convolution: K = " + std::to_string(d.k) +
                                      " output channels must be a multiple of 16 (the AMX kernel's panels)");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<LoweredFunc> QuantizedConv2dAmxKernel(const QuantizedConvShape& d, const Config& config,
                                                     const Target& target, const std::string& name) {
  RETURN_IF_ERROR(CheckConv(d, target));
  const int64_t block_rows = config.Int("block_rows"), block_cols = config.Int("block_cols");
  if (block_rows < 1 || block_rows > 32) return absl::InvalidArgumentError("int8 convolution: block_rows is 1..32");
  if ((block_cols != 16 && block_cols != 32) || d.k % block_cols != 0) {
    return absl::InvalidArgumentError("int8 convolution: block_cols is 16 or 32 and divides K = " +
                                      std::to_string(d.k));
  }
  const std::string order = config.Str("loop_order");
  if (order != "pk" && order != "kp") return absl::InvalidArgumentError("int8 convolution: loop_order is pk or kp");
  const bool parallel = config.Int("parallel") == 1;
  const int64_t cp = d.cp(), oh = d.oh(), ow = d.ow(), panel_bytes = d.r * d.s * cp * 16;
  const DType out_type = QuantizedOutputType(d);

  LoweredFunc func;
  func.name = name;
  func.params = {BufferParam{"I", DType::kUInt8, {d.n, d.c, d.h, d.w}, false},
                 BufferParam{"F", DType::kInt8, {d.k, d.c, d.r, d.s}, false}};
  for (BufferParam& p : QuantizedEpilogueParams(d, d.k)) func.params.push_back(std::move(p));
  auto internal = [&func](std::string buffer, DType type, std::vector<int64_t> shape) {
    BufferParam p{std::move(buffer), type, std::move(shape), false};
    p.is_internal = true;
    func.params.push_back(std::move(p));
  };
  internal("I.padded", DType::kUInt8, {d.n, d.hp(), d.wp(), cp});
  internal("F.packed", DType::kInt8, {d.k / 16, d.r, d.s * cp / 4, 16, 4});
  internal("F.offset", DType::kInt32, {d.k});
  internal("O.nhwc", out_type, {d.n, oh, ow, d.k});
  func.params.push_back(BufferParam{"O", out_type, {d.n, d.k, oh, ow}, true});

  // Pixel row p (= n*OH + oh), channel block kb: `rows` outputs from column ow0, the
  // sums over R filter rows of S*Cp bytes each, then their write-back.
  Expr p = Var("p"), kb = Var("kb");
  auto block = [&](const Expr& ow0, int64_t rows) {
    MatrixDotOperands o;
    o.configured = true;
    o.a = "I.padded";
    o.b = "F.packed";
    Expr n = Div(p, IntImm(oh)), y = Mod(p, IntImm(oh));
    o.a_index = Mul(Add(Mul(Add(Mul(n, IntImm(d.hp())), Mul(y, IntImm(d.stride))), IntImm(d.wp())),
                        Mul(ow0, IntImm(d.stride))),
                    IntImm(cp));
    o.a_stride = d.stride * cp;
    o.segments = d.r;
    o.a_segment_stride = d.wp() * cp;
    o.groups = d.s * cp / 4;
    o.b_index = Mul(kb, IntImm(block_cols / 16 * panel_bytes));
    o.b_panel_stride = panel_bytes;
    o.rows = rows;
    o.cols = block_cols;
    Expr i = Var("w.r"), j = Var("w.c");
    Expr channel = Add(Mul(kb, IntImm(block_cols)), j);
    Stmt store = Store("O.nhwc", Add(Mul(Add(Add(Mul(p, IntImm(ow)), ow0), i), IntImm(d.k)), channel),
                       QuantizedWriteBack(d, Load("acc", DType::kInt32, Add(Mul(i, IntImm(block_cols)), j)), channel,
                                          "F.offset"));
    Stmt write = For("w.r", IntImm(rows), rows, ForKind::kSerial,
                     For("w.c", IntImm(block_cols), block_cols, ForKind::kVectorized, store));
    return Allocate("acc", DType::kInt32, rows * block_cols, Block({MatrixDot("acc", IntImm(0), o), write}));
  };
  // One outer iteration: every full block of its inner loop on one tile configuration
  // (ldtilecfg serialises the tile unit: a few hundred cycles), then the rows' shorter
  // last blocks on another.
  const bool pixels_outer = order == "pk";
  const LoopSpec pixels{"p", d.n * oh}, channels{"kb", d.k / block_cols};
  const LoopSpec& inner = pixels_outer ? channels : pixels;
  const int64_t full = ow / block_rows, tail = ow % block_rows;
  std::vector<Stmt> steps;
  if (full > 0) {
    Stmt blocks = For("ob", IntImm(full), full, ForKind::kSerial, block(Mul(Var("ob"), IntImm(block_rows)), block_rows));
    steps.push_back(TileConfig(block_rows, block_cols));
    steps.push_back(For(inner.var, IntImm(inner.extent), inner.extent, ForKind::kSerial, blocks));
  }
  if (tail > 0) {
    steps.push_back(TileConfig(tail, block_cols));
    steps.push_back(For(inner.var, IntImm(inner.extent), inner.extent, ForKind::kSerial,
                        block(IntImm(full * block_rows), tail)));
  }
  const LoopSpec& outer = pixels_outer ? pixels : channels;
  func.body = For(outer.var, IntImm(outer.extent), outer.extent, parallel ? ForKind::kParallel : ForKind::kSerial,
                  Block(steps));
  func.prepack = Prepack(d);
  func.unpack = Unpack(d);
  return func;
}

ConfigSpace QuantizedConv2dTemplate::Space(const TuningTask& task, const Target&) const {
  const QuantizedConvShape d = QuantizedConvShapeOf(task);
  std::vector<nlohmann::json> rows, cols = {16};
  for (int64_t r : QuantizedConvBlockRows(d.ow())) rows.push_back(r);
  if (d.k % 32 == 0) cols.push_back(32);
  std::vector<Knob> knobs = {
      {"engine", {"amx"}, "the matrix unit (AMX tiles); the only kernel so far"},
      {"block_rows", rows, "output pixels of one row per block (one or two tiles of up to 16)"},
      {"block_cols", cols, "output channels per block: one or two 16-channel tiles"},
      {"loop_order", {"pk", "kp"}, "pixel rows outer (pk) or output-channel blocks outer (kp)"},
      {"parallel", {0, 1}, "run the outer loop on the runtime thread pool"},
  };
  return ConfigSpace(std::move(knobs), [](const Config&) { return absl::OkStatus(); });
}

Config QuantizedConv2dTemplate::Naive(const TuningTask& task, const Target&) const {
  return Config(nlohmann::json{{"engine", "amx"},
                               {"block_rows", std::min<int64_t>(16, QuantizedConvShapeOf(task).ow())},
                               {"block_cols", 16},
                               {"loop_order", "pk"},
                               {"parallel", 0}});
}

std::vector<Config> QuantizedConv2dTemplate::Heuristics(const TuningTask& task, const Target& target) const {
  // Rows that split the output row evenly and are the longest first (each B tile used
  // for more rows, no short last block), two channel tiles, pixel rows on every thread.
  const QuantizedConvShape d = QuantizedConvShapeOf(task);
  std::vector<int64_t> rows = QuantizedConvBlockRows(d.ow());
  std::stable_sort(rows.begin(), rows.end(), [&](int64_t a, int64_t b) {
    const bool a_even = d.ow() % a == 0, b_even = d.ow() % b == 0;
    return a_even != b_even ? a_even : a > b;
  });
  const ConfigSpace space = Space(task, target);
  std::vector<Config> out;
  for (const char* order : {"pk", "kp"}) {
    for (int64_t r : rows) {
      for (int64_t c : {32, 16}) {
        Config config(nlohmann::json{{"engine", "amx"}, {"block_rows", r}, {"block_cols", c}, {"loop_order", order},
                                     {"parallel", target.num_threads > 1 ? 1 : 0}});
        if (space.Check(config).ok()) out.push_back(config);
      }
    }
  }
  return out;
}

absl::StatusOr<ir::LoweredFunc> QuantizedConv2dTemplate::Instantiate(const TuningTask& task, const Target& target,
                                                                     const Config& config) const {
  RETURN_IF_ERROR(SpaceOf(*this, task, target)->Check(config));
  return QuantizedConv2dAmxKernel(QuantizedConvShapeOf(task), config, target, KernelSymbol(task, *this, config));
}

}  // namespace tuneforge

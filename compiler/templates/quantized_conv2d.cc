// The int8 convolution on AMX: layout transforms, the implicit-GEMM block loop nest.
#include "compiler/templates/quantized_conv2d.h"

#include <algorithm>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "compiler/support/status.h"
#include "compiler/templates/loop_nest.h"

namespace tuneforge {

int64_t QuantizedConvShape::cp() const {
  if (depthwise) return c;
  int64_t channels = (c + 3) / 4 * 4;
  if (s * channels < 64) return channels;  // one shorter tile row per filter row
  while (s * channels % 64 != 0) channels += 4;
  return channels;
}

QuantizedConvShape QuantizedConvShapeOf(const TuningTask& task) {
  QuantizedConvShape shape;
  static_cast<QuantizedEpilogue&>(shape) = QuantizedEpilogueOf(task);
  shape.n = task.Param("N"), shape.c = task.Param("C"), shape.h = task.Param("H"), shape.w = task.Param("W");
  shape.depthwise = task.op() == "qdepthwise_conv2d";
  shape.k = shape.depthwise ? shape.c : task.Param("K");
  shape.r = task.Param("R"), shape.s = task.Param("S");
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

// `body(w)` for w < extent: in vectors of `lanes` (a vectorized loop inside a serial
// one), then the rest one at a time.
Stmt VectorRows(const std::string& var, int64_t extent, int64_t lanes, const std::function<Stmt(Expr)>& body) {
  std::vector<Stmt> parts;
  const int64_t full = extent / lanes, tail = extent % lanes;
  if (full > 0) {
    parts.push_back(For(var + ".b", IntImm(full), full, ForKind::kSerial,
                        For(var + ".l", IntImm(lanes), lanes, ForKind::kVectorized,
                            body(Add(Mul(Var(var + ".b"), IntImm(lanes)), Var(var + ".l"))))));
  }
  if (tail > 0) {
    parts.push_back(For(var + ".t", IntImm(tail), tail, ForKind::kSerial, body(Add(IntImm(full * lanes), Var(var + ".t")))));
  }
  return Block(parts);
}

// I -> I.padded [N, Hp, Wp, Cp]: the border's pixels (every channel) a_zero, then the
// image. The extra channels of the interior (Cp > C) are never written: their
// weights are zero, so any byte there adds nothing. Written every time: in a model
// the buffer's memory is shared with other steps between runs.
Stmt PadInput(const QuantizedConvShape& d) {
  const int64_t cp = d.cp();
  const std::vector<int64_t> dims = {d.n, d.hp(), d.wp(), cp};
  std::vector<Stmt> parts;
  auto border = [&](int64_t h0, int64_t rows, int64_t w0, int64_t cols) {
    if (rows <= 0 || cols <= 0) return;
    parts.push_back(Loops({{"p.n", d.n}, {"p.h", rows}, {"p.w", cols}, {"p.c", cp}},
                          Store("I.padded",
                                Flat({Var("p.n"), Add(Var("p.h"), IntImm(h0)), Add(Var("p.w"), IntImm(w0)), Var("p.c")},
                                     dims),
                                Cast(DType::kUInt8, IntImm(d.a_zero)))));
  };
  border(0, d.pad, 0, d.wp());
  border(d.pad + d.h, d.pad, 0, d.wp());
  border(d.pad, d.h, 0, d.pad);
  border(d.pad, d.h, d.pad + d.w, d.pad);
  const Expr at = Flat({Var("i.n"), Var("i.c"), Var("i.h"), Var("i.w")}, {d.n, d.c, d.h, d.w});
  // Inside a model: the float32 values in_scale x (q - a_zero) back to q, exactly
  // (times the reciprocal: within an ulp of q - a_zero, which round() removes).
  const Expr value =
      d.float_boundary
          ? Cast(DType::kUInt8, Add(Call("round", Mul(Load("I", DType::kFloat32, at), FloatImm(1.0 / d.in_scale))),
                                    FloatImm(static_cast<double>(d.a_zero))))
          : Load("I", DType::kUInt8, at);
  auto store = [&](const Expr& w) {
    return Store("I.padded",
                 Flat({Var("i.n"), Add(Var("i.h"), IntImm(d.pad)), Add(w, IntImm(d.pad)), Var("i.c")}, dims),
                 Substitute(value, {{"i.w", w}}));
  };
  // Pixels outer, channels inner: each pixel's channels are one run of bytes, and the
  // threads (the outer loop runs in parallel in a model) write rows of their own.
  // (Rows of floats as vectors, channels outer, took 3x longer: threads writing
  // neighbouring bytes of one cache line.)
  if (d.float_boundary && d.io_lanes > 1 && d.c < d.io_lanes) {
    // Fewer channels than a vector (an image's 3): each row's pixels as vectors, the
    // channels of a row in turn; still a row per thread.
    parts.push_back(Loops({{"i.n", d.n}, {"i.h", d.h}, {"i.c", d.c}}, VectorRows("i.w", d.w, d.io_lanes, store)));
  } else if (d.float_boundary && d.io_lanes > 1) {  // every inference in a model: channels as vectors
    parts.push_back(Loops({{"i.n", d.n}, {"i.h", d.h}, {"i.w", d.w}},
                          VectorRows("i.c", d.c, d.io_lanes, [&](const Expr& c) {
                            return Substitute(store(Var("i.w")), {{"i.c", c}});
                          })));
  } else {
    parts.push_back(Loops({{"i.n", d.n}, {"i.h", d.h}, {"i.w", d.w}, {"i.c", d.c}}, store(Var("i.w"))));
  }
  return Block(parts);
}

// Filter element `index` of output channel `k` as an int8 value: the input itself, or
// inside a model round(F / wscale[k]) of the dequantized float32 weights.
Expr FilterValue(const QuantizedConvShape& d, const Expr& index, const Expr& k) {
  if (!d.float_boundary) return Load("F", DType::kInt8, index);
  return Cast(DType::kInt8, Call("round", Div(Load("F", DType::kFloat32, index), Load("wscale", DType::kFloat32, k))));
}

// Inside a model, the int32 bias of channel j from the dequantized float32 one.
std::function<Expr(Expr)> BiasValue(const QuantizedConvShape& d) {
  if (!d.float_boundary) return nullptr;
  const double in_scale = d.in_scale;
  return [in_scale](Expr j) {
    return Cast(DType::kInt32, Call("round", Div(Load("bias", DType::kFloat32, j),
                                                 Mul(FloatImm(in_scale), Load("wscale", DType::kFloat32, j)))));
  };
}

// F -> F.packed [Kp/16][R][S*Cp/4][16][4]: byte x = s*Cp + c of filter row r for output
// channel k sits at group x/4, lane k%16, byte x%4; the extra channels' bytes (input
// channels past C, output channels past K) are 0.
Stmt PackFilter(const QuantizedConvShape& d) {
  const int64_t cp = d.cp(), row_groups = d.s * cp / 4;
  const std::vector<int64_t> dims = {d.kp() / 16, d.r, row_groups, 16, 4};
  std::vector<Stmt> parts;
  if (cp != d.c || d.kp() != d.k) {
    parts.push_back(Loops({{"z.x", d.kp() * d.r * d.s * cp}},
                          Store("F.packed", Var("z.x"), Cast(DType::kInt8, IntImm(0)))));
  }
  Expr k = Var("f.k"), c = Var("f.c"), r = Var("f.r"), s = Var("f.s");
  Expr x = Add(Mul(s, IntImm(cp)), c);
  parts.push_back(Loops({{"f.k", d.k}, {"f.c", d.c}, {"f.r", d.r}, {"f.s", d.s}},
                        Store("F.packed",
                              Flat({Div(k, IntImm(16)), r, Div(x, IntImm(4)), Mod(k, IntImm(16)), Mod(x, IntImm(4))},
                                   dims),
                              FilterValue(d, Flat({k, c, r, s}, {d.k, d.c, d.r, d.s}), k))));
  return Block(parts);
}

Stmt Prepack(const QuantizedConvShape& d) {
  std::vector<Stmt> parts = {PadInput(d), PackFilter(d)};
  if (HasChannelOffsets(d)) {
    // The filter sums from F.packed (the int8 values, whatever F's type): reduction
    // index t = (c, r, s) sits at byte s*Cp + c of filter row r.
    const int64_t reduction = d.c * d.r * d.s, rs = d.r * d.s, cp = d.cp();
    const std::vector<int64_t> dims = {d.kp() / 16, d.r, d.s * cp / 4, 16, 4};
    const int64_t r_count = d.r, s_count = d.s;
    parts.push_back(QuantizedChannelOffsets(
        d, d.k, reduction, "F.packed",
        [=](Expr j, Expr t) {
          Expr c = Div(t, IntImm(rs)), r = Mod(Div(t, IntImm(s_count)), IntImm(r_count)), s = Mod(t, IntImm(s_count));
          Expr x = Add(Mul(s, IntImm(cp)), c);
          return Flat({Div(j, IntImm(16)), r, Div(x, IntImm(4)), Mod(j, IntImm(16)), Mod(x, IntImm(4))}, dims);
        },
        "F.offset", BiasValue(d)));
  }
  return Block(parts);
}

// `value` quantized to uint8 (scale, zero), as a float32 whole number: the model's
// Div, Round, Add, Clip.
Expr QuantizeU8(const Expr& value, double scale, int64_t zero) {
  return Min(Max(Add(Call("round", Div(value, FloatImm(scale))), FloatImm(static_cast<double>(zero))), FloatImm(0)),
             FloatImm(255));
}

// The round trip of `value` through that quantization: then Sub, Mul.
Expr RoundTrip(const Expr& value, double scale, int64_t zero) {
  return Mul(Sub(QuantizeU8(value, scale, zero), FloatImm(static_cast<double>(zero))), FloatImm(scale));
}

// O.nhwc -> O (NCHW). With a max-pool, first O.nhwc -> P.nhwc [N, PH, PW, K], each
// pixel's channels as vectors (the window's max of the integers: dequantization is
// increasing), then P.nhwc -> O.
Stmt Unpack(const QuantizedConvShape& d) {
  const DType type = QuantizedOutputType(d);
  std::vector<Stmt> parts;
  std::string from = "O.nhwc";
  if (d.pool) {
    const QuantizedMaxPool& mp = *d.pool;
    auto clamped = [](Expr x, int64_t extent) { return Min(Max(x, IntImm(0)), IntImm(extent - 1)); };
    Expr value;
    for (int64_t i = 0; i < mp.k_h; ++i) {
      for (int64_t j = 0; j < mp.k_w; ++j) {
        Expr y = clamped(Add(Mul(Var("q.h"), IntImm(mp.stride_h)), IntImm(i - mp.pad_h)), d.oh());
        Expr x = clamped(Add(Mul(Var("q.w"), IntImm(mp.stride_w)), IntImm(j - mp.pad_w)), d.ow());
        Expr q = Cast(DType::kInt32, Load("O.nhwc", type, Flat({Var("q.n"), y, x, Var("q.k")}, {d.n, d.oh(), d.ow(), d.k})));
        value = value ? Max(value, q) : q;
      }
    }
    auto store = [&](const Expr& k) {
      return Store("P.nhwc", Flat({Var("q.n"), Var("q.h"), Var("q.w"), k}, {d.n, d.out_h(), d.out_w(), d.k}),
                   Cast(type, Substitute(value, {{"q.k", k}})));
    };
    parts.push_back(Loops({{"q.n", d.n}, {"q.h", d.out_h()}, {"q.w", d.out_w()}},
                          VectorRows("q.k", d.k, std::max<int64_t>(1, d.io_lanes), store)));
    from = "P.nhwc";
  }
  Expr value = Load(from, type, Flat({Var("u.n"), Var("u.h"), Var("u.w"), Var("u.k")}, {d.n, d.out_h(), d.out_w(), d.k}));
  const Expr at = Flat({Var("u.n"), Var("u.k"), Var("u.h"), Var("u.w")}, {d.n, d.k, d.out_h(), d.out_w()});
  if (d.float_boundary) {  // out_scale x (q - out_zero), as the model's round trip computes it
    value = Mul(Sub(Cast(DType::kFloat32, value), FloatImm(static_cast<double>(d.out_zero))), FloatImm(d.out_scale));
  }
  if (d.residual) {  // + R, relu, and the sum's round trip, as the model's operators compute them
    Expr r = Load("R", DType::kFloat32, at);
    if (!d.residual_from.empty()) {
      const int64_t hp = d.oh() + 2 * d.residual_pad, wp = d.ow() + 2 * d.residual_pad;
      Expr index = Flat({Var("u.n"), Add(Var("u.h"), IntImm(d.residual_pad)), Add(Var("u.w"), IntImm(d.residual_pad)),
                         Var("u.k")},
                        {d.n, hp, wp, d.residual_cp});
      r = Mul(Sub(Cast(DType::kFloat32, Load(d.residual_from, DType::kUInt8, index)),
                  FloatImm(static_cast<double>(d.residual_zero))),
              FloatImm(d.residual_scale));
    }
    value = Add(value, r);
    if (d.residual_relu) value = Max(value, FloatImm(0));
    if (!d.into.empty()) {
      // The sum's integers into the next layer's padded input, each pixel's channels
      // as vectors.
      const Expr q = Cast(DType::kUInt8, QuantizeU8(value, d.sum_scale, d.sum_zero));
      const int64_t hp = d.oh() + 2 * d.into_pad, wp = d.ow() + 2 * d.into_pad;
      auto store = [&](const Expr& k) {
        Expr index = Flat({Var("u.n"), Add(Var("u.h"), IntImm(d.into_pad)), Add(Var("u.w"), IntImm(d.into_pad)), k},
                          {d.n, hp, wp, d.into_cp});
        return Store(d.into, index, Substitute(q, {{"u.k", k}}));
      };
      parts.push_back(Loops({{"u.n", d.n}, {"u.h", d.oh()}, {"u.w", d.ow()}},
                            VectorRows("u.k", d.k, std::max<int64_t>(1, d.io_lanes), store)));
      return Block(parts);
    }
    value = RoundTrip(value, d.sum_scale, d.sum_zero);
  }
  if (d.pool) value = RoundTrip(value, d.pool->scale, d.pool->zero);  // the pooled values'
  auto store = [&](const Expr& w) { return Store("O", Substitute(at, {{"u.w", w}}), Substitute(value, {{"u.w", w}})); };
  if (d.float_boundary && d.io_lanes > 1) {  // every inference: rows of floats as vectors
    parts.push_back(
        Loops({{"u.n", d.n}, {"u.k", d.k}, {"u.h", d.out_h()}}, VectorRows("u.w", d.out_w(), d.io_lanes, store)));
  } else {
    parts.push_back(Loops({{"u.n", d.n}, {"u.k", d.k}, {"u.h", d.out_h()}, {"u.w", d.out_w()}}, store(Var("u.w"))));
  }
  return Block(parts);
}

// Where the kernel writes output pixel (p = n*OH + oh, column) channel `channel`:
// O.nhwc, or the next layer's padded input (QuantizedConvShape::into).
Stmt StoreOutput(const QuantizedConvShape& d, const Expr& p, const Expr& column, const Expr& channel, Expr value) {
  if (!d.KernelWritesInto()) {
    return Store("O.nhwc", Add(Mul(Add(Mul(p, IntImm(d.ow())), column), IntImm(d.k)), channel), std::move(value));
  }
  const int64_t hp = d.oh() + 2 * d.into_pad, wp = d.ow() + 2 * d.into_pad;
  Expr n = Div(p, IntImm(d.oh())), y = Mod(p, IntImm(d.oh()));
  Expr row = Add(Add(Mul(n, IntImm(hp)), y), IntImm(d.into_pad));
  return Store(d.into, Add(Mul(Add(Mul(row, IntImm(wp)), Add(column, IntImm(d.into_pad))), IntImm(d.into_cp)), channel),
               std::move(value));
}

absl::Status CheckConv(const QuantizedConvShape& d, const Target& target) {
  RETURN_IF_ERROR(CheckQuantizedEpilogue(d, "int8 convolution"));
  if (d.n < 1 || d.c < 1 || d.h < 1 || d.w < 1 || d.k < 1 || d.r < 1 || d.s < 1 || d.stride < 1 || d.pad < 0 ||
      d.oh() < 1 || d.ow() < 1) {
    return absl::InvalidArgumentError("int8 convolution: bad shape");
  }
  return absl::OkStatus();
}

bool HasAmx(const Target& target) { return target.HasFeature("amx-int8") && target.HasFeature("amx-tile"); }

// The parameters both kernels take, in entry order.
std::vector<BufferParam> ConvParams(const QuantizedConvShape& d) {
  const DType out_type = d.float_boundary ? DType::kFloat32 : QuantizedOutputType(d);
  const int64_t cp = d.cp();
  const bool f32 = d.float_boundary;
  std::vector<BufferParam> params = {
      BufferParam{"I", f32 ? DType::kFloat32 : DType::kUInt8, {d.n, d.c, d.h, d.w}, false},
      BufferParam{"F", f32 ? DType::kFloat32 : DType::kInt8,
                  d.depthwise ? std::vector<int64_t>{d.c, d.r, d.s} : std::vector<int64_t>{d.k, d.c, d.r, d.s}, false}};
  for (BufferParam& p : QuantizedEpilogueParams(d, d.k)) {
    if (f32 && p.name == "bias") p.dtype = DType::kFloat32;
    params.push_back(std::move(p));
  }
  if (f32) params.push_back(BufferParam{"wscale", DType::kFloat32, {d.k}, false});
  if (d.residual && d.residual_from.empty()) {
    params.push_back(BufferParam{"R", DType::kFloat32, {d.n, d.k, d.oh(), d.ow()}, false});
  }
  if (!d.residual_from.empty()) {
    params.push_back(BufferParam{d.residual_from, DType::kUInt8,
                                 {d.n, d.oh() + 2 * d.residual_pad, d.ow() + 2 * d.residual_pad, d.residual_cp},
                                 false});
  }
  auto internal = [&params](std::string buffer, DType type, std::vector<int64_t> shape) {
    BufferParam p{std::move(buffer), type, std::move(shape), false};
    p.is_internal = true;
    params.push_back(std::move(p));
  };
  internal("I.padded", DType::kUInt8, {d.n, d.hp(), d.wp(), cp});
  if (d.depthwise) {
    internal("F.packed", DType::kInt8, {d.r, d.s, d.c});
  } else {
    internal("F.packed", DType::kInt8, {d.kp() / 16, d.r, d.s * cp / 4, 16, 4});
  }
  internal("F.offset", DType::kInt32, {d.k});
  if (!d.into.empty()) {
    if (!d.KernelWritesInto()) internal("O.nhwc", QuantizedOutputType(d), {d.n, d.oh(), d.ow(), d.k});
    params.push_back(BufferParam{d.into, DType::kUInt8, {d.n, d.oh() + 2 * d.into_pad, d.ow() + 2 * d.into_pad, d.into_cp},
                                 false});
    return params;
  }
  internal("O.nhwc", QuantizedOutputType(d), {d.n, d.oh(), d.ow(), d.k});
  if (d.pool) internal("P.nhwc", QuantizedOutputType(d), {d.n, d.out_h(), d.out_w(), d.k});
  params.push_back(BufferParam{"O", out_type, {d.n, d.k, d.out_h(), d.out_w()}, true});
  return params;
}

// I.padded's index of pixel (p = n*OH + oh, column) at filter row r, byte 0.
Expr PixelIndex(const QuantizedConvShape& d, const Expr& p, const Expr& column, const Expr& r) {
  Expr n = Div(p, IntImm(d.oh())), y = Mod(p, IntImm(d.oh()));
  Expr row = Add(Add(Mul(n, IntImm(d.hp())), Mul(y, IntImm(d.stride))), r);
  return Mul(Add(Mul(row, IntImm(d.wp())), Mul(column, IntImm(d.stride))), IntImm(d.cp()));
}

// The loop over the outer axis (pixel rows p or channel blocks kb) around `body`,
// the other axis inside it, per loop_order.
struct BlockAxes {
  LoopSpec outer, inner;
};
BlockAxes AxesOf(const QuantizedConvShape& d, int64_t channel_block, bool pixels_outer) {
  const LoopSpec pixels{"p", d.n * d.oh()}, channels{"kb", (d.k + channel_block - 1) / channel_block};
  return pixels_outer ? BlockAxes{pixels, channels} : BlockAxes{channels, pixels};
}

// `body` inside a register tile's loops: `pixels` output pixels (t.i, unrolled) x
// `vecs` channel vectors (t.v, unrolled) x `lanes` channels (t.l, one vector).
Stmt OverTile(int64_t pixels, int64_t vecs, int64_t lanes, Stmt body) {
  return For("t.i", IntImm(pixels), pixels, ForKind::kUnrolled,
             For("t.v", IntImm(vecs), vecs, ForKind::kUnrolled,
                 For("t.l", IntImm(lanes), lanes, ForKind::kVectorized, std::move(body))));
}

// The register tiles of one output row of `ow` pixels: tiles of `ow_reg` from each
// column ob * ow_reg, then a shorter last one.
Stmt RowOfTiles(int64_t ow, int64_t ow_reg, const std::function<Stmt(const Expr& ow0, int64_t pixels)>& tile) {
  const int64_t full = ow / ow_reg, tail = ow % ow_reg;
  std::vector<Stmt> tiles;
  if (full > 0) tiles.push_back(For("ob", IntImm(full), full, ForKind::kSerial, tile(Mul(Var("ob"), IntImm(ow_reg)), ow_reg)));
  if (tail > 0) tiles.push_back(tile(IntImm(full * ow_reg), tail));
  return Block(tiles);
}

}  // namespace

absl::StatusOr<LoweredFunc> QuantizedConv2dAmxKernel(const QuantizedConvShape& d, const Config& config,
                                                     const Target& target, const std::string& name) {
  RETURN_IF_ERROR(CheckConv(d, target));
  const int64_t block_rows = config.Int("block_rows"), block_cols = config.Int("block_cols");
  if (block_rows < 1 || block_rows > 32) return absl::InvalidArgumentError("int8 convolution: block_rows is 1..32");
  if ((block_cols != 16 && block_cols != 32) || d.kp() % block_cols != 0) {
    return absl::InvalidArgumentError("int8 convolution: block_cols is 16 or 32 and divides K = " +
                                      std::to_string(d.k) + " rounded up to 16");
  }
  const std::string order = config.Str("loop_order");
  if (order != "pk" && order != "kp") return absl::InvalidArgumentError("int8 convolution: loop_order is pk or kp");
  const bool parallel = config.Int("parallel") == 1;
  if (!HasAmx(target)) {
    return absl::InvalidArgumentError("int8 convolution: engine amx needs a target with AMX (amx-tile, amx-int8); " +
                                      target.ToString() + " has none");
  }
  const int64_t cp = d.cp(), ow = d.ow(), panel_bytes = d.r * d.s * cp * 16, o_groups = d.s * cp / 4;

  LoweredFunc func;
  func.name = name;
  func.params = ConvParams(d);
  // Pixel row p (= n*OH + oh), channel block kb: `rows` outputs from column ow0, the
  // sums over R filter rows of S*Cp bytes each, then their write-back.
  Expr p = Var("p"), kb = Var("kb");
  auto block = [&](const Expr& ow0, int64_t rows) {
    MatrixDotOperands o;
    o.configured = true;
    o.a = "I.padded";
    o.b = "F.packed";
    o.a_index = PixelIndex(d, p, ow0, IntImm(0));
    o.a_stride = d.stride * cp;
    o.segments = d.r;
    o.a_segment_stride = d.wp() * cp;
    o.groups = o_groups;
    o.b_index = Mul(kb, IntImm(block_cols / 16 * panel_bytes));
    o.b_panel_stride = panel_bytes;
    o.rows = rows;
    o.cols = block_cols;
    Expr i = Var("w.r"), j = Var("w.c");
    Expr channel = Add(Mul(kb, IntImm(block_cols)), j);
    Stmt store = StoreOutput(d, p, Add(ow0, i), channel,
                             QuantizedWriteBack(d, Load("acc", DType::kInt32, Add(Mul(i, IntImm(block_cols)), j)),
                                                channel, "F.offset"));
    auto write_cols = [&](int64_t cols) {
      const bool vector = cols >= 4 && (cols & (cols - 1)) == 0;
      return For("w.r", IntImm(rows), rows, ForKind::kSerial,
                 For("w.c", IntImm(cols), cols, vector ? ForKind::kVectorized : ForKind::kSerial, store));
    };
    // The last channel block of a K that is not a multiple of block_cols: its first
    // K % block_cols channels only.
    const int64_t full_blocks = d.k / block_cols, rest = d.k % block_cols;
    Stmt write = rest == 0 ? write_cols(block_cols)
                           : IfThenElse(LT(kb, IntImm(full_blocks)), write_cols(block_cols), write_cols(rest));
    return Allocate("acc", DType::kInt32, rows * block_cols, Block({MatrixDot("acc", IntImm(0), o), write}));
  };
  // One outer iteration: every full block of its inner loop on one tile configuration
  // (ldtilecfg serialises the tile unit: a few hundred cycles), then the rows' shorter
  // last blocks on another.
  const BlockAxes axes = AxesOf(d, block_cols, order == "pk");
  const LoopSpec& inner = axes.inner;
  const int64_t full = ow / block_rows, tail = ow % block_rows;
  std::vector<Stmt> steps;
  if (full > 0) {
    Stmt blocks = For("ob", IntImm(full), full, ForKind::kSerial, block(Mul(Var("ob"), IntImm(block_rows)), block_rows));
    steps.push_back(TileConfig(block_rows, block_cols, StepGroups(o_groups)));
    steps.push_back(For(inner.var, IntImm(inner.extent), inner.extent, ForKind::kSerial, blocks));
  }
  if (tail > 0) {
    steps.push_back(TileConfig(tail, block_cols, StepGroups(o_groups)));
    steps.push_back(For(inner.var, IntImm(inner.extent), inner.extent, ForKind::kSerial,
                        block(IntImm(full * block_rows), tail)));
  }
  const LoopSpec& outer = axes.outer;
  func.body = For(outer.var, IntImm(outer.extent), outer.extent, parallel ? ForKind::kParallel : ForKind::kSerial,
                  Block(steps));
  func.prepack = Prepack(d);
  if (!d.KernelWritesInto()) func.unpack = Unpack(d);
  return func;
}

absl::StatusOr<LoweredFunc> QuantizedConv2dVnniKernel(const QuantizedConvShape& d, const Config& config,
                                                      const Target& target, const std::string& name) {
  RETURN_IF_ERROR(CheckConv(d, target));
  const int64_t ow_reg = config.Int("ow_reg"), lanes = config.Int("vec_lanes"), vecs = config.Int("oc_vecs");
  if (ow_reg < 1 || ow_reg > 16) return absl::InvalidArgumentError("int8 convolution: ow_reg is 1..16");
  if (lanes != 4 && lanes != 8 && lanes != 16) {
    return absl::InvalidArgumentError("int8 convolution: vec_lanes is 4, 8 or 16");
  }
  const int64_t block = lanes * vecs;
  if (vecs < 1 || d.k % block != 0) {
    return absl::InvalidArgumentError("int8 convolution: vec_lanes x oc_vecs = " + std::to_string(block) +
                                      " must divide K = " + std::to_string(d.k));
  }
  const std::string order = config.Str("loop_order");
  if (order != "pk" && order != "kp") return absl::InvalidArgumentError("int8 convolution: loop_order is pk or kp");
  const bool parallel = config.Int("parallel") == 1;
  const int64_t ow = d.ow(), groups = d.s * d.cp() / 4;

  LoweredFunc func;
  func.name = name;
  func.params = ConvParams(d);
  // A register tile of `pixels` output pixels from column ow0 x vecs vectors of lanes
  // output channels, in row p and channel block kb: each step broadcasts one input
  // word (four channels) per pixel and multiplies it into each vector of four-byte
  // weight words (Dot4: vpdpbusd where the target has it).
  Expr p = Var("p"), kb = Var("kb");
  auto tile = [&](const Expr& ow0, int64_t pixels) {
    Expr i = Var("t.i"), v = Var("t.v"), l = Var("t.l"), r = Var("t.r"), g = Var("t.g");
    auto over_tile = [&](Stmt body) { return OverTile(pixels, vecs, lanes, std::move(body)); };
    Expr acc_index = Add(Mul(Add(Mul(i, IntImm(vecs)), v), IntImm(lanes)), l);
    Expr first = Add(Mul(kb, IntImm(block)), Mul(v, IntImm(lanes)));  // the vector's first channel
    Expr channel = Add(first, l);
    // F.packed [K/16][R][G][16][4]: the vector's lanes are one run of a 16-channel panel.
    Expr weights = Add(Mul(Add(Mul(Add(Mul(Div(first, IntImm(16)), IntImm(d.r)), r), IntImm(groups)), g), IntImm(64)),
                       Mul(Add(Mod(first, IntImm(16)), l), IntImm(4)));
    Expr image = Add(PixelIndex(d, p, Add(ow0, i), r), Mul(g, IntImm(4)));
    Stmt zero = over_tile(Store("acc", acc_index, Cast(DType::kInt32, IntImm(0))));
    Stmt step = over_tile(Store("acc", acc_index,
                                Dot4(Load("acc", DType::kInt32, acc_index), Load("I.padded", DType::kUInt8, image),
                                     Load("F.packed", DType::kInt8, weights))));
    Stmt reduce = For("t.r", IntImm(d.r), d.r, ForKind::kSerial, For("t.g", IntImm(groups), groups, ForKind::kSerial, step));
    Stmt write = over_tile(StoreOutput(d, p, Add(ow0, i), channel,
                                       QuantizedWriteBack(d, Load("acc", DType::kInt32, acc_index), channel, "F.offset")));
    return Allocate("acc", DType::kInt32, pixels * vecs * lanes, Block({zero, reduce, write}));
  };
  const BlockAxes axes = AxesOf(d, block, order == "pk");
  Stmt inner = For(axes.inner.var, IntImm(axes.inner.extent), axes.inner.extent, ForKind::kSerial,
                   RowOfTiles(ow, ow_reg, tile));
  func.body = For(axes.outer.var, IntImm(axes.outer.extent), axes.outer.extent,
                  parallel ? ForKind::kParallel : ForKind::kSerial, inner);
  func.prepack = Prepack(d);
  if (!d.KernelWritesInto()) func.unpack = Unpack(d);
  return func;
}

namespace {

// The VNNI kernel's register budget: the tile's accumulators, one weight vector per
// column of vectors, one broadcast input word.
bool FitsRegisters(int64_t ow_reg, int64_t vecs, const Target& target) {
  return ow_reg * vecs + vecs + 1 <= target.VectorRegisters();
}

}  // namespace

ConfigSpace QuantizedConv2dTemplate::Space(const TuningTask& task, const Target& target) const {
  const QuantizedConvShape d = QuantizedConvShapeOf(task);
  if (!HasAmx(target)) {
    std::vector<nlohmann::json> ow_regs, lanes;
    for (int64_t r : {1, 2, 4, 6, 7, 8, 12, 14})
      if (r <= d.ow()) ow_regs.push_back(r);
    for (int64_t l : {4, 8, 16})
      if (l <= target.MaxF32Lanes()) lanes.push_back(l);
    std::vector<Knob> knobs = {
        {"engine", {"vnni"}, "vector dot products (vpdpbusd where the CPU has it; amx where it has AMX)"},
        {"ow_reg", ow_regs, "output pixels of one row in the register tile"},
        {"vec_lanes", lanes, "int32 output channels per vector"},
        {"oc_vecs", {1, 2, 3, 4}, "vectors of output channels in the register tile"},
        {"loop_order", {"pk", "kp"}, "pixel rows outer (pk) or output-channel blocks outer (kp)"},
        {"parallel", {0, 1}, "run the outer loop on the runtime thread pool"},
    };
    const int64_t k = d.k;
    return ConfigSpace(std::move(knobs), [k, target](const Config& c) {
      if (k % (c.Int("vec_lanes") * c.Int("oc_vecs")) != 0)
        return absl::InvalidArgumentError("vec_lanes x oc_vecs must divide K");
      if (!FitsRegisters(c.Int("ow_reg"), c.Int("oc_vecs"), target))
        return absl::InvalidArgumentError("the register tile needs more vector registers than the target has");
      return absl::OkStatus();
    });
  }
  std::vector<nlohmann::json> rows, cols = {16};
  for (int64_t r : QuantizedConvBlockRows(d.ow())) rows.push_back(r);
  if (d.kp() % 32 == 0) cols.push_back(32);
  std::vector<Knob> knobs = {
      {"engine", {"amx"}, "the matrix unit (AMX tiles); vnni where the target has none"},
      {"block_rows", rows, "output pixels of one row per block (one or two tiles of up to 16)"},
      {"block_cols", cols, "output channels per block: one or two 16-channel tiles"},
      {"loop_order", {"pk", "kp"}, "pixel rows outer (pk) or output-channel blocks outer (kp)"},
      {"parallel", {0, 1}, "run the outer loop on the runtime thread pool"},
  };
  return ConfigSpace(std::move(knobs), [](const Config&) { return absl::OkStatus(); });
}

Config QuantizedConv2dTemplate::Naive(const TuningTask& task, const Target& target) const {
  if (!HasAmx(target)) {
    return Config(nlohmann::json{{"engine", "vnni"}, {"ow_reg", 1}, {"vec_lanes", 4}, {"oc_vecs", 1},
                                 {"loop_order", "pk"}, {"parallel", 0}});
  }
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
  const ConfigSpace space = Space(task, target);
  std::vector<Config> out;
  if (!HasAmx(target)) {
    // The widest vectors; per count of channel vectors, the longest pixel run that
    // fits the registers, one that divides the row first.
    int64_t lanes = std::min<int64_t>(16, target.MaxF32Lanes());
    while (lanes > 4 && d.k % lanes != 0) lanes /= 2;  // the widest vectors that divide K
    for (int64_t vecs : {2, 4, 1, 3}) {
      std::vector<int64_t> fits;
      for (int64_t r : {14, 12, 8, 7, 6, 4, 2, 1})
        if (r <= d.ow() && FitsRegisters(r, vecs, target)) fits.push_back(r);
      std::stable_sort(fits.begin(), fits.end(),
                       [&](int64_t a, int64_t b) { return (d.ow() % a == 0) > (d.ow() % b == 0); });
      for (size_t i = 0; i < std::min<size_t>(2, fits.size()); ++i) {
        Config c(nlohmann::json{{"engine", "vnni"}, {"ow_reg", fits[i]}, {"vec_lanes", lanes}, {"oc_vecs", vecs},
                                {"loop_order", "pk"}, {"parallel", target.num_threads > 1 ? 1 : 0}});
        if (space.Check(c).ok() && std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
      }
    }
    return out;
  }
  std::vector<int64_t> rows = QuantizedConvBlockRows(d.ow());
  std::stable_sort(rows.begin(), rows.end(), [&](int64_t a, int64_t b) {
    const bool a_even = d.ow() % a == 0, b_even = d.ow() % b == 0;
    return a_even != b_even ? a_even : a > b;
  });
  // Channel blocks outer first when there are fewer pixel rows than threads (a 1x1
  // image: a classifier).
  const bool few_rows = d.n * d.oh() < std::max(2, target.num_threads);
  for (const char* order : few_rows ? std::vector<const char*>{"kp", "pk"} : std::vector<const char*>{"pk", "kp"}) {
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
  const std::string symbol = KernelSymbol(task, *this, config);
  if (config.Str("engine") == "amx") return QuantizedConv2dAmxKernel(QuantizedConvShapeOf(task), config, target, symbol);
  return QuantizedConv2dVnniKernel(QuantizedConvShapeOf(task), config, target, symbol);
}

namespace {

// F -> F.packed [R][S][C] int32, and the offsets over each channel's R*S taps.
Stmt DepthwisePrepack(const QuantizedConvShape& d) {
  Expr c = Var("f.c"), r = Var("f.r"), s = Var("f.s");
  std::vector<Stmt> parts = {
      PadInput(d),
      Loops({{"f.c", d.c}, {"f.r", d.r}, {"f.s", d.s}},
            Store("F.packed", Flat({r, s, c}, {d.r, d.s, d.c}), FilterValue(d, Flat({c, r, s}, {d.c, d.r, d.s}), c)))};
  if (HasChannelOffsets(d)) {
    // The tap sums from F.packed [R][S][C] (the int8 values): tap t of channel j.
    const int64_t taps = d.r * d.s, channels = d.c;
    parts.push_back(QuantizedChannelOffsets(
        d, d.c, taps, "F.packed", [channels](Expr j, Expr t) { return Add(Mul(t, IntImm(channels)), j); },
        "F.offset", BiasValue(d)));
  }
  return Block(parts);
}

bool DepthwiseFits(int64_t ow_reg, int64_t vecs, const Target& target) {
  // Accumulators, the tap's weight vectors, one widened input vector.
  return ow_reg * vecs + vecs + 1 <= target.VectorRegisters();
}

}  // namespace

absl::StatusOr<LoweredFunc> QuantizedDepthwiseKernel(const QuantizedConvShape& d, const Config& config,
                                                     const Target&, const std::string& name) {
  RETURN_IF_ERROR(CheckQuantizedEpilogue(d, "int8 depthwise convolution"));
  if (!d.depthwise || d.k != d.c) return absl::InvalidArgumentError("int8 depthwise convolution: not a depthwise shape");
  const int64_t ow_reg = config.Int("ow_reg"), lanes = config.Int("vec_lanes"), vecs = config.Int("ch_vecs");
  if (ow_reg < 1 || ow_reg > 16) return absl::InvalidArgumentError("int8 depthwise convolution: ow_reg is 1..16");
  const int64_t block = lanes * vecs;
  if ((lanes != 4 && lanes != 8 && lanes != 16) || vecs < 1 || d.c % block != 0) {
    return absl::InvalidArgumentError("int8 depthwise convolution: vec_lanes (4, 8 or 16) x ch_vecs = " +
                                      std::to_string(block) + " must divide C = " + std::to_string(d.c));
  }
  const bool parallel = config.Int("parallel") == 1;
  const int64_t ow = d.ow();
  LoweredFunc func;
  func.name = name;
  func.params = ConvParams(d);

  Expr p = Var("p"), cb = Var("cb");
  auto tile = [&](const Expr& ow0, int64_t pixels) {
    Expr i = Var("t.i"), v = Var("t.v"), l = Var("t.l"), r = Var("t.r"), s = Var("t.s");
    auto over_tile = [&](Stmt body) { return OverTile(pixels, vecs, lanes, std::move(body)); };
    Expr acc_index = Add(Mul(Add(Mul(i, IntImm(vecs)), v), IntImm(lanes)), l);
    Expr channel = Add(Add(Mul(cb, IntImm(block)), Mul(v, IntImm(lanes))), l);
    // Pixel (row p, column ow0 + i) at tap (r, s), channel `channel`.
    Expr column = Add(Mul(Add(ow0, i), IntImm(d.stride)), s);
    Expr image = Add(PixelIndex(d, p, IntImm(0), r), Add(Mul(column, IntImm(d.c)), channel));
    Expr weight = Add(Mul(Add(Mul(r, IntImm(d.s)), s), IntImm(d.c)), channel);
    Stmt zero = over_tile(Store("acc", acc_index, Cast(DType::kInt32, IntImm(0))));
    Stmt step = over_tile(Store("acc", acc_index,
                                Add(Load("acc", DType::kInt32, acc_index),
                                    Mul(Cast(DType::kInt32, Load("I.padded", DType::kUInt8, image)),
                                        Cast(DType::kInt32, Load("F.packed", DType::kInt8, weight))))));
    Stmt taps = For("t.r", IntImm(d.r), d.r, ForKind::kSerial, For("t.s", IntImm(d.s), d.s, ForKind::kSerial, step));
    Stmt write = over_tile(StoreOutput(d, p, Add(ow0, i), channel,
                                       QuantizedWriteBack(d, Load("acc", DType::kInt32, acc_index), channel, "F.offset")));
    return Allocate("acc", DType::kInt32, pixels * vecs * lanes, Block({zero, taps, write}));
  };
  Stmt channels = For("cb", IntImm(d.c / block), d.c / block, ForKind::kSerial, RowOfTiles(ow, ow_reg, tile));
  func.body = For("p", IntImm(d.n * d.oh()), d.n * d.oh(), parallel ? ForKind::kParallel : ForKind::kSerial, channels);
  func.prepack = DepthwisePrepack(d);
  if (!d.KernelWritesInto()) func.unpack = Unpack(d);
  return func;
}

ConfigSpace QuantizedDepthwiseTemplate::Space(const TuningTask& task, const Target& target) const {
  const QuantizedConvShape d = QuantizedConvShapeOf(task);
  std::vector<nlohmann::json> ow_regs, lanes;
  for (int64_t r : {1, 2, 4, 7, 8, 14}) if (r <= d.ow()) ow_regs.push_back(r);
  for (int64_t l : {4, 8, 16}) if (l <= target.MaxF32Lanes() && d.c % l == 0) lanes.push_back(l);
  if (lanes.empty()) lanes.push_back(4);  // refused by the check below with the reason
  std::vector<Knob> knobs = {
      {"ow_reg", ow_regs, "output pixels of one row in the register tile"},
      {"vec_lanes", lanes, "int32 channels per vector"},
      {"ch_vecs", {1, 2, 4}, "vectors of channels in the register tile"},
      {"parallel", {0, 1}, "run the pixel-row loop on the runtime thread pool"},
  };
  const int64_t c = d.c;
  return ConfigSpace(std::move(knobs), [c, target](const Config& config) {
    if (c % (config.Int("vec_lanes") * config.Int("ch_vecs")) != 0)
      return absl::InvalidArgumentError("vec_lanes x ch_vecs must divide C");
    if (!DepthwiseFits(config.Int("ow_reg"), config.Int("ch_vecs"), target))
      return absl::InvalidArgumentError("the register tile needs more vector registers than the target has");
    return absl::OkStatus();
  });
}

Config QuantizedDepthwiseTemplate::Naive(const TuningTask&, const Target&) const {
  return Config(nlohmann::json{{"ow_reg", 1}, {"vec_lanes", 4}, {"ch_vecs", 1}, {"parallel", 0}});
}

std::vector<Config> QuantizedDepthwiseTemplate::Heuristics(const TuningTask& task, const Target& target) const {
  // The widest vectors that divide C; the longest pixel runs that fit, dividing the
  // row first; every thread on pixel rows.
  const QuantizedConvShape d = QuantizedConvShapeOf(task);
  const ConfigSpace space = Space(task, target);
  std::vector<Config> out;
  for (int64_t lanes : {16, 8, 4}) {
    if (lanes > target.MaxF32Lanes() || d.c % lanes != 0) continue;
    for (int64_t vecs : {1, 2, 4}) {
      for (int64_t r : {14, 8, 7, 4, 2, 1}) {
        Config c(nlohmann::json{{"ow_reg", r}, {"vec_lanes", lanes}, {"ch_vecs", vecs},
                                {"parallel", target.num_threads > 1 ? 1 : 0}});
        if (r <= d.ow() && d.ow() % r == 0 && space.Check(c).ok() && out.size() < 6) out.push_back(c);
      }
    }
    break;
  }
  if (out.empty()) out.push_back(Naive(task, target));
  return out;
}

absl::StatusOr<ir::LoweredFunc> QuantizedDepthwiseTemplate::Instantiate(const TuningTask& task, const Target& target,
                                                                        const Config& config) const {
  RETURN_IF_ERROR(SpaceOf(*this, task, target)->Check(config));
  return QuantizedDepthwiseKernel(QuantizedConvShapeOf(task), config, target, KernelSymbol(task, *this, config));
}

absl::StatusOr<ir::LoweredFunc> InstantiateQuantizedConvInModel(const TuningTask& task, const Target& target,
                                                                const Config& config, double in_scale,
                                                                double out_scale, const QuantizedHandOver* into,
                                                                const QuantizedResidual* residual,
                                                                const QuantizedMaxPool* pool) {
  ASSIGN_OR_RETURN(const Template* tmpl, FindTemplate(task));
  RETURN_IF_ERROR(SpaceOf(*tmpl, task, target)->Check(config));
  if (!(in_scale > 0) || !(out_scale > 0)) return absl::InvalidArgumentError("int8 convolution: scales must be positive");
  QuantizedConvShape d = QuantizedConvShapeOf(task);
  d.float_boundary = true;
  d.io_lanes = target.MaxF32Lanes();
  d.in_scale = in_scale;
  d.out_scale = out_scale;
  if (into) {
    if (d.out != QuantizedOutput::kU8 || into->buffer.empty() || into->pad < 0 || into->cp < d.k) {
      return absl::InvalidArgumentError("int8 convolution: bad hand-over to " + into->buffer);
    }
    d.into = into->buffer, d.into_pad = into->pad, d.into_cp = into->cp;
  }
  if (residual) {
    if (d.out != QuantizedOutput::kU8 || !(residual->sum_scale > 0) || residual->sum_zero < 0 ||
        residual->sum_zero > 255 ||
        (!residual->from.empty() && (!(residual->from_scale > 0) || residual->from_zero < 0 ||
                                     residual->from_zero > 255 || residual->from_pad < 0 || residual->from_cp < d.k))) {
      return absl::InvalidArgumentError("int8 convolution: bad residual epilogue");
    }
    d.residual = true, d.residual_relu = residual->relu;
    d.sum_scale = residual->sum_scale, d.sum_zero = residual->sum_zero;
    d.residual_from = residual->from, d.residual_pad = residual->from_pad, d.residual_cp = residual->from_cp;
    d.residual_scale = residual->from_scale, d.residual_zero = residual->from_zero;
  }
  if (pool) {
    if (into || residual || d.depthwise || d.out != QuantizedOutput::kU8 || !(pool->scale > 0) || pool->zero < 0 ||
        pool->zero > 255 || pool->k_h < 1 || pool->k_w < 1 || pool->stride_h < 1 || pool->stride_w < 1 ||
        pool->pad_h < 0 || pool->pad_w < 0 || pool->pad_h >= pool->k_h || pool->pad_w >= pool->k_w) {
      return absl::InvalidArgumentError("int8 convolution: bad max-pool epilogue");
    }
    d.pool = *pool;
    if (d.out_h() < 1 || d.out_w() < 1 || (d.out_h() - 1) * pool->stride_h - pool->pad_h >= d.oh() ||
        (d.out_w() - 1) * pool->stride_w - pool->pad_w >= d.ow()) {
      return absl::InvalidArgumentError("int8 convolution: a max-pool window holds no output position");
    }
  }
  const std::string symbol = KernelSymbol(task, *tmpl, config) + (into ? "_f32in" : "_f32io");
  if (d.depthwise) return QuantizedDepthwiseKernel(d, config, target, symbol);
  if (config.Str("engine") == "amx") return QuantizedConv2dAmxKernel(d, config, target, symbol);
  return QuantizedConv2dVnniKernel(d, config, target, symbol);
}

}  // namespace tuneforge

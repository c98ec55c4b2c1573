// conv2d_cpu: the direct NCHW[x]c convolution template and its knobs.
#include "compiler/templates/conv2d_template.h"

#include <algorithm>
#include <functional>
#include <optional>
#include <tuple>

#include "compiler/schedule/schedule.h"
#include "compiler/templates/conv2d_winograd.h"
#include "compiler/templates/loop_nest.h"
#include "compiler/support/status.h"

namespace tuneforge {

using nlohmann::json;

namespace {

// Shape of a convolution task, with the depthwise case folded in (K == C; its g is 1,
// the depthwise kernel being a computation of its own).
struct ConvShape {
  int64_t n, c, h, w, k, r, s, stride, pad, oh, ow, g;
  int64_t hp() const { return h + 2 * pad; }
  int64_t wp() const { return w + 2 * pad; }
  int64_t cg() const { return c / g; }  // input channels of a group
  int64_t kg() const { return k / g; }  // output channels of a group
};

ConvShape ShapeOf(const TuningTask& t, bool depthwise) {
  return ConvShape{t.Param("N"),   t.Param("C"),   t.Param("H"),      t.Param("W"),
                   depthwise ? t.Param("C") : t.Param("K"),        t.Param("R"),
                   t.Param("S"),   t.Param("stride"), t.Param("pad"), t.ConvOutH(),
                   t.ConvOutW(),   depthwise ? 1 : t.Param("groups")};
}

// Register budget of the accumulator tile (AVX-512 has 32 vector registers; the tile
// also needs the filter vectors and a broadcast).
constexpr int64_t kMaxAccumulatorVectors = 24;

// 1 (always valid), then the `values` that `keep` accepts.
std::vector<json> Filter(std::initializer_list<int64_t> values,
                         const std::function<bool(int64_t)>& keep) {
  std::vector<json> out = {1};
  for (int64_t v : values)
    if (keep(v)) out.push_back(v);
  return out;
}

ir::Expr V(const std::string& name) { return ir::Var(name); }

// The `algorithm` knob, "direct" when the config predates it.
std::string Algorithm(const Config& c) { return c.Str("algorithm", "direct"); }

// The layout transforms (see conv2d_template.h). x: input-channel block; y: output-
// channel block (depthwise: x == y, one block size). The activation part, I ->
// I.blocked with its zero border, is shared with the Winograd kernels.
ir::Stmt InputPrepackStmt(const ConvShape& d, int64_t x) {
  using namespace ir;  // NOLINT: the expression builders read like math here.
  const int64_t cb = d.c / x;
  const std::vector<int64_t> dims = {d.n, cb, d.hp(), d.wp(), x};
  // The border's zeros (rows above and below, then the columns left and right of the
  // image), written every time the interior is: in a model the blocked input's memory
  // is shared with other steps between runs (the executor's memory plan).
  std::vector<Stmt> parts;
  auto zero = [&](int64_t h0, int64_t rows, int64_t w0, int64_t cols) {
    if (rows <= 0 || cols <= 0) return;
    parts.push_back(Loops({{"p.n", d.n}, {"p.cb", cb}, {"p.zh", rows}, {"p.zw", cols}, {"p.zi", x}},
                          Store("I.blocked",
                                Flat({V("p.n"), V("p.cb"), Add(V("p.zh"), IntImm(h0)), Add(V("p.zw"), IntImm(w0)),
                                      V("p.zi")},
                                     dims),
                                FloatImm(0.0))));
  };
  zero(0, d.pad, 0, d.wp());
  zero(d.pad + d.h, d.hp() - d.pad - d.h, 0, d.wp());
  zero(d.pad, d.h, 0, d.pad);
  zero(d.pad, d.h, d.pad + d.w, d.wp() - d.pad - d.w);
  Expr c = Add(Mul(V("p.cb"), IntImm(x)), V("p.ci"));
  parts.push_back(Loops(
      {{"p.n", d.n}, {"p.cb", cb}, {"p.h", d.h}, {"p.w", d.w}, {"p.ci", x}},
      Store("I.blocked",
            Flat({V("p.n"), V("p.cb"), Add(V("p.h"), IntImm(d.pad)), Add(V("p.w"), IntImm(d.pad)), V("p.ci")}, dims),
            Load("I", DType::kFloat32, Flat({V("p.n"), c, V("p.h"), V("p.w")}, {d.n, d.c, d.h, d.w})))));
  return Block(parts);
}

// Both parts: activations, and the weights F -> F.blocked.
ir::Stmt PrepackStmt(const ConvShape& d, int64_t x, int64_t y, bool depthwise) {
  using namespace ir;  // NOLINT
  Expr c = Add(Mul(V("p.cb"), IntImm(x)), V("p.ci"));
  Expr k = Add(Mul(V("p.kb"), IntImm(y)), V("p.ko"));
  Stmt copy_f;
  if (depthwise) {
    copy_f = Loops({{"p.kb", d.k / y}, {"p.r", d.r}, {"p.s", d.s}, {"p.ko", y}},
                   Store("F.blocked",
                         Flat({V("p.kb"), V("p.r"), V("p.s"), V("p.ko")}, {d.k / y, d.r, d.s, y}),
                         Load("F", DType::kFloat32,
                              Flat({k, V("p.r"), V("p.s")}, {d.k, d.r, d.s}))));
  } else {
    // F is [K, C/G, R, S]: the blocks of a group's input channels.
    const int64_t cbg = d.cg() / x;
    copy_f = Loops(
        {{"p.kb", d.k / y}, {"p.cb", cbg}, {"p.r", d.r}, {"p.s", d.s}, {"p.ci", x}, {"p.ko", y}},
        Store("F.blocked",
              Flat({V("p.kb"), V("p.cb"), V("p.r"), V("p.s"), V("p.ci"), V("p.ko")},
                   {d.k / y, cbg, d.r, d.s, x, y}),
              Load("F", DType::kFloat32, Flat({k, c, V("p.r"), V("p.s")}, {d.k, d.cg(), d.r, d.s}))));
  }
  return Block({InputPrepackStmt(d, x), copy_f});
}

ir::Stmt UnpackStmt(const ConvShape& d, int64_t y) {
  using namespace ir;  // NOLINT
  Expr k = Add(Mul(V("u.kb"), IntImm(y)), V("u.ko"));
  // Rows inside a channel block (oh outside ko): one block row (OW x y floats) is
  // read y times from L1; with ko outside oh each channel swept the whole block, a
  // new cache line per element (ShuffleNet's 240 x 28 x 28 unpack took 2x longer).
  return Loops({{"u.n", d.n}, {"u.kb", d.k / y}, {"u.oh", d.oh}, {"u.ko", y}, {"u.ow", d.ow}},
               Store("O", Flat({V("u.n"), k, V("u.oh"), V("u.ow")}, {d.n, d.k, d.oh, d.ow}),
                     Load("O.blocked", DType::kFloat32,
                          Flat({V("u.n"), V("u.kb"), V("u.oh"), V("u.ow"), V("u.ko")},
                               {d.n, d.k / y, d.oh, d.ow, y}))));
}

// The blocked convolution (see conv2d_template.h): axes n kb oh ow ko, reduce cb r s ci
// (depthwise: reduce r s only, the input channel is the output channel).
// With `spec`, the output goes into spec's layout (block z): when z is a multiple of
// y each output-channel block lands inside one z block; when y is a multiple of z the
// channel axis is split in kx (y/z runs, this function's result) x ko (z) so each z
// run is whole. 1: no split.
int64_t OutputRuns(int64_t y, const ConvOutputSpec* spec) {
  return spec && spec->block < y && y % spec->block == 0 ? y / spec->block : 1;
}

ComputeDef ConvCompute(const ConvShape& d, int64_t x, int64_t y, bool depthwise,
                       const ConvOutputSpec* spec = nullptr) {
  using namespace ir;  // NOLINT
  ComputeDef def;
  def.name = depthwise ? "depthwise_conv2d" : "conv2d";
  // cb: the input-channel blocks of a group (of the whole input when G = 1).
  const int64_t cb = d.cg() / x, kb = d.k / y;
  auto internal = [](std::string name, std::vector<int64_t> shape) {
    BufferParam p{std::move(name), DType::kFloat32, std::move(shape), false};
    p.is_internal = true;
    return p;
  };
  def.params = {
      BufferParam{"I", DType::kFloat32, {d.n, d.c, d.h, d.w}, false},
      BufferParam{"F", DType::kFloat32,
                  depthwise ? std::vector<int64_t>{d.c, d.r, d.s}
                            : std::vector<int64_t>{d.k, d.cg(), d.r, d.s},
                  false},
      internal("I.blocked", {d.n, d.c / x, d.hp(), d.wp(), x}),
      internal("F.blocked", depthwise ? std::vector<int64_t>{kb, d.r, d.s, y}
                                      : std::vector<int64_t>{kb, cb, d.r, d.s, x, y}),
      internal("O.blocked", {d.n, kb, d.oh, d.ow, y}),
      BufferParam{"O", DType::kFloat32, {d.n, d.k, d.oh, d.ow}, true},
  };
  // kx: the z runs of an output-channel block (see above); 1 unless spec splits them.
  const int64_t z = spec ? spec->block : y;
  const int64_t runs = OutputRuns(y, spec);
  def.axes = {{"n", d.n, false}, {"kb", kb, false}, {"oh", d.oh, false}, {"ow", d.ow, false}};
  if (runs > 1) def.axes.push_back({"kx", runs, false});
  def.axes.push_back({"ko", y / runs, false});
  // The channel within the output-channel block.
  const Expr ko = runs > 1 ? Add(Mul(V("kx"), IntImm(y / runs)), V("ko")) : V("ko");
  if (!depthwise) def.axes.push_back({"cb", cb, true});
  def.axes.push_back({"r", d.r, true});
  def.axes.push_back({"s", d.s, true});
  if (!depthwise) def.axes.push_back({"ci", x, true});

  Expr ih = Add(Mul(V("oh"), IntImm(d.stride)), V("r"));
  Expr iw = Add(Mul(V("ow"), IntImm(d.stride)), V("s"));
  Expr in_index, f_index;
  if (depthwise) {
    in_index = Flat({V("n"), V("kb"), ih, iw, ko}, {d.n, kb, d.hp(), d.wp(), y});
    f_index = Flat({V("kb"), V("r"), V("s"), ko}, {kb, d.r, d.s, y});
  } else {
    // Grouped: output block kb is in group kb / (K/G/y), whose input blocks start at
    // that times C/G/x (x divides C/G, y divides K/G: no block spans two groups).
    const Expr in_block = d.g > 1 ? Add(Mul(Div(V("kb"), IntImm(d.kg() / y)), IntImm(cb)), V("cb")) : V("cb");
    in_index = Flat({V("n"), in_block, ih, iw, V("ci")}, {d.n, d.c / x, d.hp(), d.wp(), x});
    f_index = Flat({V("kb"), V("cb"), V("r"), V("s"), V("ci"), ko}, {kb, cb, d.r, d.s, x, y});
  }
  // Only the output's name matters to lowering; the kernel writes the blocked output.
  def.params[4].is_output = true;
  def.params[4].is_internal = false;
  def.params[5].is_output = false;
  def.output_index = Flat({V("n"), V("kb"), V("oh"), V("ow"), ko}, {d.n, kb, d.oh, d.ow, y});
  def.value = Mul(Load("I.blocked", DType::kFloat32, in_index),
                  Load("F.blocked", DType::kFloat32, f_index));
  if (spec) {
    // The z block and the channel in it, linear in ko.
    Expr block, lane_base;
    if (runs > 1) {
      block = Add(Mul(V("kb"), IntImm(runs)), V("kx"));
      lane_base = IntImm(0);
    } else {
      block = Div(V("kb"), IntImm(z / y));
      lane_base = Mul(Mod(V("kb"), IntImm(z / y)), IntImm(y));
    }
    const int64_t hp = d.oh + 2 * spec->pad_h, wp = d.ow + 2 * spec->pad_w;
    def.output_index = Add(Flat({V("n"), block, Add(V("oh"), IntImm(spec->pad_h)), Add(V("ow"), IntImm(spec->pad_w)),
                                 lane_base},
                                {d.n, d.k / z, hp, wp, z}),
                           V("ko"));
    // The finished sum of channel kb*y + (kx*z) + ko: base is that minus ko.
    Expr base = Add(Mul(V("kb"), IntImm(y)), runs > 1 ? Mul(V("kx"), IntImm(z)) : IntImm(0));
    def.epilogue = spec->epilogue(ReducedValue(), V("n"), base, V("ko"), V("oh"), V("ow"));
    def.params[4].is_output = false;
    def.params[4].is_internal = true;
    def.params.insert(def.params.end(), spec->inputs.begin(), spec->inputs.end());
    BufferParam out{spec->buffer, DType::kFloat32, {d.n, d.k / z, hp, wp, z}, true};
    def.params.push_back(out);
  }
  return def;
}

// Taps on the zero border add nothing; the kernel skips them where it can tell
// cheaply (the padded input keeps its zeros, so a skipped tap only saves work).
//
// Rows: the body of the filter-row loop runs only for rows inside the image (pad <=
// oh*stride + r < H + pad), one test per filter row and tile. Columns: a row tile may
// hold pixels on both sides of a border, so the test is per pixel and tap column; it
// costs nothing where both are known when the code is generated. The row tiles that
// reach into a border (the first and the last; more with a wide pad and narrow tiles;
// the only one when the tile is the whole row) get their own copy, in which each
// filter column that some pixel sees on the border is a copy of its own and each
// pixel's update is kept only when its column is inside the image; the tiles between
// run unchanged. A 3x3 layer on a 7x7 image does 19% less work (2 of 21 rows and
// columns are border), 14x14 10%. Tail tiles (OW not a multiple of ow_reg) keep the
// columns, and so do all tiles when more than kMaxBorderTiles reach a border (code
// size).
constexpr int64_t kMaxBorderTiles = 4;
// The rows: each filter row's taps run only when the row is inside the image.
ir::Stmt SkipBorderRows(const ir::Stmt& body, const ConvShape& d) {
  using namespace ir;  // NOLINT
  if (d.pad == 0) return body;
  Expr ih = Add(Mul(V("oh"), IntImm(d.stride)), V("r"));
  return Rewrite(body, [&](const Stmt& s) {
    if (s->kind != StmtKind::kFor || s->var != "r") return s;
    return For(s->var, s->extent, s->max_extent, s->for_kind,
               IfThenElse(And(LE(IntImm(d.pad), ih), LT(ih, IntImm(d.h + d.pad))), s->body));
  });
}

// The columns (after SkipBorderRows; the row tiles' index ow.o becomes a constant in
// the border tiles' copies).
ir::Stmt SkipBorderColumns(const ir::Stmt& body, const ConvShape& d, int64_t ow_reg) {
  using namespace ir;  // NOLINT
  const Stmt& out = body;
  if (d.pad == 0 || d.ow % ow_reg != 0) return out;
  auto inside = [](Expr x, int64_t lo, int64_t hi) { return And(LE(IntImm(lo), x), LT(x, IntImm(hi))); };
  const int64_t tiles = d.ow / ow_reg;
  // A border tile: `ow_o` is the tile's index (a constant). Its filter-column loop
  // becomes the columns some pixel of the tile sees on the border, each its own copy
  // with `s` a constant and every pixel's update under its column test (constant
  // too: codegen drops the border FMAs), around a loop over the columns every pixel
  // sees inside the image, unchanged.
  auto border_tile = [&](const Stmt& tile, int64_t ow_o) {
    auto on_border = [&](int64_t p, int64_t s) {
      const int64_t iw = (ow_o * ow_reg + p) * d.stride + s;
      return iw < d.pad || iw >= d.w + d.pad;
    };
    auto any_on_border = [&](int64_t s) {
      for (int64_t p = 0; p < ow_reg; ++p)
        if (on_border(p, s)) return true;
      return false;
    };
    Expr iw = Add(Mul(Add(IntImm(ow_o * ow_reg), V("ow.i")), IntImm(d.stride)), V("s"));
    return Rewrite(Substitute(tile, {{"ow.o", IntImm(ow_o)}}), [&](const Stmt& s) {
      if (s->kind != StmtKind::kFor || s->var != "s") return s;
      Stmt guarded =
          ow_reg == 1  // no ow.i loop: one pixel
              ? IfThenElse(inside(Substitute(iw, {{"ow.i", IntImm(0)}}), d.pad, d.w + d.pad),
                           s->body)
              : Rewrite(s->body, [&](const Stmt& t) {
                  if (t->kind != StmtKind::kFor || t->var != "ow.i" ||
                      !ReadsBuffer(t->body, "I.blocked"))
                    return t;
                  return For(t->var, t->extent, t->max_extent, t->for_kind,
                             IfThenElse(inside(iw, d.pad, d.w + d.pad), t->body));
                });
      int64_t lo = 0, hi = d.s;
      while (lo < d.s && any_on_border(lo)) ++lo;
      while (hi > lo && any_on_border(hi - 1)) --hi;
      std::vector<Stmt> parts;
      for (int64_t v = 0; v < lo; ++v) parts.push_back(Substitute(guarded, {{"s", IntImm(v)}}));
      if (hi > lo) {
        parts.push_back(For("s", IntImm(hi - lo), hi - lo, s->for_kind,
                            Substitute(s->body, {{"s", Add(V("s"), IntImm(lo))}})));
      }
      for (int64_t v = hi; v < d.s; ++v) parts.push_back(Substitute(guarded, {{"s", IntImm(v)}}));
      return Block(std::move(parts));
    });
  };
  if (tiles == 1) return border_tile(out, 0);  // no ow.o loop: the tile is the row
  // Tiles [0, left) reach into the left border, [right, tiles) into the right one.
  int64_t left = 0, right = tiles;
  while (left < tiles && left * ow_reg * d.stride < d.pad) ++left;
  while (right > 0 && ((right - 1) * ow_reg + ow_reg - 1) * d.stride + d.s - 1 >= d.w + d.pad)
    --right;
  right = std::max(right, left);
  if (left + (tiles - right) > kMaxBorderTiles) return out;
  return Rewrite(out, [&](const Stmt& s) {
    if (s->kind != StmtKind::kFor || s->var != "ow.o") return s;
    std::vector<Stmt> parts;
    for (int64_t t = 0; t < left; ++t) parts.push_back(border_tile(s->body, t));
    if (right > left) {
      parts.push_back(For("ow.o", IntImm(right - left), right - left, s->for_kind,
                          Substitute(s->body, {{"ow.o", Add(V("ow.o"), IntImm(left))}})));
    }
    for (int64_t t = right; t < tiles; ++t) parts.push_back(border_tile(s->body, t));
    return Block(std::move(parts));
  });
}

}  // namespace

namespace {

// The first loop over `var` in `s` in program order.
const ir::StmtNode* FindLoop(const ir::Stmt& s, const std::string& var) {
  using ir::StmtKind;
  if (!s) return nullptr;
  switch (s->kind) {
    case StmtKind::kFor:
      return s->var == var ? s.get() : FindLoop(s->body, var);
    case StmtKind::kBlock:
      for (const ir::Stmt& c : s->stmts) {
        if (const ir::StmtNode* f = FindLoop(c, var)) return f;
      }
      return nullptr;
    case StmtKind::kIfThenElse:
      if (const ir::StmtNode* f = FindLoop(s->body, var)) return f;
      return FindLoop(s->else_case, var);
    case StmtKind::kAllocate:
      return FindLoop(s->body, var);
    default:
      return nullptr;
  }
}

// The kernel body (after SkipBorderRows, before SkipBorderColumns) with the next
// output-channel block's packed weights prefetched as it computes (see
// InstantiateStreamingWeights). The prefetches go in the deepest reduction loop of
// cb, r, s (not the channel loop inside a block, often unrolled) and are numbered
// over every step of the passes that reuse the current block's weights — output rows
// (under outer_order koh) x row tiles x those reduction loops — each step fetching
// its share of the next block's cache lines. A border row skips some filter rows,
// so when the prefetches sit inside the filter-row loop only the rows that run every
// filter row prefetch; with none, the prefetches move up to the outermost reduction
// loop.
ir::Stmt PrefetchNextWeightBlock(const ir::Stmt& body, const ConvShape& d, const std::vector<int64_t>& weights_shape,
                                 const Config& config) {
  using namespace ir;  // NOLINT
  const int64_t blocks = weights_shape[0];
  int64_t slab = 1;  // floats of one output-channel block
  for (size_t i = 1; i < weights_shape.size(); ++i) slab *= weights_shape[i];
  const int64_t lines = (slab * 4 + 63) / 64;
  const StmtNode* kb = FindLoop(body, "kb");
  if (blocks < 2 || !kb) return body;
  const StmtNode* oh = FindLoop(kb->body, "oh");
  const StmtNode* tiles = FindLoop(kb->body, "ow.o");
  // The reduction loops outside a block's channels, outermost first (loops of extent 1
  // are left out).
  std::vector<const StmtNode*> chain;
  for (const char* var : config.Str("reduce_order") == "crs" ? std::vector<const char*>{"cb", "r", "s"}
                                                              : std::vector<const char*>{"r", "s", "cb"}) {
    if (const StmtNode* loop = FindLoop(kb->body, var)) chain.push_back(loop);
  }
  // A 1x1 convolution with one channel block: the channel loop is all there is.
  if (chain.empty()) {
    if (const StmtNode* loop = FindLoop(kb->body, "ci.o")) chain.push_back(loop);
  }
  if (chain.empty()) return body;
  // The rows that run every filter row: pad <= oh * stride + r < H + pad for all r.
  const int64_t lo = (d.pad + d.stride - 1) / d.stride, hi = (d.h + d.pad - d.r) / d.stride;
  size_t depth = chain.size();
  bool inside_rows = false;  // a filter-row loop encloses the deepest
  for (size_t i = 0; i + 1 < chain.size(); ++i) inside_rows |= chain[i]->var == "r";
  Expr pass = IntImm(0);
  int64_t passes = 1;
  std::optional<Expr> full_rows;
  if (oh) {
    if (inside_rows && lo <= hi && (lo > 0 || hi < d.oh - 1)) {
      pass = Sub(Var("oh"), IntImm(lo));
      passes = hi - lo + 1;
      full_rows = And(LE(IntImm(lo), Var("oh")), LE(Var("oh"), IntImm(hi)));
    } else {
      if (inside_rows && lo > hi) depth = 1;  // no full row: the outermost reduction loop, which every row runs
      pass = Var("oh");
      passes = d.oh;
    }
  } else if (inside_rows) {
    depth = 1;  // ohk: this block's pass is one row, border or not
  }
  if (tiles) {
    pass = Add(Mul(pass, IntImm(tiles->max_extent)), Var("ow.o"));
    passes *= tiles->max_extent;
  }
  Expr step = pass;
  int64_t steps = passes;
  for (size_t i = 0; i < depth; ++i) {
    step = Add(Mul(step, IntImm(chain[i]->max_extent)), Var(chain[i]->var));
    steps *= chain[i]->max_extent;
  }
  Expr next = Mul(Min(Add(Var("kb"), IntImm(1)), IntImm(blocks - 1)), IntImm(slab));
  Stmt prefetch;
  if (lines <= steps) {
    // One line per step; consecutive steps fetch the same line or the one after.
    prefetch = Prefetch("F.blocked", Add(next, Mul(Div(Mul(step, IntImm(lines)), IntImm(steps)), IntImm(16))));
  } else {
    const int64_t per_step = (lines + steps - 1) / steps;
    Expr line = Min(Add(Mul(step, IntImm(per_step)), Var("pf.l")), IntImm(lines - 1));
    prefetch = For("pf.l", IntImm(per_step), per_step, ForKind::kUnrolled,
                   Prefetch("F.blocked", Add(next, Mul(line, IntImm(16)))));
  }
  if (full_rows) prefetch = IfThenElse(*full_rows, prefetch);
  // Every copy of the loop (a row tile's tail and full variants): one runs per step.
  const std::string at = chain[depth - 1]->var;
  return Rewrite(body, [&](const Stmt& st) {
    if (st->kind != StmtKind::kFor || st->var != at) return st;
    return For(st->var, st->extent, st->max_extent, st->for_kind, Block({prefetch, st->body}));
  });
}

}  // namespace

ConfigSpace Conv2dTemplate::Space(const TuningTask& task, const Target& target) const {
  const ConvShape d = ShapeOf(task, depthwise_);
  const int64_t max_lanes = target.MaxF32Lanes();
  std::vector<Knob> knobs;
  if (!depthwise_) {
    knobs.push_back({"ic_block", Filter({2, 4, 8, 16, 32, 64}, [&](int64_t v) { return d.cg() % v == 0; }),
                     "input channels per block (x of NCHW[x]c); divides C (grouped: C/groups)"});
  }
  knobs.push_back({"vec_lanes", Filter({4, 8, 16}, [&](int64_t v) { return v <= max_lanes; }),
                   "float32 lanes per vector (1 = scalar)"});
  // Five vectors where a channel block of five can divide the channels (grouped
  // convolutions of 20, 40, 80 channels per group: ShuffleNet's), whose blocks could
  // otherwise hold only one vector.
  std::vector<json> oc_vecs = {1, 2, 3, 4};
  if (d.kg() % 20 == 0) oc_vecs.push_back(5);
  knobs.push_back({"oc_vecs", oc_vecs,
                   depthwise_ ? "vectors per channel block (block = oc_vecs * vec_lanes divides C)"
                              : "vectors per output-channel block (block y = oc_vecs * vec_lanes "
                                "divides K)"});
  knobs.push_back({"ow_reg", Filter({2, 3, 4, 5, 6, 7, 8, 12, 14, 16, 28},
                                    [&](int64_t v) { return v <= d.ow; }),
                   "output pixels of a row in the register tile"});
  if (!depthwise_) {
    knobs.push_back({"unroll_ci", {1, 2, 4, 8, 16}, "unroll of the channel loop in a block"});
    knobs.push_back({"reduce_order", {"crs", "rsc"},
                     "reduction loops: channel blocks outside (crs) or inside (rsc) the filter "
                     "window"});
  } else {
    knobs.push_back({"unroll_s", {0, 1}, "unroll the filter-column loop"});
  }
  knobs.push_back({"outer_order", {"koh", "ohk"},
                   "channel blocks outside (koh) or inside (ohk) output rows; the outer one is "
                   "parallel"});
  knobs.push_back({"parallel", {0, 1}, "run the outer loop on the runtime thread pool"});
  if (!depthwise_) {
    // Added after conv2d_cpu v1's knobs; their defaults are the direct kernel, which
    // is what a config without them meant.
    std::vector<json> algorithms = {"direct"}, rows = {1};
    for (const char* a : {"winograd_f23", "winograd_f43"}) {
      const int64_t m = winograd::OutputTile(a);
      if (d.g > 1 || !winograd::Applies(d.r, d.s, d.stride, d.oh, d.ow, m)) continue;
      algorithms.push_back(a);
      for (int64_t r : {2, 4, 7})
        if (winograd::Tiles(d.oh, m) % r == 0 && std::find(rows.begin(), rows.end(), json(r)) == rows.end()) rows.push_back(r);
    }
    knobs.push_back({"algorithm", algorithms,
                     "direct, or Winograd F(2x2,3x3) / F(4x4,3x3) for 3x3 stride-1 convolutions "
                     "(ow_reg: output tiles per register tile; outer_order: koh = one transform "
                     "point through all tiles, ohk = all points per register tile)",
                     json("direct")});
    knobs.back().structural = true;
    knobs.push_back({"tile_rows", rows, "Winograd: rows of output tiles per parallel work item (direct: 1)",
                     json(1)});
  }
  const bool depthwise = depthwise_;
  ConfigSpace space(std::move(knobs), [d, depthwise](const Config& c) -> absl::Status {
    const int64_t block = c.Int("vec_lanes") * c.Int("oc_vecs");
    if (d.kg() % block != 0)
      return absl::InvalidArgumentError(std::string("oc_vecs * vec_lanes must divide ") +
                                        (depthwise ? "C" : d.g > 1 ? "K/groups" : "K"));
    if (c.Int("ow_reg") * c.Int("oc_vecs") > kMaxAccumulatorVectors)
      return absl::InvalidArgumentError("register tile needs more than " +
                                        std::to_string(kMaxAccumulatorVectors) + " registers");
    if (!depthwise) {
      if (c.Int("ic_block") % c.Int("unroll_ci") != 0)
        return absl::InvalidArgumentError("unroll_ci must divide ic_block");
      if (c.Int("unroll_ci") * c.Int("ow_reg") * c.Int("oc_vecs") > 256)
        return absl::InvalidArgumentError("unrolled body too large");
      const int64_t m = winograd::OutputTile(Algorithm(c)), rows = c.Int("tile_rows", 1);
      if (m == 0 && rows != 1) return absl::InvalidArgumentError("tile_rows is a Winograd knob (direct: 1)");
      if (m > 0) {
        if (d.g > 1) return absl::InvalidArgumentError("Winograd computes ungrouped convolutions only");
        if (!winograd::Applies(d.r, d.s, d.stride, d.oh, d.ow, m))
          return absl::InvalidArgumentError(Algorithm(c) + " needs a 3x3 stride-1 convolution with OH and OW "
                                            "at least " + std::to_string(m));
        if (winograd::Tiles(d.oh, m) % rows != 0)
          return absl::InvalidArgumentError("tile_rows must divide ceil(OH / m)");
        if (rows * winograd::Tiles(d.ow, m) % c.Int("ow_reg") != 0)
          return absl::InvalidArgumentError("ow_reg must divide the output tiles of a work item");
        if (c.Str("reduce_order") != "crs") return absl::InvalidArgumentError("Winograd has one reduce_order (crs)");
      }
    }
    return absl::OkStatus();
  });
  // A Winograd kernel's loop features describe one of its stages: the knobs say the rest.
  space.set_knob_features(true);
  return space;
}

Config Conv2dTemplate::Naive(const TuningTask& task, const Target& target) const {
  (void)task;
  (void)target;
  json c{{"vec_lanes", 1}, {"oc_vecs", 1}, {"ow_reg", 1}, {"outer_order", "koh"}, {"parallel", 0}};
  if (depthwise_) {
    c["unroll_s"] = 0;
  } else {
    c["ic_block"] = 1;
    c["unroll_ci"] = 1;
    c["reduce_order"] = "crs";
  }
  return Config(c);
}

// Vectors of the target's width; one, two or four of them per output-channel block
// (16, 32 or 64 channels on AVX-512: more vectors reuse each input broadcast more
// often, fewer leave room for more pixels); the input-channel block as large as 16;
// row tiles that divide OW with as many pixels as the registers hold; both reduction
// orders and both outer orders; parallel when the target has threads. First (the
// default schedule of an untuned model): a two-vector tile for 1x1 convolutions,
// Winograd for 3x3 stride-1 ones where the output tiles fit (on AVX-512 only when
// the weights fit in the caches: see below).
std::vector<Config> Conv2dTemplate::Heuristics(const TuningTask& task, const Target& target) const {
  const ConvShape d = ShapeOf(task, depthwise_);
  ConfigSpace space = Space(task, target);
  // Appends c to *to when the space takes it and *to does not hold it yet.
  auto add_to = [&](std::vector<Config>* to, Config c) {
    if (space.Check(c).ok() && std::find(to->begin(), to->end(), c) == to->end()) to->push_back(std::move(c));
  };
  std::vector<Config> out;
  int64_t lanes = 1;
  for (int64_t v : {4, 8, 16})
    if (v <= target.MaxF32Lanes() && d.kg() % v == 0) lanes = v;
  int64_t x = 1;
  for (int64_t v : {2, 4, 8, 16})
    if (d.cg() % v == 0) x = v;
  // Accumulators the target's registers hold, with room for the filter vectors and a
  // broadcast: 24 of 32 (AVX-512, NEON, RVV), 12 of 16 (AVX2). The space allows up to
  // kMaxAccumulatorVectors everywhere; these are the configs worth trying first.
  const int64_t accumulators = std::min<int64_t>(kMaxAccumulatorVectors, target.VectorRegisters() * 3 / 4);
  for (int64_t vecs : {1, 2, 4}) {
    if (d.kg() % (lanes * vecs) != 0) continue;
    // Row tiles: least padding waste first, then the most pixels.
    std::vector<int64_t> tiles;
    for (int64_t t : {2, 3, 4, 5, 6, 7, 8, 12, 14, 16, 28})
      if (t <= d.ow && t * vecs <= accumulators) tiles.push_back(t);
    std::sort(tiles.begin(), tiles.end(), [&](int64_t a, int64_t b) {
      int64_t wa = (d.ow + a - 1) / a * a - d.ow, wb = (d.ow + b - 1) / b * b - d.ow;
      return wa != wb ? wa < wb : a > b;
    });
    if (tiles.size() > 2) tiles.resize(2);
    if (tiles.empty()) tiles.push_back(1);
    for (int64_t t : tiles) {
      // Depthwise has one reduction order; its second variant unrolls the column loop.
      for (const char* reduce : {"crs", "rsc"}) {
        for (const char* outer : {"koh", "ohk"}) {
          json c{{"vec_lanes", lanes}, {"oc_vecs", vecs}, {"ow_reg", t}, {"outer_order", outer},
                 {"parallel", target.num_threads > 1 ? 1 : 0}};
          if (depthwise_) {
            c["unroll_s"] = std::string(reduce) == "crs" ? 1 : 0;
          } else {
            c["ic_block"] = x;
            c["unroll_ci"] = std::min<int64_t>(x, 4);
            c["reduce_order"] = reduce;
          }
          add_to(&out, Config(c));
        }
      }
    }
  }
  if (depthwise_) return out;
  std::vector<Config> first;  // the default schedule and its next of kin
  std::optional<Config> direct_first;
  // The row tile of `vecs` channel vectors whose accumulators (at most
  // accumulators - 2) do the most useful work, counting the columns a row's last tile
  // computes past OW as lost; near ties (within 5%) go to the tile with less loss.
  // Returns {score, t, loss}.
  auto best_tile = [&](int64_t vecs) {
    double best_score = 0;
    int64_t best_t = 1, best_loss = 0;
    for (int64_t t : {2, 3, 4, 5, 6, 7, 8, 12, 14, 16, 28}) {
      if (t > d.ow || vecs * t > accumulators - 2) continue;
      const int64_t covered = (d.ow + t - 1) / t * t;
      const double score = static_cast<double>(vecs * t * d.ow) / static_cast<double>(covered);
      const int64_t loss = covered - d.ow;
      if (score > best_score * 1.05 || (score > best_score * 0.95 && loss < best_loss)) {
        best_score = score;
        best_t = t;
        best_loss = loss;
      }
    }
    return std::tuple<double, int64_t, int64_t>{best_score, best_t, best_loss};
  };
  // The parallel loop is the outer one: channel blocks outside (koh) need enough of
  // them to share among the threads (K=16 has one block: a single thread would do
  // the whole layer), else output rows go outside (ohk).
  const int64_t threads = std::max(1, target.num_threads);
  auto outer_for = [&](int64_t vecs, bool prefer_koh) {
    const int64_t blocks = d.k / (lanes * vecs);
    if (blocks < 2 * threads && d.oh > blocks) return "ohk";
    if (d.oh < 2 * threads && blocks > d.oh) return "koh";
    return prefer_koh ? "koh" : "ohk";
  };
  // A 1x1 convolution is a GEMM over pixels: two vectors of output channels halve
  // the broadcasts per FMA against one (three where two do not divide K/G: 48
  // channels; else one), and a tile of at most accumulators - 2 vectors leaves room
  // for the filter vectors and the broadcast without spilling. Measured on a Zen 3
  // (2 threads, ResNet-50's 1x1 shapes at 14..56 pixels): oc_vecs 2 x ow_reg 5 at
  // 0.74-0.79 ms against 1.06-1.11 ms for one vector x 7.
  if (d.r == 1 && d.s == 1) {
    int64_t vecs = 1;
    for (int64_t v : {3, 2})
      if (d.kg() % (lanes * v) == 0) vecs = v;
    // Vectors narrower than the machine's (K/G not a multiple of its lanes: a
    // classifier's 1000 channels take 8) do half the work per broadcast: five of them
    // where they divide K/G. Measured on a Zen 4 (2 threads, SqueezeNet's classifier,
    // C=512 K=1000 at 12x12): 5 x 8 lanes by 4 pixels 0.75 ms, one vector by 12
    // pixels 0.92 ms.
    if (vecs == 1 && lanes < target.MaxF32Lanes() && d.kg() % (lanes * 5) == 0) vecs = 5;
    const int64_t t = std::get<1>(best_tile(vecs));
    // The loop outside streams its data once, the one inside re-reads its own per
    // outer step: output rows outside (ohk) re-read all the weights per row, channel
    // blocks outside (koh) re-read the input per block. So the smaller of the two goes
    // inside. Measured on a Xeon (AVX-512, 2 threads): C=512 K=2048 at 7x7 (4 MB of
    // weights, 100 KB of input) 0.34 ms koh against 0.66 ms ohk.
    const bool weights_larger = d.k * d.cg() > d.n * d.c * d.h * d.w;
    const std::string outer = outer_for(vecs, weights_larger);
    for (const std::string& o : {outer, std::string(outer == "koh" ? "ohk" : "koh")}) {
      Config c(json{{"ic_block", x}, {"vec_lanes", lanes}, {"oc_vecs", vecs}, {"ow_reg", t},
                    {"unroll_ci", std::min<int64_t>(x, 4)}, {"reduce_order", "crs"},
                    {"outer_order", o}, {"parallel", target.num_threads > 1 ? 1 : 0}});
      add_to(&first, std::move(c));
    }
  }
  // Any other direct convolution: the channel block of 1-4 vectors and row tile
  // whose accumulators do the most useful work (best_tile). Measured on a Zen 3
  // (AlexNet's, ZFNet's and SqueezeNet's 3x3, 5x5 and 7x7 shapes): 2-3 vectors x 3-5
  // pixels at 1.2-2.7x the one-vector tiles.
  if (!(d.r == 1 && d.s == 1)) {
    double best_score = 0;
    int64_t best_vecs = 1, best_t = 1, best_loss = 0;
    for (int64_t vecs : {1, 2, 3, 4}) {
      if (d.kg() % (lanes * vecs) != 0) continue;
      const auto [score, t, loss] = best_tile(vecs);
      if (score > best_score * 1.05 || (score > best_score * 0.95 && loss < best_loss)) {
        best_score = score;
        best_vecs = vecs;
        best_t = t;
        best_loss = loss;
      }
    }
    direct_first = Config(json{{"ic_block", x}, {"vec_lanes", lanes}, {"oc_vecs", best_vecs}, {"ow_reg", best_t},
                               {"unroll_ci", std::min<int64_t>(x, 4)}, {"reduce_order", "crs"},
                               {"outer_order", outer_for(best_vecs, true)},
                               {"parallel", target.num_threads > 1 ? 1 : 0}});
  }
  // Winograd (F(4,3) before F(2,3), see below) where it applies: 2.5-4x the direct kernel's
  // speed on a Zen 3 for ResNet-50's and SqueezeNet's 3x3 convolutions at 13..56
  // pixels. Per output-channel block, the register tile of whole output tiles that
  // uses the most accumulators (ties: the wider channel block); both GEMM orders.
  // Which goes first is the one of less estimated work per channel pair: a*a
  // products per tile, and where the transformed weights (a*a per channel pair) do
  // not fit kStreamedWeightBytes, the time to stream them once, counted as 20
  // products per weight (2 Zen 4 cores do ~110 G products/s at their FMA peak and
  // read ~20 GB/s from memory). F(4,3) leads but for few tiles: ResNet's 512@7² has
  // 4 tiles of F(4,3) (2.2 ms, its 38 MB of weights used 4 times) against 16 of
  // F(2,3) (1.0 ms) on a Zen 4; 6x6 is a tie of products (4 x 36 = 9 x 16), which
  // F(2,3) takes, its transforms being cheaper.
  std::vector<const char*> algorithms = {"winograd_f43", "winograd_f23"};
  auto work = [&](const char* algorithm) {
    const int64_t m = winograd::OutputTile(algorithm), a = m + 2;
    const bool streamed = a * a * d.c * d.k * 4 > kStreamedWeightBytes;
    return a * a * (d.n * winograd::Tiles(d.oh, m) * winograd::Tiles(d.ow, m) + (streamed ? 20 : 0));
  };
  if (work("winograd_f23") <= work("winograd_f43")) std::swap(algorithms[0], algorithms[1]);
  std::vector<Config> winograd_configs;
  for (const char* algorithm : algorithms) {
    const int64_t m = winograd::OutputTile(algorithm);
    if (!winograd::Applies(d.r, d.s, d.stride, d.oh, d.ow, m)) continue;
    std::vector<std::pair<int64_t, int64_t>> tiles;  // (oc_vecs, ow_reg)
    for (int64_t vecs : {4, 2, 1}) {
      if (d.kg() % (lanes * vecs) != 0) continue;
      int64_t t = 1;
      for (int64_t v = 1; v * vecs <= accumulators; ++v)
        if (winograd::Tiles(d.ow, m) % v == 0) t = v;
      tiles.emplace_back(vecs, t);
    }
    std::stable_sort(tiles.begin(), tiles.end(),
                     [](const auto& a, const auto& b) { return a.first * a.second > b.first * b.second; });
    for (const auto& [vecs, t] : tiles) {
      for (const char* outer : {"koh", "ohk"}) {
        add_to(&winograd_configs, Config(json{{"algorithm", algorithm}, {"tile_rows", 1}, {"ic_block", x}, {"vec_lanes", lanes},
                                 {"oc_vecs", vecs}, {"ow_reg", t}, {"unroll_ci", std::min<int64_t>(x, 4)},
                                 {"reduce_order", "crs"}, {"outer_order", outer},
                                 {"parallel", target.num_threads > 1 ? 1 : 0}}));
      }
    }
  }
  // The rest alternate direct and Winograd, so a search that measures only the first
  // few heuristics meets both algorithms.
  //
  // Winograd's GEMM at one transform point uses each transformed weight once per
  // output tile, and its transformed weights are 16/9 (F(2,3)) or 4x (F(4,3)) the
  // direct kernel's; in a model they come from memory once per inference, while the
  // direct kernel uses each weight at every output pixel and streams them as it
  // computes (InstantiateStreamingWeights). So where the weights exceed
  // kStreamedWeightBytes and the image has few tiles (at most 64) the direct kernel
  // goes first, if its tile is wide enough to compete (AVX-512's 32 registers).
  // Measured on a Xeon (AVX-512, 2 threads, in ResNet-50 and VGG-16 at 224, ms per
  // layer, Winograd -> direct): 256 channels at 14x14 (49 F(2,3) tiles) 0.99 ->
  // 0.70, 512 at 14x14 8.2 -> 2.9, 512 at 28x28 (49 F(4,3) tiles) 10.7 -> 10.1;
  // but 256 at 56x56 (196 tiles) 4.7 -> 10.1 and 128 at 28x28 with 0.6 MB of
  // weights stay Winograd's. Alone, weights in cache, Winograd wins them all.
  std::vector<Config> mixed = first;
  if (direct_first && !winograd_configs.empty() && target.MaxF32Lanes() >= 16) {
    const int64_t m = winograd::OutputTile(winograd_configs[0].Str("algorithm"));
    const bool weights_streamed = d.k * d.cg() * d.r * d.s * 4 > kStreamedWeightBytes;
    if (weights_streamed && winograd::Tiles(d.oh, m) * winograd::Tiles(d.ow, m) <= 64) add_to(&mixed, *direct_first);
  }
  if (!winograd_configs.empty()) add_to(&mixed, winograd_configs[0]);
  if (direct_first) add_to(&mixed, *direct_first);
  for (size_t i = 0; i < std::max(out.size(), winograd_configs.size()); ++i) {
    if (i < winograd_configs.size()) add_to(&mixed, winograd_configs[i]);
    if (i < out.size()) add_to(&mixed, out[i]);
  }
  return mixed;
}

double Conv2dTemplate::Flops(const TuningTask& task, const Config& config) const {
  const int64_t m = depthwise_ ? 0 : winograd::OutputTile(Algorithm(config));
  if (m == 0) return task.Flops();
  const ConvShape d = ShapeOf(task, false);
  const double tiles = static_cast<double>(d.n) * winograd::Tiles(d.oh, m) * winograd::Tiles(d.ow, m);
  return 2.0 * tiles * (m + 2) * (m + 2) * static_cast<double>(d.c) * static_cast<double>(d.k);
}

absl::StatusOr<ir::LoweredFunc> Conv2dTemplate::Instantiate(const TuningTask& task,
                                                            const Target& target,
                                                            const Config& config) const {
  return Build(task, target, config, false);
}

absl::StatusOr<ir::LoweredFunc> Conv2dTemplate::InstantiateKernel(const TuningTask& task,
                                                                  const Target& target,
                                                                  const Config& config) const {
  return Build(task, target, config, false, nullptr, /*kernel_only=*/true);
}

absl::StatusOr<ir::LoweredFunc> Conv2dTemplate::InstantiateStreamingWeights(const TuningTask& task,
                                                                            const Target& target,
                                                                            const Config& config) const {
  return Build(task, target, config, !depthwise_);
}

bool Conv2dTemplate::CanWriteInto(const Config& config, int64_t block, int64_t residual_block) {
  const int64_t lanes = config.Int("vec_lanes"), y = lanes * config.Int("oc_vecs");
  if (block <= 0) return false;
  // Winograd's output transform writes runs of `lanes` channels.
  if (Algorithm(config) != "direct") return block % lanes == 0 && (residual_block == 0 || residual_block % lanes == 0);
  // The channels one ko loop covers: y, or z when y is split in z runs.
  int64_t run = 0;
  if (block % y == 0) {
    run = y;
  } else if (y % block == 0 && block % lanes == 0) {
    run = block;
  } else {
    return false;
  }
  return residual_block == 0 || residual_block % run == 0;
}

absl::StatusOr<ir::LoweredFunc> Conv2dTemplate::InstantiateInto(const TuningTask& task, const Target& target,
                                                                const Config& config, bool prefetch_weights,
                                                                const ConvOutputSpec& spec) const {
  if (!CanWriteInto(config, spec.block, 0)) {
    return absl::InvalidArgumentError("config " + config.ToJson() + " cannot write blocks of " +
                                      std::to_string(spec.block) + " channels");
  }
  return Build(task, target, config, prefetch_weights && !depthwise_, &spec);
}

std::string Conv2dTemplate::Symbol(const TuningTask& task, const Config& config, bool kernel_only) const {
  // The cost model's kernels are never compiled: no need to hash the config (a few
  // percent of their lowering).
  return kernel_only ? CostModelKernelName(task) : KernelSymbol(task, *this, config);
}

absl::StatusOr<ir::LoweredFunc> Conv2dTemplate::Build(const TuningTask& task, const Target& target,
                                                      const Config& config, bool prefetch_weights,
                                                      const ConvOutputSpec* spec, bool kernel_only) const {
  const std::string op = depthwise_ ? "depthwise_conv2d" : "conv2d";
  if (task.op() != op) return absl::InvalidArgumentError(name() + " template got " + task.op());
  RETURN_IF_ERROR(SpaceOf(*this, task, target)->Check(config));
  const ConvShape d = ShapeOf(task, depthwise_);
  const int64_t lanes = config.Int("vec_lanes"), y = lanes * config.Int("oc_vecs");
  const int64_t x = depthwise_ ? y : config.Int("ic_block");
  if (!depthwise_ && Algorithm(config) != "direct") return BuildWinograd(task, config, x, y, spec, kernel_only);

  Schedule s(ConvCompute(d, x, y, depthwise_, spec));
  const bool runs = OutputRuns(y, spec) > 1;  // the kx axis exists
  RETURN_IF_ERROR(s.Split("ow", config.Int("ow_reg"), "ow.o", "ow.i"));
  RETURN_IF_ERROR(s.Split("ko", lanes, "ko.v", "ko.l"));
  const bool koh = config.Str("outer_order") == "koh";
  std::vector<std::string> order = {"n", koh ? "kb" : "oh", koh ? "oh" : "kb", "ow.o"};
  std::string first_reduce;
  if (depthwise_) {
    order.insert(order.end(), {"r", "s"});
    first_reduce = "r";
  } else {
    RETURN_IF_ERROR(s.Split("ci", config.Int("unroll_ci"), "ci.o", "ci.u"));
    if (config.Str("reduce_order") == "crs") {
      order.insert(order.end(), {"cb", "r", "s"});
      first_reduce = "cb";
    } else {
      order.insert(order.end(), {"r", "s", "cb"});
      first_reduce = "r";
    }
    order.insert(order.end(), {"ci.o", "ci.u"});
  }
  order.push_back("ow.i");
  if (runs) order.push_back("kx");
  order.insert(order.end(), {"ko.v", "ko.l"});
  RETURN_IF_ERROR(s.Reorder(order));
  if (runs) RETURN_IF_ERROR(s.Unroll("kx"));
  if (!depthwise_) RETURN_IF_ERROR(s.Unroll("ci.u"));
  if (depthwise_ && config.Int("unroll_s")) RETURN_IF_ERROR(s.Unroll("s"));
  RETURN_IF_ERROR(s.Unroll("ow.i"));
  RETURN_IF_ERROR(s.Unroll("ko.v"));
  if (lanes > 1) RETURN_IF_ERROR(s.Vectorize("ko.l"));
  if (config.Int("parallel")) RETURN_IF_ERROR(s.Parallel(order[1]));
  RETURN_IF_ERROR(s.CacheWrite(first_reduce));
  ASSIGN_OR_RETURN(ir::LoweredFunc func, Lower(s, Symbol(task, config, kernel_only)));
  // Lowering wrote O.blocked (or spec's buffer) as "the output"; the task's output is
  // O (see ConvCompute).
  func.params[4].is_output = false;
  func.params[4].is_internal = true;
  func.params[5].is_output = !spec;
  func.params[5].is_internal = spec != nullptr;  // unused then
  func.body = SkipBorderRows(func.body, d);
  if (prefetch_weights) func.body = PrefetchNextWeightBlock(func.body, d, func.params[3].shape, config);
  func.body = SkipBorderColumns(func.body, d, config.Int("ow_reg"));
  if (kernel_only) return func;
  func.prepack = PrepackStmt(d, x, y, depthwise_);
  func.unpack = UnpackStmt(d, y);
  return func;
}

absl::StatusOr<ir::LoweredFunc> Conv2dTemplate::BuildWinograd(const TuningTask& task, const Config& config,
                                                              int64_t x, int64_t y,
                                                              const ConvOutputSpec* spec, bool kernel_only) const {
  const ConvShape d = ShapeOf(task, false);
  const winograd::Plan plan{d.n,
                            d.c,
                            d.k,
                            d.hp(),
                            d.wp(),
                            d.oh,
                            d.ow,
                            winograd::OutputTile(Algorithm(config)),
                            x,
                            y,
                            config.Int("vec_lanes"),
                            config.Int("ow_reg"),
                            config.Int("tile_rows", 1),
                            config.Int("unroll_ci"),
                            config.Str("outer_order") == "ohk",
                            config.Int("parallel") != 0,
                            spec};
  auto internal = [](std::string name, std::vector<int64_t> shape) {
    ir::BufferParam p{std::move(name), ir::DType::kFloat32, std::move(shape), false};
    p.is_internal = true;
    return p;
  };
  ir::LoweredFunc func;
  func.name = Symbol(task, config, kernel_only);
  func.params = {
      ir::BufferParam{"I", ir::DType::kFloat32, {d.n, d.c, d.h, d.w}, false},
      ir::BufferParam{"F", ir::DType::kFloat32, {d.k, d.c, d.r, d.s}, false},
      internal("I.blocked", {d.n, d.c / x, d.hp(), d.wp(), x}),
      internal("F.blocked", winograd::WeightShape(plan)),
      internal("O.blocked", {d.n, d.k / y, d.oh, d.ow, y}),
      ir::BufferParam{"O", ir::DType::kFloat32, {d.n, d.k, d.oh, d.ow}, spec == nullptr},
  };
  if (spec) {  // as Build's direct kernel: O unused, the epilogue's inputs, then spec's buffer
    func.params[5].is_internal = true;
    func.params.insert(func.params.end(), spec->inputs.begin(), spec->inputs.end());
    func.params.push_back(ir::BufferParam{
        spec->buffer, ir::DType::kFloat32, {d.n, d.k / spec->block, d.oh + 2 * spec->pad_h, d.ow + 2 * spec->pad_w, spec->block},
        true});
  }
  func.body = winograd::Kernel(plan);
  if (kernel_only) return func;
  func.prepack = ir::Block({InputPrepackStmt(d, x), winograd::WeightTransform(plan)});
  func.unpack = UnpackStmt(d, y);
  return func;
}

}  // namespace tuneforge

// conv2d_winograd: Winograd F(m x m, 3 x 3) transforms and batched GEMM.
#include "compiler/templates/conv2d_winograd.h"

#include <functional>
#include <map>
#include <mutex>
#include <numeric>
#include <vector>

#include "compiler/support/status.h"
#include "compiler/templates/loop_nest.h"

namespace tuneforge::winograd {
namespace {

using ir::Expr;
using ir::Stmt;

// The transform matrices of F(m, 3) with a = m + 2 input points (m x a, a x a, a x 3).
struct Transforms {
  int64_t m, a;
  std::vector<std::vector<double>> at, bt, g;
};

// Interpolation points 0, -1, 1 and infinity (m = 2); 0, +-1, +-2 and infinity (m = 4).
const Transforms& TransformsFor(int64_t m) {
  static const Transforms f23{2,
                              4,
                              {{1, 1, 1, 0}, {0, 1, -1, -1}},
                              {{1, 0, -1, 0}, {0, 1, 1, 0}, {0, -1, 1, 0}, {0, 1, 0, -1}},
                              {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}}};
  static const Transforms f43{
      4,
      6,
      {{1, 1, 1, 1, 1, 0}, {0, 1, -1, 2, -2, 0}, {0, 1, 1, 4, 4, 0}, {0, 1, -1, 8, -8, 1}},
      {{4, 0, -5, 0, 1, 0},
       {0, -4, -4, 1, 1, 0},
       {0, 4, -4, -1, 1, 0},
       {0, -2, -1, 2, 1, 0},
       {0, 2, -1, -2, 1, 0},
       {0, 4, 0, -5, 0, 1}},
      {{1.0 / 4, 0, 0},
       {-1.0 / 6, -1.0 / 6, -1.0 / 6},
       {-1.0 / 6, 1.0 / 6, -1.0 / 6},
       {1.0 / 24, 1.0 / 12, 1.0 / 6},
       {1.0 / 24, -1.0 / 12, 1.0 / 6},
       {0, 0, 1}}};
  TF_CHECK(m == 2 || m == 4, "no Winograd transforms for m = ", m);
  return m == 2 ? f23 : f43;
}

Expr I(int64_t v) { return ir::IntImm(v); }

// The node of coefficient `c`. The transforms have a few distinct coefficients that a
// kernel's sums use hundreds of times, so each is built once per thread.
Expr Coefficient(double c) {
  thread_local std::vector<std::pair<double, Expr>> built;
  for (const auto& [value, node] : built)
    if (value == c) return node;
  built.emplace_back(c, ir::FloatImm(c));
  return built.back().second;
}

// sum_i coef[i] * term(i), leaving out zero coefficients and terms known to be zero
// (a null term) and multiplying by +-1 as an add or subtract. Null when every term is
// left out.
Expr Combine(const std::vector<double>& coef, const std::function<Expr(int64_t)>& term) {
  Expr sum;
  for (size_t i = 0; i < coef.size(); ++i) {
    const double c = coef[i];
    if (c == 0) continue;
    Expr t = term(static_cast<int64_t>(i));
    if (!t) continue;
    if (!sum) {
      sum = c == 1 ? t : ir::Mul(Coefficient(c), t);
    } else if (c == 1) {
      sum = ir::Add(sum, t);
    } else if (c == -1) {
      sum = ir::Sub(sum, t);
    } else {
      sum = ir::Add(sum, ir::Mul(Coefficient(c), t));
    }
  }
  return sum;
}

// Combine's sum, or 0 when it has no terms.
Expr CombineOrZero(const std::vector<double>& coef, const std::function<Expr(int64_t)>& term) {
  Expr sum = Combine(coef, term);
  return sum ? sum : ir::FloatImm(0.0);
}

Expr LoadF(const std::string& buffer, Expr index) { return ir::Load(buffer, ir::DType::kFloat32, std::move(index)); }

// The transform stages of a kernel, built once for the plan fields they read. A tuning
// job lowers thousands of kernels of one task (the cost model scores ~20,000 a
// second), and its Winograd candidates share a few hundred input and output
// transforms (the input's depends on the input-channel block, its lanes and the
// group's rows only), which are most of the nodes of a kernel. IR nodes are immutable,
// so the kernels share the stages' nodes, across threads too: the scoring workers are
// new threads for every batch. The key's first element names the stage.
struct SharedStages {
  std::mutex mu;
  std::map<std::vector<int64_t>, Stmt> stages;
};
SharedStages& Shared() {
  static SharedStages* shared = new SharedStages;  // never destroyed: threads may outlive main
  return *shared;
}

Stmt Memoized(std::vector<int64_t> key, const std::function<Stmt()>& build) {
  constexpr size_t kMaxStages = 1024;  // ~20 KB each (conv2d 128@28^2: 320 of them, +6 MB)
  auto& [mu, stages] = Shared();
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = stages.find(key);
    if (it != stages.end()) return it->second;
  }
  Stmt built = build();  // outside the lock; two threads may build the same stage alike
  std::lock_guard<std::mutex> lock(mu);
  if (stages.size() >= kMaxStages) stages.clear();
  return stages.emplace(std::move(key), built).first->second;
}

enum Stage : int64_t { kInputTransform, kOutputTransform };

}  // namespace

void ForgetSharedStages() {
  std::lock_guard<std::mutex> lock(Shared().mu);
  Shared().stages.clear();
}

int64_t OutputTile(const std::string& algorithm) {
  if (algorithm == "winograd_f23") return 2;
  if (algorithm == "winograd_f43") return 4;
  return 0;
}

bool Applies(int64_t r, int64_t s, int64_t stride, int64_t oh, int64_t ow, int64_t m) {
  return m > 0 && r == 3 && s == 3 && stride == 1 && oh >= m && ow >= m;
}

int64_t Tiles(int64_t extent, int64_t m) { return (extent + m - 1) / m; }

std::vector<int64_t> WeightShape(const Plan& p) {
  const int64_t a = p.m + 2;
  return {p.k / p.y, a * a, p.c / p.x, p.x, p.y};
}

Stmt WeightTransform(const Plan& p) {
  const Transforms& t = TransformsFor(p.m);
  const int64_t a = t.a, cb = p.c / p.x, kb = p.k / p.y;
  const LoopSpec kb_loop{"p.kb", kb}, cb_loop{"p.cb", cb}, ci_loop{"p.ci", p.x}, ko_loop{"p.ko", p.y};
  const Expr kbv = LoopVar(kb_loop.var, kb), cbv = LoopVar(cb_loop.var, cb), ci = LoopVar(ci_loop.var, p.x),
             ko = LoopVar(ko_loop.var, p.y);
  const Expr c = ir::Add(ir::Mul(cbv, I(p.x)), ci);
  const Expr k = ir::Add(ir::Mul(kbv, I(p.y)), ko);
  // g[k][c][r][s] is at f_base + 3 r + s; U's point (xi, nu) at u_base + (xi a + nu) C y.
  const Expr f_base = Flat({k, c, I(0), I(0)}, {p.k, p.c, 3, 3});
  const Expr u_base = Flat({kbv, I(0), cbv, ci, ko}, WeightShape(p));
  std::vector<Stmt> parts;
  for (int64_t xi = 0; xi < a; ++xi) {
    for (int64_t nu = 0; nu < a; ++nu) {
      // U[xi][nu] = sum_r sum_s G[xi][r] g[r][s] G[nu][s].
      std::vector<double> coef;
      for (int64_t r = 0; r < 3; ++r)
        for (int64_t s = 0; s < 3; ++s) coef.push_back(t.g[xi][r] * t.g[nu][s]);
      Expr value = CombineOrZero(coef, [&](int64_t rs) { return LoadF("F", ir::Add(f_base, I(rs))); });
      parts.push_back(Loops({kb_loop, cb_loop, ci_loop, ko_loop},
                            ir::Store("F.blocked", ir::Add(u_base, I((xi * a + nu) * p.c * p.y)), value),
                            LeftOutVars::kAbsent));
    }
  }
  return ir::Block(std::move(parts));
}

// The kernel is written for lowering speed as well as for what it computes: the cost
// model lowers thousands of candidates per second, and the transforms unroll to
// hundreds of stores. So every variable of a loop Loops leaves out (extent 1) is
// already 0 (LoopVar; no substitution pass over the body), and the indices of the
// unrolled stores are one shared base expression plus a constant offset each.
Stmt Kernel(const Plan& p) {
  using ir::Add;
  using ir::Allocate;
  using ir::Block;
  using ir::Mul;
  using ir::Store;
  constexpr ir::ForKind kUnrolled = ir::ForKind::kUnrolled, kVectorized = ir::ForKind::kVectorized,
                        kSerial = ir::ForKind::kSerial;
  constexpr LeftOutVars kWritten = LeftOutVars::kAbsent;
  const Transforms& t = TransformsFor(p.m);
  const int64_t m = p.m, a = t.a, aa = a * a;
  const int64_t cb = p.c / p.x, kb = p.k / p.y;
  const int64_t tiles_w = Tiles(p.ow, m), tiles_h = Tiles(p.oh, m);
  // The outputs past OH and OW in the last row and column of tiles (partial tiles).
  const int64_t extra_h = tiles_h * m - p.oh, extra_w = tiles_w * m - p.ow;
  const int64_t group = p.tile_rows * tiles_w, groups = tiles_h / p.tile_rows;
  const int64_t reg = p.tiles, lanes = p.lanes;
  TF_CHECK(group % reg == 0 && tiles_h % p.tile_rows == 0 && p.y % lanes == 0 && p.x % p.unroll == 0 &&
               (!p.spec || p.spec->block % lanes == 0),
           "inconsistent Winograd plan");
  const int64_t in_lanes = std::gcd(p.x, lanes);
  const int64_t m_tiles = p.tile_outer ? reg : group;  // tiles in M: a register tile's or the group's
  // The loops and their variables (0 for a loop of extent 1).
  const LoopSpec n_loop{"n", p.n}, g_loop{"w.g", groups, p.parallel ? ir::ForKind::kParallel : kSerial},
      cb_loop{"w.cb", cb}, t_loop{"w.t", group}, co_loop{"w.co", p.x / in_lanes},
      cl_loop{"w.cl", in_lanes, kVectorized}, kb_loop{"w.kb", kb}, to_loop{"w.to", group / reg},
      ti_loop{"w.ti", reg, kUnrolled}, kv_loop{"w.kv", p.y / lanes, kUnrolled},
      kl_loop{"w.kl", lanes, kVectorized}, cio_loop{"w.cio", p.x / p.unroll},
      ciu_loop{"w.ciu", p.unroll, kUnrolled}, xi_loop{"w.xi", aa}, tj_loop{"w.tj", m_tiles},
      ov_loop{"w.ov", p.y / lanes}, ol_loop{"w.ol", lanes, kVectorized};
  auto var = [](const LoopSpec& l) { return LoopVar(l.var, l.extent); };
  const Expr n = var(n_loop), g = var(g_loop), cbv = var(cb_loop), tv = var(t_loop), co = var(co_loop),
             cl = var(cl_loop), kbv = var(kb_loop), to = var(to_loop), ti = var(ti_loop), kv = var(kv_loop),
             kl = var(kl_loop), cio = var(cio_loop), ciu = var(ciu_loop), xiv = var(xi_loop),
             tj = var(tj_loop), ov = var(ov_loop), ol = var(ol_loop);
  // Tile `tt` of the group: its output tile's row and column.
  auto tile_row = [&](Expr tt) { return Add(Mul(g, I(p.tile_rows)), ir::Div(tt, I(tiles_w))); };
  auto tile_col = [&](Expr tt) { return ir::Mod(tt, I(tiles_w)); };
  // make(full, full), or in the last row or column of tiles where those are partial,
  // make(rows, cols) with the points of tile `tt` that are inside (`full` of each less
  // the extra ones).
  auto by_tile = [&](Expr tt, int64_t full, const std::function<Stmt(int64_t, int64_t)>& make) {
    auto row_variants = [&](int64_t cols) {
      Stmt whole = make(full, cols);
      if (extra_h == 0) return whole;
      return ir::IfThenElse(ir::EQ(tile_row(tt), I(tiles_h - 1)), make(full - extra_h, cols), whole);
    };
    Stmt inner = row_variants(full);
    if (extra_w == 0) return inner;
    return ir::IfThenElse(ir::EQ(tile_col(tt), I(tiles_w - 1)), row_variants(full - extra_w), inner);
  };
  // The transformed input of the group: [a*a, C/x, group, x].
  auto v_index = [&](Expr xi, Expr cbe, Expr tt, Expr ci) { return Flat({xi, cbe, tt, ci}, {aa, cb, group, p.x}); };
  const int64_t v_point_stride = cb * group * p.x;

  // Each load of a transform is built once and shared by the sums that read it (IR
  // nodes are immutable, so a subtree may have several parents).
  auto once = [](int64_t count, std::function<Expr(int64_t, int64_t)> make, int64_t cols) {
    return [cache = std::vector<Expr>(count), make = std::move(make), cols](int64_t r, int64_t c) mutable {
      Expr& e = cache[r * cols + c];
      if (!e) e = make(r, c);
      return e;
    };
  };

  // 1. Input transform, vectorized over `in_lanes` channels of a block: w.d = B^T d,
  // then V = (B^T d) B. It reads the shape, m, x, in_lanes and tile_rows. A patch of
  // the last row or column of partial tiles reaches past the padded input; its points
  // there are zeros (they reach only the outputs past OH and OW, which are dropped).
  auto build_input = [&] {
    const Expr ci = Add(Mul(co, I(in_lanes)), cl);
    // The patch's element (i, j) is at patch_base + (i * wp + j) * x.
    const Expr patch_base = Flat({n, cbv, Mul(tile_row(tv), I(m)), Mul(tile_col(tv), I(m)), ci},
                                 {p.n, cb, p.hp, p.wp, p.x});
    auto patch = [&](int64_t i, int64_t j) {
      return LoadF("I.blocked", Add(patch_base, I((i * p.wp + j) * p.x)));
    };
    auto d_index = [&](int64_t xi, int64_t j) { return Add(I((xi * a + j) * in_lanes), cl); };
    const Expr v_base = v_index(I(0), cbv, tv, ci);
    auto patch_load = once(aa, patch, a);
    auto d_load = once(
        aa, [&](int64_t xi, int64_t j) { return LoadF("w.d", d_index(xi, j)); }, a);
    // The transform of a patch whose first `rows` x `cols` points are inside.
    auto transform = [&](int64_t rows, int64_t cols) {
      std::vector<Stmt> stages;
      std::vector<bool> zero(aa);  // the points of w.d known to be 0 (not stored)
      for (int64_t xi = 0; xi < a; ++xi) {
        for (int64_t j = 0; j < a; ++j) {
          Expr d = Combine(t.bt[xi], [&](int64_t i) { return i < rows && j < cols ? patch_load(i, j) : nullptr; });
          zero[xi * a + j] = !d;
          if (d) stages.push_back(Loops({cl_loop}, Store("w.d", d_index(xi, j), d), kWritten));
        }
      }
      for (int64_t xi = 0; xi < a; ++xi)
        for (int64_t nu = 0; nu < a; ++nu)
          stages.push_back(Loops({cl_loop},
                                 Store("w.V", Add(v_base, I((xi * a + nu) * v_point_stride)),
                                       CombineOrZero(t.bt[nu], [&](int64_t j) {
                                         return zero[xi * a + j] ? nullptr : d_load(xi, j);
                                       })),
                                 kWritten));
      return Block(std::move(stages));
    };
    return Loops({cb_loop, t_loop, co_loop},
                 Allocate("w.d", ir::DType::kFloat32, aa * in_lanes, by_tile(tv, a, transform)), kWritten);
  };
  const Stmt input =
      Memoized({kInputTransform, p.n, p.c, p.hp, p.wp, p.oh, p.ow, m, p.x, in_lanes, p.tile_rows},
               build_input);

  // M, the GEMM's result: [a*a, m_tiles, y]; its point `xi`, tile `tt`, channel `k`.
  auto m_index = [&](Expr xi, Expr tt, Expr k) { return Flat({xi, tt, k}, {aa, m_tiles, p.y}); };
  const int64_t m_point_stride = m_tiles * p.y;

  // 2. One register tile of the GEMM for transform point `xi`: tiles t0 .. t0+reg-1
  // x the output-channel block w.kb, into w.M at m_index(xi, m0 + tile in the
  // register tile, channel).
  const Expr ko = Add(Mul(kv, I(lanes)), kl);
  const Expr acc = Add(Mul(ti, I(p.y)), ko);
  auto over_tile = [&](Stmt body) { return Loops({ti_loop, kv_loop, kl_loop}, std::move(body), kWritten); };
  auto gemm = [&](Expr xi, Expr t0, Expr m0) {
    const Expr c_in = Add(Mul(cio, I(p.unroll)), ciu);
    Stmt zero = over_tile(Store("w.acc", acc, ir::FloatImm(0.0)));
    Stmt fma = Loops(
        {cb_loop, cio_loop, ciu_loop},
        over_tile(Store("w.acc", acc,
                        Add(LoadF("w.acc", acc),
                            Mul(LoadF("w.V", v_index(xi, cbv, Add(t0, ti), c_in)),
                                LoadF("F.blocked", Flat({kbv, xi, cbv, c_in, ko}, WeightShape(p))))))),
        kWritten);
    Stmt out = over_tile(Store("w.M", m_index(xi, Add(m0, ti), ko), LoadF("w.acc", acc)));
    return Allocate("w.acc", ir::DType::kFloat32, reg * p.y, Block({zero, fma, out}));
  };

  // 3. Output transform of the group's tile `tt`, whose M is at m_index(., mt, .):
  // w.s = A^T M, then Y = (A^T M) A, vectorized over the channels; of a partial tile,
  // only its outputs inside OH x OW.
  auto output = [&](Expr tt, Expr mt) {
    const Expr k_out = Add(Mul(ov, I(lanes)), ol);
    auto s_index = [&](int64_t r, int64_t j) { return Add(I((r * a + j) * lanes), ol); };
    const Expr m_base = m_index(I(0), mt, k_out);
    auto m_load = once(aa, [&](int64_t i, int64_t j) { return LoadF("w.M", Add(m_base, I((i * a + j) * m_point_stride))); }, a);
    auto s_load = once(m * a, [&](int64_t r, int64_t j) { return LoadF("w.s", s_index(r, j)); }, a);
    // The output's channel run: `lanes` channels from `base`, inside one block of the
    // spec's layout (its block is a multiple of lanes).
    const Expr base = Add(Mul(kbv, I(p.y)), Mul(ov, I(lanes)));
    // Without a spec, output (r, col) of the tile is at out_base + (r * ow + col) * y.
    const Expr oh0 = Mul(tile_row(tt), I(m)), ow0 = Mul(tile_col(tt), I(m));
    const Expr out_base = Flat({n, kbv, oh0, ow0, k_out}, {p.n, kb, p.oh, p.ow, p.y});
    // The transform of a tile whose first `rows` x `cols` outputs are inside.
    auto transform = [&](int64_t rows, int64_t cols) {
      std::vector<Stmt> st;
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < a; ++j)
          st.push_back(Loops({ol_loop},
                             Store("w.s", s_index(r, j), Combine(t.at[r], [&](int64_t i) { return m_load(i, j); })),
                             kWritten));
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t col = 0; col < cols; ++col) {
          Expr value = Combine(t.at[col], [&](int64_t j) { return s_load(r, j); });
          Stmt store;
          if (!p.spec) {
            store = Store("O.blocked", Add(out_base, I((r * p.ow + col) * p.y)), value);
          } else {
            const ConvOutputSpec& o = *p.spec;
            const Expr lane = lanes > 1 ? ol : I(0);
            const Expr oh = Add(oh0, I(r)), ow = Add(ow0, I(col));
            store = Store(o.buffer,
                          Flat({n, ir::Div(base, I(o.block)), Add(oh, I(o.pad_h)), Add(ow, I(o.pad_w)),
                                Add(ir::Mod(base, I(o.block)), lane)},
                               {p.n, p.k / o.block, p.oh + 2 * o.pad_h, p.ow + 2 * o.pad_w, o.block}),
                          o.epilogue(value, n, base, lane, oh, ow));
          }
          st.push_back(Loops({ol_loop}, store, kWritten));
        }
      }
      return Block(std::move(st));
    };
    return Loops({ov_loop}, Allocate("w.s", ir::DType::kFloat32, m * a * lanes, by_tile(tt, m, transform)),
                 kWritten);
  };

  // The output transform reads the shape, m, y, lanes, tile_rows and which tile `tt` is
  // (tile_outer: w.to's register tile of `reg` tiles, else the group's). Written into a
  // reader through a spec's epilogue, it is not memoized.
  auto output_of = [&](Expr tt, Expr mt) {
    if (p.spec) return output(tt, mt);
    return Memoized({kOutputTransform, p.n, p.k, p.oh, p.ow, m, p.y, lanes, p.tile_rows,
                     p.tile_outer, p.tile_outer ? reg : 0},
                    [&] { return output(tt, mt); });
  };

  Stmt per_block;  // the body of the output-channel block loop w.kb
  Stmt group_body;
  if (p.tile_outer) {
    // M of one register tile, local.
    const Expr t0 = Mul(to, I(reg));
    per_block = Loops({to_loop},
                      Allocate("w.M", ir::DType::kFloat32, aa * reg * p.y,
                               Block({Loops({xi_loop}, gemm(xiv, t0, I(0)), kWritten),
                                      Loops({tj_loop}, output_of(Add(t0, tj), tj), kWritten)})),
                      kWritten);
    group_body = Block({input, Loops({kb_loop}, per_block, kWritten)});
  } else {
    // M of the whole group, scratch.
    per_block = Block({Loops({xi_loop, to_loop}, gemm(xiv, Mul(to, I(reg)), Mul(to, I(reg))), kWritten),
                       Loops({tj_loop}, output_of(tj, tj), kWritten)});
    group_body = Allocate("w.M", ir::DType::kFloat32, aa * group * p.y,
                          Block({input, Loops({kb_loop}, per_block, kWritten)}), ir::MemoryScope::kHeap);
  }
  group_body = Allocate("w.V", ir::DType::kFloat32, aa * cb * group * p.x, group_body, ir::MemoryScope::kHeap);
  return Loops({n_loop, g_loop}, group_body, kWritten);
}

}  // namespace tuneforge::winograd

#include "compiler/templates/conv2d_winograd.h"

#include <functional>
#include <numeric>

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

Expr V(const std::string& name) { return ir::Var(name); }
Expr I(int64_t v) { return ir::IntImm(v); }

// sum_i coef[i] * term(i), leaving out zero coefficients and multiplying by +-1 as an
// add or subtract.
Expr Combine(const std::vector<double>& coef, const std::function<Expr(int64_t)>& term) {
  Expr sum;
  for (size_t i = 0; i < coef.size(); ++i) {
    const double c = coef[i];
    if (c == 0) continue;
    Expr t = term(static_cast<int64_t>(i));
    if (!sum) {
      sum = c == 1 ? t : ir::Mul(ir::FloatImm(c), t);
    } else if (c == 1) {
      sum = ir::Add(sum, t);
    } else if (c == -1) {
      sum = ir::Sub(sum, t);
    } else {
      sum = ir::Add(sum, ir::Mul(ir::FloatImm(c), t));
    }
  }
  TF_CHECK(sum != nullptr, "a transform row of zeros");
  return sum;
}

Expr LoadF(const std::string& buffer, Expr index) { return ir::Load(buffer, ir::DType::kFloat32, std::move(index)); }

}  // namespace

int64_t OutputTile(const std::string& algorithm) {
  if (algorithm == "winograd_f23") return 2;
  if (algorithm == "winograd_f43") return 4;
  return 0;
}

bool Applies(int64_t r, int64_t s, int64_t stride, int64_t oh, int64_t ow, int64_t m) {
  return m > 0 && r == 3 && s == 3 && stride == 1 && oh % m == 0 && ow % m == 0;
}

std::vector<int64_t> WeightShape(const Plan& p) {
  const int64_t a = p.m + 2;
  return {p.k / p.y, a * a, p.c / p.x, p.x, p.y};
}

Stmt WeightTransform(const Plan& p) {
  const Transforms& t = TransformsFor(p.m);
  const int64_t a = t.a, cb = p.c / p.x, kb = p.k / p.y;
  const Expr c = ir::Add(ir::Mul(V("p.cb"), I(p.x)), V("p.ci"));
  const Expr k = ir::Add(ir::Mul(V("p.kb"), I(p.y)), V("p.ko"));
  std::vector<Stmt> parts;
  for (int64_t xi = 0; xi < a; ++xi) {
    for (int64_t nu = 0; nu < a; ++nu) {
      // U[xi][nu] = sum_r sum_s G[xi][r] g[r][s] G[nu][s].
      std::vector<double> coef;
      for (int64_t r = 0; r < 3; ++r)
        for (int64_t s = 0; s < 3; ++s) coef.push_back(t.g[xi][r] * t.g[nu][s]);
      Expr value = Combine(coef, [&](int64_t rs) {
        return LoadF("F", Flat({k, c, I(rs / 3), I(rs % 3)}, {p.k, p.c, 3, 3}));
      });
      parts.push_back(Loops({{"p.kb", kb}, {"p.cb", cb}, {"p.ci", p.x}, {"p.ko", p.y}},
                            ir::Store("F.blocked",
                                      Flat({V("p.kb"), I(xi * a + nu), V("p.cb"), V("p.ci"), V("p.ko")},
                                           WeightShape(p)),
                                      value)));
    }
  }
  return ir::Block(std::move(parts));
}

Stmt Kernel(const Plan& p) {
  using ir::Add;
  using ir::Allocate;
  using ir::Block;
  using ir::Mul;
  using ir::Store;
  constexpr ir::ForKind kUnrolled = ir::ForKind::kUnrolled, kVectorized = ir::ForKind::kVectorized,
                        kSerial = ir::ForKind::kSerial;
  const Transforms& t = TransformsFor(p.m);
  const int64_t m = p.m, a = t.a, aa = a * a;
  const int64_t cb = p.c / p.x, kb = p.k / p.y;
  const int64_t tiles_w = p.ow / m, tiles_h = p.oh / m;
  const int64_t group = p.tile_rows * tiles_w, groups = tiles_h / p.tile_rows;
  const int64_t reg = p.tiles, lanes = p.lanes;
  TF_CHECK(group % reg == 0 && tiles_h % p.tile_rows == 0 && p.y % lanes == 0 && p.x % p.unroll == 0 &&
               (!p.spec || p.spec->block % lanes == 0),
           "inconsistent Winograd plan");
  // Tile `tt` of the group: its output tile's row and column.
  auto tile_row = [&](Expr tt) { return Add(Mul(V("w.g"), I(p.tile_rows)), ir::Div(tt, I(tiles_w))); };
  auto tile_col = [&](Expr tt) { return ir::Mod(tt, I(tiles_w)); };
  // The transformed input of the group: [a*a, C/x, group, x].
  auto v_index = [&](Expr xi, Expr cbv, Expr tt, Expr ci) { return Flat({xi, cbv, tt, ci}, {aa, cb, group, p.x}); };

  // 1. Input transform, vectorized over `in_lanes` channels of a block: w.d = B^T d,
  // then V = (B^T d) B.
  const int64_t in_lanes = std::gcd(p.x, lanes);
  const Expr ci = Add(Mul(V("w.co"), I(in_lanes)), V("w.cl"));
  auto patch = [&](int64_t i, int64_t j) {
    return LoadF("I.blocked", Flat({V("n"), V("w.cb"), Add(Mul(tile_row(V("w.t")), I(m)), I(i)),
                                    Add(Mul(tile_col(V("w.t")), I(m)), I(j)), ci},
                                   {p.n, cb, p.hp, p.wp, p.x}));
  };
  auto d_index = [&](int64_t xi, int64_t j) { return Add(I((xi * a + j) * in_lanes), V("w.cl")); };
  std::vector<Stmt> stages;
  for (int64_t xi = 0; xi < a; ++xi)
    for (int64_t j = 0; j < a; ++j)
      stages.push_back(Loops({{"w.cl", in_lanes, kVectorized}},
                             Store("w.d", d_index(xi, j), Combine(t.bt[xi], [&](int64_t i) { return patch(i, j); }))));
  for (int64_t xi = 0; xi < a; ++xi)
    for (int64_t nu = 0; nu < a; ++nu)
      stages.push_back(Loops({{"w.cl", in_lanes, kVectorized}},
                             Store("w.V", v_index(I(xi * a + nu), V("w.cb"), V("w.t"), ci),
                                   Combine(t.bt[nu], [&](int64_t j) { return LoadF("w.d", d_index(xi, j)); }))));
  Stmt input = Loops({{"w.cb", cb}, {"w.t", group}, {"w.co", p.x / in_lanes}},
                     Allocate("w.d", ir::DType::kFloat32, aa * in_lanes, Block(std::move(stages))));

  // 2. One register tile of the GEMM for transform point `xi`: tiles t0 .. t0+reg-1
  // x the output-channel block w.kb, into `mbuf` at m_index(xi, m0 + tile in the
  // register tile, channel).
  using MIndex = std::function<Expr(Expr xi, Expr ti, Expr ko)>;
  const Expr ko = Add(Mul(V("w.kv"), I(lanes)), V("w.kl"));
  const Expr acc = Add(Mul(V("w.ti"), I(p.y)), ko);
  auto over_tile = [&](Stmt body) {
    return Loops({{"w.ti", reg, kUnrolled}, {"w.kv", p.y / lanes, kUnrolled}, {"w.kl", lanes, kVectorized}},
                 std::move(body));
  };
  auto gemm = [&](Expr xi, Expr t0, Expr m0, const std::string& mbuf, const MIndex& m_index) {
    const Expr c_in = Add(Mul(V("w.cio"), I(p.unroll)), V("w.ciu"));
    Stmt zero = over_tile(Store("w.acc", acc, ir::FloatImm(0.0)));
    Stmt fma = Loops(
        {{"w.cb", cb}, {"w.cio", p.x / p.unroll}, {"w.ciu", p.unroll, kUnrolled}},
        over_tile(Store("w.acc", acc,
                        Add(LoadF("w.acc", acc),
                            Mul(LoadF("w.V", v_index(xi, V("w.cb"), Add(t0, V("w.ti")), c_in)),
                                LoadF("F.blocked", Flat({V("w.kb"), xi, V("w.cb"), c_in, ko}, WeightShape(p))))))));
    Stmt out = over_tile(Store(mbuf, m_index(xi, Add(m0, V("w.ti")), ko), LoadF("w.acc", acc)));
    return Allocate("w.acc", ir::DType::kFloat32, reg * p.y, Block({zero, fma, out}));
  };

  // 3. Output transform of the group's tile `tt`, whose M is at m_index(., mt, .):
  // w.s = A^T M, then Y = (A^T M) A, vectorized over the channels.
  auto output = [&](Expr tt, Expr mt, const std::string& mbuf, const MIndex& m_index) {
    const Expr k_out = Add(Mul(V("w.ov"), I(lanes)), V("w.ol"));
    auto s_index = [&](int64_t r, int64_t j) { return Add(I((r * a + j) * lanes), V("w.ol")); };
    std::vector<Stmt> st;
    for (int64_t r = 0; r < m; ++r)
      for (int64_t j = 0; j < a; ++j)
        st.push_back(Loops({{"w.ol", lanes, kVectorized}},
                           Store("w.s", s_index(r, j), Combine(t.at[r], [&](int64_t i) {
                                   return LoadF(mbuf, m_index(I(i * a + j), mt, k_out));
                                 }))));
    // The output's channel run: `lanes` channels from `base`, inside one block of the
    // spec's layout (its block is a multiple of lanes).
    const Expr base = Add(Mul(V("w.kb"), I(p.y)), Mul(V("w.ov"), I(lanes)));
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t col = 0; col < m; ++col) {
        const Expr oh = Add(Mul(tile_row(tt), I(m)), I(r)), ow = Add(Mul(tile_col(tt), I(m)), I(col));
        Expr value = Combine(t.at[col], [&](int64_t j) { return LoadF("w.s", s_index(r, j)); });
        Stmt store;
        if (!p.spec) {
          store = Store("O.blocked", Flat({V("n"), V("w.kb"), oh, ow, k_out}, {p.n, kb, p.oh, p.ow, p.y}), value);
        } else {
          const ConvOutputSpec& o = *p.spec;
          const Expr lane = lanes > 1 ? V("w.ol") : I(0);
          store = Store(o.buffer,
                        Flat({V("n"), ir::Div(base, I(o.block)), Add(oh, I(o.pad_h)), Add(ow, I(o.pad_w)),
                              Add(ir::Mod(base, I(o.block)), lane)},
                             {p.n, p.k / o.block, p.oh + 2 * o.pad_h, p.ow + 2 * o.pad_w, o.block}),
                        o.epilogue(value, V("n"), base, lane, oh, ow));
        }
        st.push_back(Loops({{"w.ol", lanes, kVectorized}}, store));
      }
    }
    return Loops({{"w.ov", p.y / lanes}}, Allocate("w.s", ir::DType::kFloat32, m * a * lanes, Block(std::move(st))));
  };

  Stmt per_block;  // the body of the output-channel block loop w.kb
  Stmt group_body;
  if (p.tile_outer) {
    // M of one register tile: [a*a, reg, y], local.
    const MIndex m_index = [&](Expr xi, Expr ti, Expr k) { return Flat({xi, ti, k}, {aa, reg, p.y}); };
    const Expr t0 = Mul(V("w.to"), I(reg));
    per_block = Loops(
        {{"w.to", group / reg}},
        Allocate("w.M", ir::DType::kFloat32, aa * reg * p.y,
                 Block({Loops({{"w.xi", aa}}, gemm(V("w.xi"), t0, I(0), "w.M", m_index)),
                        Loops({{"w.tj", reg}}, output(Add(t0, V("w.tj")), V("w.tj"), "w.M", m_index))})));
    group_body = Block({input, Loops({{"w.kb", kb}}, per_block)});
  } else {
    // M of the whole group: [a*a, group, y], scratch.
    const MIndex m_index = [&](Expr xi, Expr tt, Expr k) { return Flat({xi, tt, k}, {aa, group, p.y}); };
    per_block = Block({Loops({{"w.xi", aa}, {"w.to", group / reg}},
                             gemm(V("w.xi"), Mul(V("w.to"), I(reg)), Mul(V("w.to"), I(reg)), "w.M", m_index)),
                       Loops({{"w.tj", group}}, output(V("w.tj"), V("w.tj"), "w.M", m_index))});
    group_body = Allocate("w.M", ir::DType::kFloat32, aa * group * p.y,
                          Block({input, Loops({{"w.kb", kb}}, per_block)}), ir::MemoryScope::kHeap);
  }
  group_body = Allocate("w.V", ir::DType::kFloat32, aa * cb * group * p.x, group_body, ir::MemoryScope::kHeap);
  return Loops({{"n", p.n}, {"w.g", groups, p.parallel ? ir::ForKind::kParallel : kSerial}}, group_body);
}

}  // namespace tuneforge::winograd

// matmul_cpu and batch_matmul: the GEMM templates and their knobs.
#include "compiler/templates/matmul_template.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

#include "compiler/schedule/schedule.h"
#include "compiler/support/status.h"

namespace tuneforge {

using nlohmann::json;

ComputeDef MatmulCompute(int64_t m, int64_t n, int64_t k) {
  return BatchMatmulCompute(0, m, n, k, /*panel=*/0);
}

ComputeDef MatmulPackedCompute(int64_t m, int64_t n, int64_t k, int64_t panel) {
  return BatchMatmulCompute(0, m, n, k, panel);
}

// batch == 0: matmul, no batch axis. batch >= 1: axis b outermost and every buffer
// offset by b times its matrix size. panel > 0: B is read from B.packed, column
// panels of `panel` columns, each panel K x panel contiguous:
//   B.packed[b*K*N + (j / panel)*K*panel + k*panel + j % panel] = B[b*K*N + k*N + j]
// with axes jp (panel) and jr (column in the panel) instead of j; panel divides n.
// a_panel > 0: A is read from A.packed, row panels of `a_panel` rows, each K x a_panel
// with the rows of one k next to each other:
//   A.packed[b*M*K + (i / a_panel)*K*a_panel + k*a_panel + i % a_panel] = A[b*M*K + i*K + k]
// with axes ip (panel) and i.r (row in the panel) instead of i; a_panel divides m.
ComputeDef BatchMatmulCompute(int64_t batch, int64_t m, int64_t n, int64_t k, int64_t panel,
                              int64_t a_panel) {
  return GemmCompute(batch ? "batch_matmul" : "matmul", GemmBuffers{}, batch, m, n, k, panel,
                     a_panel);
}

ComputeDef GemmCompute(const std::string& name, const GemmBuffers& names, int64_t batch, int64_t m,
                       int64_t n, int64_t k, int64_t panel, int64_t a_panel) {
  using namespace ir;  // NOLINT: the expression builders read like math here.
  TF_CHECK(panel == 0 || n % panel == 0, "panel ", panel, " must divide N ", n);
  TF_CHECK(a_panel == 0 || m % a_panel == 0, "row panel ", a_panel, " must divide M ", m);
  ComputeDef def;
  def.name = name;
  std::vector<int64_t> lead = batch ? std::vector<int64_t>{batch} : std::vector<int64_t>{};
  auto shape = [&](std::vector<int64_t> dims) {
    dims.insert(dims.begin(), lead.begin(), lead.end());
    return dims;
  };
  def.params = {a_panel ? BufferParam{names.a_packed, DType::kFloat32, shape({m / a_panel, k, a_panel}), false}
                        : BufferParam{names.a, DType::kFloat32, shape({m, k}), false},
                panel ? BufferParam{names.b_packed, DType::kFloat32, shape({n / panel, k, panel}), false}
                      : BufferParam{names.b, DType::kFloat32, shape({k, n}), false},
                BufferParam{names.c, DType::kFloat32, shape({m, n}), true}};
  Expr b = batch ? Var("b") : IntImm(0);
  if (batch) def.axes.push_back({"b", batch, false});
  Expr i = Var("i"), kk = Var("k"), j, b_index, a_index;
  if (a_panel) {
    def.axes.push_back({"ip", m / a_panel, false});
    def.axes.push_back({"i.r", a_panel, false});
    i = Add(Mul(Var("ip"), IntImm(a_panel)), Var("i.r"));
    a_index = Add(Add(Mul(Var("ip"), IntImm(k * a_panel)), Mul(kk, IntImm(a_panel))), Var("i.r"));
  } else {
    def.axes.push_back({"i", m, false});
    a_index = Add(Mul(i, IntImm(k)), kk);
  }
  if (panel) {
    def.axes.push_back({"jp", n / panel, false});
    def.axes.push_back({"jr", panel, false});
    j = Add(Mul(Var("jp"), IntImm(panel)), Var("jr"));
    b_index = Add(Add(Mul(Var("jp"), IntImm(k * panel)), Mul(kk, IntImm(panel))), Var("jr"));
  } else {
    def.axes.push_back({"j", n, false});
    j = Var("j");
    b_index = Add(Mul(kk, IntImm(n)), j);
  }
  def.axes.push_back({"k", k, true});
  def.output_index = Add(Mul(b, IntImm(m * n)), Add(Mul(i, IntImm(n)), j));
  def.value = Mul(Load(a_panel ? names.a_packed : names.a, DType::kFloat32,
                       Add(Mul(b, IntImm(m * k)), a_index)),
                  Load(panel ? names.b_packed : names.b, DType::kFloat32,
                       Add(Mul(b, IntImm(k * n)), b_index)));
  return def;
}

// The copy of B into B.packed (see GemmCompute): matrices, then panels (on the thread
// pool when `parallel`), then rows of the panel, then the panel's columns as `vecs`
// unrolled vectors of `lanes` — contiguous on both sides.
ir::Stmt PackBNest(const GemmBuffers& names, int64_t batch, int64_t n, int64_t k, int64_t lanes,
                   int64_t vecs, bool parallel) {
  using namespace ir;  // NOLINT
  const int64_t panel = lanes * vecs;
  Expr b = Var("p.b"), jp = Var("p.j"), kk = Var("p.k"), jv = Var("p.v"), jl = Var("p.l");
  Expr col = Add(Mul(jv, IntImm(lanes)), jl);
  Expr base = Mul(b, IntImm(k * n));
  Stmt s = Store(names.b_packed,
                 Add(base, Add(Add(Mul(jp, IntImm(k * panel)), Mul(kk, IntImm(panel))), col)),
                 Load(names.b, DType::kFloat32,
                      Add(base, Add(Mul(kk, IntImm(n)), Add(Mul(jp, IntImm(panel)), col)))));
  s = For("p.l", IntImm(lanes), lanes, lanes > 1 ? ForKind::kVectorized : ForKind::kSerial, s);
  s = For("p.v", IntImm(vecs), vecs, ForKind::kUnrolled, s);
  s = For("p.k", IntImm(k), k, ForKind::kSerial, s);
  s = For("p.j", IntImm(n / panel), n / panel, parallel ? ForKind::kParallel : ForKind::kSerial, s);
  return For("p.b", IntImm(batch), batch, ForKind::kSerial, s);
}

namespace {

// Register budget of one tile (accumulators); AVX-512 has 32 vector registers and
// the tile also needs a broadcast of A and a load of B.
constexpr int64_t kMaxAccumulatorVectors = 24;

std::vector<json> IntsUpTo(std::initializer_list<int64_t> candidates, int64_t limit) {
  std::vector<json> out;
  for (int64_t v : candidates)
    if (v == 1 || v <= limit) out.push_back(v);
  return out;
}

std::vector<json> TileKValues(int64_t k) {
  std::vector<json> out;
  for (int64_t v = 4; v <= 1024; v *= 2)
    if (v < k) out.push_back(v);
  if (k <= 1024) out.push_back(k);
  return out;
}

absl::Status CheckGemm(const Config& c, int64_t m, int64_t n, const std::string& pack_knob) {
  int64_t ri = c.Int("tile_i_reg"), lanes = c.Int("vec_lanes"), vecs = c.Int("tile_j_vecs");
  int64_t bi = c.Int("tile_i_blocks"), bj = c.Int("tile_j_blocks");
  int64_t tk = c.Int("tile_k"), u = c.Int("unroll_k");
  int64_t rj = lanes * vecs;
  // Tiles at most about twice the dimension they tile: larger ones only add tails.
  if (vecs > 1 && lanes * (vecs - 1) >= n)
    return absl::InvalidArgumentError("tile_j_vecs: register tile wider than N");
  if (bi > 1 && ri * (bi / 2) >= m)
    return absl::InvalidArgumentError("tile_i_blocks: cache tile taller than M");
  if (bj > 1 && rj * (bj / 2) >= n)
    return absl::InvalidArgumentError("tile_j_blocks: cache tile wider than N");
  if (tk % u != 0) return absl::InvalidArgumentError("unroll_k must divide tile_k");
  // One accumulator register per (row, vector) of the tile, scalar or not.
  if (c.Str("accumulate") == "registers" && ri * vecs > kMaxAccumulatorVectors)
    return absl::InvalidArgumentError("register tile needs more than " +
                                      std::to_string(kMaxAccumulatorVectors) + " registers");
  if (u * ri * vecs > 128) return absl::InvalidArgumentError("unrolled body too large");
  if (c.Int(pack_knob) && n % rj != 0)
    return absl::InvalidArgumentError(pack_knob + ": the register tile width must divide N");
  if (c.Int("pack_a", 0) && m % ri != 0)
    return absl::InvalidArgumentError("pack_a: the register tile height must divide M");
  return absl::OkStatus();
}

}  // namespace

double GemmBusyShare(const Config& c, int64_t m, int64_t n, int threads, bool fused) {
  const std::string order = c.Str("loop_order");
  if (fused && order == "ikj") return 0;
  const int64_t ti = c.Int("tile_i_reg") * c.Int("tile_i_blocks");
  const int64_t tj = c.Int("vec_lanes") * c.Int("tile_j_vecs") * c.Int("tile_j_blocks");
  const int64_t tiles_i = (m + ti - 1) / ti, tiles_j = (n + tj - 1) / tj;
  int64_t tiles, tile_work, work;
  if (fused) {
    tiles = tiles_i * tiles_j, tile_work = ti * tj, work = m * n;
  } else if (order != "jik") {
    tiles = tiles_i, tile_work = ti, work = m;
  } else {
    tiles = tiles_j, tile_work = tj, work = n;
  }
  const int64_t rounds = (tiles + threads - 1) / threads;
  return static_cast<double>(work) / static_cast<double>(rounds * tile_work * std::max(1, threads));
}

ir::Stmt PackANest(const GemmBuffers& names, int64_t batch, int64_t m, int64_t k, int64_t rows,
                   bool parallel) {
  using namespace ir;  // NOLINT
  Expr b = Var("q.b"), ip = Var("q.i"), kk = Var("q.k"), r = Var("q.r");
  Expr base = Mul(b, IntImm(m * k));
  Stmt s = Store(names.a_packed,
                 Add(base, Add(Add(Mul(ip, IntImm(k * rows)), Mul(kk, IntImm(rows))), r)),
                 Load(names.a, DType::kFloat32,
                      Add(base, Add(Mul(Add(Mul(ip, IntImm(rows)), r), IntImm(k)), kk))));
  s = For("q.r", IntImm(rows), rows, ForKind::kUnrolled, s);
  s = For("q.k", IntImm(k), k, ForKind::kSerial, s);
  s = For("q.i", IntImm(m / rows), m / rows, parallel ? ForKind::kParallel : ForKind::kSerial, s);
  return For("q.b", IntImm(batch), batch, ForKind::kSerial, s);
}

namespace {

// The index of the first load of `buffer` in `s` (null if none).
const ir::Expr* FindLoadIndex(const ir::Expr& e, const std::string& buffer) {
  if (!e) return nullptr;
  if (e->kind == ir::ExprKind::kLoad && e->name == buffer) return &e->operands[0];
  for (const ir::Expr& o : e->operands)
    if (const ir::Expr* found = FindLoadIndex(o, buffer)) return found;
  return nullptr;
}

const ir::Expr* FindLoadIndex(const ir::Stmt& s, const std::string& buffer) {
  if (!s) return nullptr;
  if (s->kind == ir::StmtKind::kStore) {
    if (const ir::Expr* found = FindLoadIndex(s->value, buffer)) return found;
    return FindLoadIndex(s->index, buffer);
  }
  for (const ir::Stmt& c : {s->body, s->else_case})
    if (const ir::Expr* found = FindLoadIndex(c, buffer)) return found;
  for (const ir::Stmt& c : s->stmts)
    if (const ir::Expr* found = FindLoadIndex(c, buffer)) return found;
  return nullptr;
}

// The static extent of the loop over `var` in `s`, if there is one.
std::optional<int64_t> LoopExtent(const ir::Stmt& s, const std::string& var) {
  if (!s) return std::nullopt;
  if (s->kind == ir::StmtKind::kFor && s->var == var) return s->max_extent;
  for (const ir::Stmt& c : {s->body, s->else_case})
    if (std::optional<int64_t> e = LoopExtent(c, var)) return e;
  for (const ir::Stmt& c : s->stmts)
    if (std::optional<int64_t> e = LoopExtent(c, var)) return e;
  return std::nullopt;
}

}  // namespace

ir::Stmt AddGemmPrefetch(const ir::Stmt& body, const std::string& b_buffer, int64_t distance) {
  if (distance <= 0) return body;
  using namespace ir;  // NOLINT
  return Rewrite(body, [&](const Stmt& s) -> Stmt {
    if (s->kind != StmtKind::kFor || s->var != "k.m") return s;
    const Expr* index = FindLoadIndex(s->body, b_buffer);
    if (!index) return s;
    // A tile copy may lack the k.u or j.v loop (extent 1 folded away): then 0.
    const std::optional<int64_t> unroll = LoopExtent(s->body, "k.u");
    const std::optional<int64_t> vecs = LoopExtent(s->body, "j.v");
    const int64_t steps = std::max<int64_t>(1, distance / unroll.value_or(1));
    std::map<std::string, Expr> at = {{"k.m", Add(Var("k.m"), IntImm(steps))}, {"j.l", IntImm(0)}};
    if (!unroll) at["k.u"] = IntImm(0);
    if (!vecs) at["j.v"] = IntImm(0);
    Stmt prefetch = Prefetch(b_buffer, Substitute(*index, at));
    if (vecs) prefetch = For("j.v", IntImm(*vecs), *vecs, ForKind::kUnrolled, prefetch);
    if (unroll) prefetch = For("k.u", IntImm(*unroll), *unroll, ForKind::kUnrolled, prefetch);
    return For(s->var, s->extent, s->max_extent, s->for_kind, Block({prefetch, s->body}));
  });
}

namespace {

// The candidate value of `knob` closest to `want` from below (the smallest when all
// are above); knobs are int-valued and listed in increasing order.
int64_t NearestBelow(const ConfigSpace& space, const std::string& knob, int64_t want) {
  for (const Knob& k : space.knobs()) {
    if (k.name != knob) continue;
    int64_t best = k.values.front().get<int64_t>();
    for (const json& v : k.values)
      if (v.get<int64_t>() <= want) best = std::max(best, v.get<int64_t>());
    return best;
  }
  TF_CHECK(false, "no knob ", knob);
  return 0;
}

}  // namespace

ConfigSpace GemmSpace(int64_t m, int64_t n, int64_t k, const Target& target, const Knob& pack,
                      bool with_pack_a) {
  std::vector<Knob> knobs = {
      {"tile_i_reg", IntsUpTo({1, 2, 3, 4, 6, 8}, m), "rows of C in the register tile"},
      {"vec_lanes", IntsUpTo({1, 4, 8, 16}, std::min<int64_t>(n, target.MaxF32Lanes())),
       "float32 lanes per vector (1 = scalar)"},
      {"tile_j_vecs", IntsUpTo({1, 2, 3, 4}, n), "vectors per row of the register tile"},
      {"tile_i_blocks", IntsUpTo({1, 2, 4, 8, 16, 32}, m), "register tiles per cache tile, rows"},
      {"tile_j_blocks", IntsUpTo({1, 2, 4, 8, 16}, n), "register tiles per cache tile, columns"},
      {"tile_k", TileKValues(k), "reduction length of a cache tile"},
      {"unroll_k", IntsUpTo({1, 2, 4}, k), "unroll factor of the inner reduction loop"},
      {"loop_order", {"ijk", "jik", "ikj"}, "order of the cache-tile loops"},
      {"parallel", {0, 1}, "run the outermost loop on the runtime thread pool"},
      {"accumulate", {"memory", "registers"}, "accumulate the register tile locally"},
      pack,
  };
  // Software prefetch and packed A (session 9) are offered only below AVX-512: on the
  // Zen 5 host neither gained (prefetch 0.78-0.98x, pack_a 0.93-1.07x, docs/history/benchmarks-2026-11.md)
  // and two more knobs that do not pay cost the model search its lead over random
  // (SearchPolicyTest.ModelBeatsRandomOnSyntheticCost: median 1.43x -> 1.0x). With 16
  // registers (AVX2, NEON) the tiles are smaller and A's rows more streams per FMA.
  if (target.MaxF32Lanes() < 16) {
    knobs.push_back({"prefetch_k", {0, 16},
                     "software prefetch of B's rows this many k-steps ahead (0 = none)",
                     /*default_value=*/0});  // new in session 9: earlier configs had none
    knobs.back().hidden_in_ir = true;  // the features do not count prefetches
    if (with_pack_a) {
      knobs.push_back({"pack_a", {0, 1},
                       "copy A first into row panels of the register tile's height (the rows "
                       "of one k-step in one cache line)",
                       /*default_value=*/0});  // new in session 9: earlier configs did not
    }
  }
  const std::string pack_knob = pack.name;
  return ConfigSpace(std::move(knobs),
                     [m, n, pack_knob](const Config& c) { return CheckGemm(c, m, n, pack_knob); });
}

Config GemmNaive(int64_t k, const std::string& pack_knob) {
  std::vector<json> tk = TileKValues(k);
  return Config(json{{"tile_i_reg", 1}, {"vec_lanes", 1}, {"tile_j_vecs", 1},
                     {"tile_i_blocks", 1}, {"tile_j_blocks", 1}, {"tile_k", tk.back()},
                     {"unroll_k", 1}, {"loop_order", "ijk"}, {"parallel", 0},
                     {"accumulate", "memory"}, {pack_knob, 0}});
}

// The classic CPU GEMM shape: a register tile of ri x (vecs * lanes) accumulators
// that fits the vector registers with room for the A broadcast and the B loads (6x4
// or 8x3 vectors in AVX-512's 32 registers, 4x2 or 6x2 in AVX2's 16), an L1-sized
// reduction slice (tile_k 128..256), a cache tile of about 96 (AVX2: 32) rows x 256
// columns for L2, and the outermost loop parallel when the target has threads. ijk and jik so
// that a short M still has parallel work; packed B where it is valid, and a few
// serial variants for problems too small to share. Ordered best guess first: tiles
// that fit the registers, then the parallel loop that keeps every thread busiest (a
// default schedule, e.g. the graph executor's, takes the first).
std::vector<Config> GemmHeuristics(const ConfigSpace& space, const Target& target,
                                   const std::string& pack_knob, int64_t m, int64_t n,
                                   int64_t batch) {
  std::vector<Config> out;
  auto add = [&](Config c) {
    if (space.Check(c).ok() && std::find(out.begin(), out.end(), c) == out.end())
      out.push_back(std::move(c));
  };
  const int64_t registers = target.VectorRegisters();
  const std::vector<std::pair<int64_t, int64_t>> reg_tiles =
      registers >= 32 ? std::vector<std::pair<int64_t, int64_t>>{{6, 4}, {8, 3}, {4, 4}, {8, 2}}
                      : std::vector<std::pair<int64_t, int64_t>>{{4, 2}, {6, 2}, {4, 3}, {8, 1}};
  // With 16 registers (AVX2) smaller cache tiles and no k-unrolling did best in
  // tuning logs of dense/matmul shapes on a Zen 3 (BERT's 128 x 768..3072 GEMMs: 4x2
  // register tiles in 32-row cache tiles at about 2x the 6x4/96-row pick).
  const int64_t want_rows = registers >= 32 ? 96 : 32;
  const int64_t want_unroll = registers >= 32 ? 2 : 1;
  for (const auto& [want_ri, want_vecs] : reg_tiles) {
    for (int64_t want_tk : {256, 128}) {
      for (const char* order : {"ijk", "jik"}) {
        int64_t ri = NearestBelow(space, "tile_i_reg", want_ri);
        int64_t lanes = NearestBelow(space, "vec_lanes", target.MaxF32Lanes());
        int64_t vecs = NearestBelow(space, "tile_j_vecs", want_vecs);
        int64_t bi = NearestBelow(space, "tile_i_blocks", std::max<int64_t>(1, want_rows / ri));
        int64_t bj = NearestBelow(space, "tile_j_blocks", std::max<int64_t>(1, 256 / (lanes * vecs)));
        int64_t tk = NearestBelow(space, "tile_k", want_tk);
        int64_t u = NearestBelow(space, "unroll_k", want_unroll);
        // Shrink what the constraint rejects (tiles much larger than the shape).
        for (int attempt = 0; attempt < 16; ++attempt) {
          json base{{"tile_i_reg", ri}, {"vec_lanes", lanes}, {"tile_j_vecs", vecs},
                    {"tile_i_blocks", bi}, {"tile_j_blocks", bj}, {"tile_k", tk},
                    {"unroll_k", u}, {"loop_order", order},
                    {"parallel", target.num_threads > 1 ? 1 : 0},
                    {"accumulate", "registers"}, {pack_knob, 0}};
          if (space.Check(Config(base)).ok()) {
            // Packed B first where the panel fits N: contiguous, TLB-friendly reads.
            json packed = base;
            packed[pack_knob] = 1;
            add(Config(packed));
            add(Config(base));
            break;
          }
          if (bi > 1) bi /= 2;
          else if (bj > 1) bj /= 2;
          else if (vecs > 1) vecs = NearestBelow(space, "tile_j_vecs", vecs - 1);
          else if (u > 1) u = 1;
          else break;
        }
      }
    }
  }
  // Best guess first: accumulators that fit the registers, then the share of the
  // threads' time the parallel loop keeps busy (its chunks dealt out in rounds).
  const int64_t threads = std::max(1, target.num_threads);
  auto fits = [&](const Config& c) {
    return c.Int("tile_i_reg") * c.Int("tile_j_vecs") + c.Int("tile_j_vecs") + 1 <= registers;
  };
  auto busy = [&](const Config& c) {
    if (!c.Int("parallel") || threads == 1) return 1.0;
    if (batch >= 2 * threads) return static_cast<double>(batch) / static_cast<double>(((batch + threads - 1) / threads) * threads);
    return std::max(GemmBusyShare(c, m, n, threads, false), GemmBusyShare(c, m, n, threads, true));
  };
  // Few rows or columns per thread (a pointwise conv as a matmul per group: 40 rows
  // of 196 pixels, three times): the same register tiles in cache tiles of one
  // register tile's rows and fewer columns, until every thread has a few tiles. Listed
  // after the others, so they lead only where they keep the threads busier (on a Zen 4,
  // batch_matmul B=3 M=40 N=196 K=160: 64 x 192 tiles 0.067 ms, 6 x 128 0.038 ms).
  const size_t listed = out.size();
  for (size_t i = 0; i < listed && threads > 1; ++i) {
    json small = out[i].values();
    if (!out[i].Int("parallel")) continue;
    small["tile_i_blocks"] = 1;
    int64_t bj = small["tile_j_blocks"].get<int64_t>();
    const int64_t tj = out[i].Int("vec_lanes") * out[i].Int("tile_j_vecs");
    const int64_t tiles_i = (m + out[i].Int("tile_i_reg") - 1) / out[i].Int("tile_i_reg");
    while (bj > 1 && tiles_i * ((n + tj * bj - 1) / (tj * bj)) < 4 * threads) bj = NearestBelow(space, "tile_j_blocks", bj - 1);
    small["tile_j_blocks"] = bj;
    add(Config(small));
  }
  // Busy shares within 10% of each other count as equal (keeping the order above).
  auto key = [&](const Config& c) { return std::make_pair(fits(c) ? 1 : 0, std::lround(busy(c) * 10)); };
  std::stable_sort(out.begin(), out.end(), [&](const Config& a, const Config& b) { return key(a) > key(b); });
  // A row vector (M = 1) reads each element of B once: rows of B in order, a few at a
  // time, across a wide strip (short k slices inside the strip's register tiles)
  // instead of each 64-column strip down all of K at a 4N-byte stride. Serially the
  // strip is the whole width (ikj); in parallel, wide column strips (jik).
  if (m == 1 && batch == 0) {
    for (int64_t want_tk : {4, 8, 16}) {
      json gemv{{"tile_i_reg", 1}, {"vec_lanes", NearestBelow(space, "vec_lanes", target.MaxF32Lanes())},
                {"tile_j_vecs", NearestBelow(space, "tile_j_vecs", 4)}, {"tile_i_blocks", 1},
                {"tile_j_blocks", 1}, {"tile_k", NearestBelow(space, "tile_k", want_tk)},
                {"unroll_k", 1}, {"loop_order", "ikj"}, {"parallel", 0},
                {"accumulate", "registers"}, {pack_knob, 0}};
      add(Config(gemv));
      if (target.num_threads > 1) {
        gemv["loop_order"] = "jik";
        gemv["tile_j_blocks"] = NearestBelow(space, "tile_j_blocks", 16);
        gemv["parallel"] = 1;
        add(Config(gemv));
      }
    }
  }
  // Small problems lose more to the thread pool than they gain: serial variants too.
  if (target.num_threads > 1) {
    size_t n_parallel = out.size();
    for (size_t i = 0; i < std::min<size_t>(n_parallel, 4); ++i) {
      json serial = out[i].values();
      serial["parallel"] = 0;
      add(Config(serial));
    }
  }
  return out;
}

absl::Status ScheduleGemm(Schedule* s, const Config& c, bool packed, int64_t batch, int64_t m,
                          int64_t n, const Target& target, bool packed_a) {
  int64_t ri = c.Int("tile_i_reg"), lanes = c.Int("vec_lanes"), vecs = c.Int("tile_j_vecs");
  int64_t ti = ri * c.Int("tile_i_blocks"), rj = lanes * vecs, tj = rj * c.Int("tile_j_blocks");
  int64_t tk = c.Int("tile_k"), u = c.Int("unroll_k");
  if (packed_a) {  // the row panel is the register tile's height: i = ip * ri + i.r
    RETURN_IF_ERROR(s->Split("ip", c.Int("tile_i_blocks"), "i.o", "i.m"));
  } else {
    RETURN_IF_ERROR(s->Split("i", ti, "i.o", "i.1"));
    RETURN_IF_ERROR(s->Split("i.1", ri, "i.m", "i.r"));
  }
  if (packed) {  // the panel is the register tile's width: j = jp * rj + jr
    RETURN_IF_ERROR(s->Split("jp", c.Int("tile_j_blocks"), "j.o", "j.m"));
    RETURN_IF_ERROR(s->Split("jr", lanes, "j.v", "j.l"));
  } else {
    RETURN_IF_ERROR(s->Split("j", tj, "j.o", "j.1"));
    RETURN_IF_ERROR(s->Split("j.1", rj, "j.m", "j.r"));
    RETURN_IF_ERROR(s->Split("j.r", lanes, "j.v", "j.l"));
  }
  RETURN_IF_ERROR(s->Split("k", tk, "k.o", "k.1"));
  RETURN_IF_ERROR(s->Split("k.1", u, "k.m", "k.u"));
  std::string order = c.Str("loop_order");
  std::vector<std::string> outer = order == "ijk"   ? std::vector<std::string>{"i.o", "j.o", "k.o"}
                                   : order == "jik" ? std::vector<std::string>{"j.o", "i.o", "k.o"}
                                                    : std::vector<std::string>{"i.o", "k.o", "j.o"};
  std::vector<std::string> all = outer;
  if (batch) all.insert(all.begin(), "b");
  for (const char* l : {"i.m", "j.m", "k.m", "k.u", "i.r", "j.v", "j.l"}) all.push_back(l);
  RETURN_IF_ERROR(s->Reorder(all));
  RETURN_IF_ERROR(s->Unroll("k.u"));
  RETURN_IF_ERROR(s->Unroll("i.r"));
  RETURN_IF_ERROR(s->Unroll("j.v"));
  if (lanes > 1) RETURN_IF_ERROR(s->Vectorize("j.l"));
  // Batches are independent and equal: share them out when there are enough.
  // Otherwise the outer tile loop runs in parallel, fused with the next one (rows and
  // columns of tiles, ijk or jik) when that keeps the threads clearly busier: 1024
  // rows in tiles of 96 are 11 tiles, 6 on one thread and 5 on the other, while 11 x
  // 4 tiles share out evenly. Not always: every row tile then reads the whole of B
  // again, so it is done only for a gain of 5% or more in the busy share.
  const bool parallel_batch = batch >= 2 * target.num_threads;
  if (c.Int("parallel")) {
    std::string loop = parallel_batch ? "b" : outer[0];
    if (!parallel_batch && order != "ikj" &&
        GemmBusyShare(c, m, n, target.num_threads, /*fused=*/true) >
            GemmBusyShare(c, m, n, target.num_threads, /*fused=*/false) + 0.05) {
      RETURN_IF_ERROR(s->Fuse(outer[0], outer[1], "ij.o"));
      loop = "ij.o";
    }
    RETURN_IF_ERROR(s->Parallel(loop));
  }
  if (c.Str("accumulate") == "registers") RETURN_IF_ERROR(s->CacheWrite("k.m"));
  return absl::OkStatus();
}

ConfigSpace MatmulTemplate::Space(const TuningTask& task, const Target& target) const {
  return GemmSpace(task.Param("M"), task.Param("N"), task.Param("K"), target,
                   {"pack_b", {0, 1},
                    "copy B into contiguous panels of the register tile's width first",
                    /*default_value=*/0},  // new in matmul_cpu v2: v1 configs did not pack
                   /*with_pack_a=*/true);
}

Config MatmulTemplate::Naive(const TuningTask& task, const Target& target) const {
  (void)target;
  return GemmNaive(task.Param("K"), "pack_b");
}

std::vector<Config> MatmulTemplate::Heuristics(const TuningTask& task, const Target& target) const {
  return GemmHeuristics(Space(task, target), target, "pack_b", task.Param("M"), task.Param("N"),
                        batched_ ? task.Param("B") : 0);
}

absl::StatusOr<ir::LoweredFunc> MatmulTemplate::Instantiate(const TuningTask& task,
                                                            const Target& target,
                                                            const Config& config) const {
  return Build(task, target, config, GemmEpilogue{}, /*kernel_only=*/false);
}

absl::StatusOr<ir::LoweredFunc> MatmulTemplate::InstantiateWithEpilogue(const TuningTask& task,
                                                                        const Target& target,
                                                                        const Config& config,
                                                                        const GemmEpilogue& extra) const {
  return Build(task, target, config, extra, /*kernel_only=*/false);
}

absl::StatusOr<ir::LoweredFunc> MatmulTemplate::InstantiateKernel(const TuningTask& task,
                                                                  const Target& target,
                                                                  const Config& config) const {
  return Build(task, target, config, GemmEpilogue{}, /*kernel_only=*/true);
}

absl::StatusOr<ir::LoweredFunc> MatmulTemplate::Build(const TuningTask& task, const Target& target,
                                                      const Config& config, const GemmEpilogue& extra,
                                                      bool kernel_only) const {
  const std::string op = batched_ ? "batch_matmul" : "matmul";
  if (task.op() != op) return absl::InvalidArgumentError(name() + " template got " + task.op());
  const std::shared_ptr<const ConfigSpace> space = SpaceOf(*this, task, target);
  RETURN_IF_ERROR(space->Check(config));
  const Config c = space->WithDefaults(config);
  int64_t m = task.Param("M"), n = task.Param("N"), k = task.Param("K");
  int64_t lanes = c.Int("vec_lanes"), vecs = c.Int("tile_j_vecs");
  const int64_t batch = batched_ ? task.Param("B") : 0;

  const bool pack = c.Int("pack_b") == 1, pack_a = c.Int("pack_a", 0) == 1;
  const int64_t rows = c.Int("tile_i_reg");
  ComputeDef def = BatchMatmulCompute(batch, m, n, k, pack ? lanes * vecs : 0, pack_a ? rows : 0);
  if (extra.fn) {
    // The epilogue's inputs go before C; its indices as GemmCompute forms them.
    def.params.insert(def.params.end() - 1, extra.inputs.begin(), extra.inputs.end());
    const ir::Expr b = batch ? ir::Var("b") : ir::IntImm(0);
    const ir::Expr i = pack_a ? ir::Add(ir::Mul(ir::Var("ip"), ir::IntImm(rows)), ir::Var("i.r")) : ir::Var("i");
    const ir::Expr j = pack ? ir::Add(ir::Mul(ir::Var("jp"), ir::IntImm(lanes * vecs)), ir::Var("jr")) : ir::Var("j");
    def.epilogue = extra.fn(ReducedValue(), b, i, j);
  }
  Schedule s(std::move(def));
  RETURN_IF_ERROR(ScheduleGemm(&s, c, pack, batch, m, n, target, pack_a));
  ASSIGN_OR_RETURN(ir::LoweredFunc func,
                   Lower(s, kernel_only ? CostModelKernelName(task) : KernelSymbol(task, *this, config)));
  const GemmBuffers names;
  func.body =
      AddGemmPrefetch(func.body, pack ? names.b_packed : names.b, c.Int("prefetch_k", 0));
  // The entry point still takes A and B; the packed copies are scratch filled first,
  // inside the timed region (matmul's operands are all dynamic).
  const int64_t nb = std::max<int64_t>(batch, 1);
  const bool parallel_pack = c.Int("parallel") && target.num_threads > 1;
  auto shape = [&](int64_t rows_of, int64_t cols) {
    return batch ? std::vector<int64_t>{batch, rows_of, cols} : std::vector<int64_t>{rows_of, cols};
  };
  if (pack_a) {
    func.params[0] = ir::BufferParam{names.a, ir::DType::kFloat32, shape(m, k), false};
    func.body = ir::Allocate(
        names.a_packed, ir::DType::kFloat32, nb * m * k,
        ir::Block({PackANest(names, nb, m, k, rows, parallel_pack), func.body}),
        ir::MemoryScope::kHeap);
  }
  if (pack) {
    func.params[1] = ir::BufferParam{names.b, ir::DType::kFloat32, shape(k, n), false};
    func.body = ir::Allocate(
        names.b_packed, ir::DType::kFloat32, nb * k * n,
        ir::Block({PackBNest(names, nb, n, k, lanes, vecs, parallel_pack), func.body}),
        ir::MemoryScope::kHeap);
  }
  return func;
}

}  // namespace tuneforge

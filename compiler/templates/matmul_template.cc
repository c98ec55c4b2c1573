#include "compiler/templates/matmul_template.h"

#include "compiler/schedule/schedule.h"
#include "compiler/support/status.h"

namespace tuneforge {

using nlohmann::json;

ComputeDef MatmulCompute(int64_t m, int64_t n, int64_t k) {
  using namespace ir;  // NOLINT: the expression builders read like math here.
  ComputeDef def;
  def.name = "matmul";
  def.params = {BufferParam{"A", DType::kFloat32, {m, k}, false},
                BufferParam{"B", DType::kFloat32, {k, n}, false},
                BufferParam{"C", DType::kFloat32, {m, n}, true}};
  def.axes = {{"i", m, false}, {"j", n, false}, {"k", k, true}};
  Expr i = Var("i"), j = Var("j"), kk = Var("k");
  def.output_index = Add(Mul(i, IntImm(n)), j);
  def.value = Mul(Load("A", DType::kFloat32, Add(Mul(i, IntImm(k)), kk)),
                  Load("B", DType::kFloat32, Add(Mul(kk, IntImm(n)), j)));
  return def;
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

absl::Status CheckMatmul(const Config& c, int64_t m, int64_t n) {
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
  return absl::OkStatus();
}

}  // namespace

ConfigSpace MatmulTemplate::Space(const TuningTask& task, const Target& target) const {
  int64_t m = task.Param("M"), n = task.Param("N"), k = task.Param("K");
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
  };
  return ConfigSpace(std::move(knobs),
                     [m, n](const Config& c) { return CheckMatmul(c, m, n); });
}

Config MatmulTemplate::Naive(const TuningTask& task, const Target& target) const {
  std::vector<json> tk = TileKValues(task.Param("K"));
  return Config(json{{"tile_i_reg", 1}, {"vec_lanes", 1}, {"tile_j_vecs", 1},
                     {"tile_i_blocks", 1}, {"tile_j_blocks", 1}, {"tile_k", tk.back()},
                     {"unroll_k", 1}, {"loop_order", "ijk"}, {"parallel", 0},
                     {"accumulate", "memory"}});
}

absl::StatusOr<ir::LoweredFunc> MatmulTemplate::Instantiate(const TuningTask& task,
                                                            const Target& target,
                                                            const Config& c) const {
  if (task.op() != "matmul") return absl::InvalidArgumentError("matmul template got " + task.op());
  RETURN_IF_ERROR(Space(task, target).Check(c));
  int64_t m = task.Param("M"), n = task.Param("N"), k = task.Param("K");
  int64_t ri = c.Int("tile_i_reg"), lanes = c.Int("vec_lanes"), vecs = c.Int("tile_j_vecs");
  int64_t ti = ri * c.Int("tile_i_blocks"), rj = lanes * vecs, tj = rj * c.Int("tile_j_blocks");
  int64_t tk = c.Int("tile_k"), u = c.Int("unroll_k");

  Schedule s(MatmulCompute(m, n, k));
  RETURN_IF_ERROR(s.Split("i", ti, "i.o", "i.1"));
  RETURN_IF_ERROR(s.Split("i.1", ri, "i.m", "i.r"));
  RETURN_IF_ERROR(s.Split("j", tj, "j.o", "j.1"));
  RETURN_IF_ERROR(s.Split("j.1", rj, "j.m", "j.r"));
  RETURN_IF_ERROR(s.Split("j.r", lanes, "j.v", "j.l"));
  RETURN_IF_ERROR(s.Split("k", tk, "k.o", "k.1"));
  RETURN_IF_ERROR(s.Split("k.1", u, "k.m", "k.u"));
  std::string order = c.Str("loop_order");
  std::vector<std::string> outer = order == "ijk"   ? std::vector<std::string>{"i.o", "j.o", "k.o"}
                                   : order == "jik" ? std::vector<std::string>{"j.o", "i.o", "k.o"}
                                                    : std::vector<std::string>{"i.o", "k.o", "j.o"};
  std::vector<std::string> all = outer;
  for (const char* l : {"i.m", "j.m", "k.m", "k.u", "i.r", "j.v", "j.l"}) all.push_back(l);
  RETURN_IF_ERROR(s.Reorder(all));
  RETURN_IF_ERROR(s.Unroll("k.u"));
  RETURN_IF_ERROR(s.Unroll("i.r"));
  RETURN_IF_ERROR(s.Unroll("j.v"));
  if (lanes > 1) RETURN_IF_ERROR(s.Vectorize("j.l"));
  if (c.Int("parallel")) RETURN_IF_ERROR(s.Parallel(outer[0]));
  if (c.Str("accumulate") == "registers") RETURN_IF_ERROR(s.CacheWrite("k.m"));
  return Lower(s, KernelSymbol(task, *this, c));
}

}  // namespace tuneforge

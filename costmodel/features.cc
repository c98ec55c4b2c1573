// Loop-IR features. A tour: Walk() collects one StoreSite per Store statement (its
// enclosing loops and its accesses as affine forms of the loop variables); the
// "dominant" site (the one executed most often: the update of a reduction) gives most
// features, computed by Describe*(). docs/features.md lists them by index.
#include "costmodel/features.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <tuple>
#include <utility>

#include "compiler/support/status.h"

namespace tuneforge::costmodel {
namespace {

using ir::Expr;
using ir::ExprKind;
using ir::Stmt;
using ir::StmtKind;

constexpr double kElemBytes = 4;  // float32; an access's own size is Access::elem_bytes
constexpr int kAccessSlots = 3;   // the store target and the first two other buffers read
constexpr int kIntensityLevels = 6;  // points of the richer set's intensity curve

// An affine form sum(coef[v] * v) + constant. `affine` is false when the expression
// is not affine in the loop variables (div, mod, min, a product of variables); the
// variables it depends on are still listed (with coefficient 1) so footprints count them.
struct Affine {
  // By the variable's name in the IR, which outlives the walk (no string copies: every
  // index of every candidate the cost model scores goes through here).
  std::vector<std::pair<const std::string*, int64_t>> coef;
  int64_t constant = 0;
  bool affine = true;

  int64_t Coef(const std::string& var) const {
    for (const auto& [v, c] : coef)
      if (*v == var) return c;
    return 0;
  }
  void AddTerm(const std::string* var, int64_t c) {
    for (auto& [v, old] : coef)
      if (*v == *var) {
        old += c;
        return;
      }
    coef.emplace_back(var, c);
  }
};

Affine Combine(Affine a, const Affine& b, int64_t b_sign) {
  a.constant += b_sign * b.constant;
  a.affine = a.affine && b.affine;
  for (const auto& [v, c] : b.coef) a.AddTerm(v, b_sign * c);
  return a;
}

Affine Dependence(const Affine& a, const Affine& b) {  // non-affine: keep who it depends on
  Affine r;
  r.affine = false;
  for (const auto& [v, c] : a.coef) r.AddTerm(v, 1);
  for (const auto& [v, c] : b.coef)
    if (r.Coef(*v) == 0) r.AddTerm(v, 1);
  return r;
}

Affine ToAffine(const Expr& e) {
  switch (e->kind) {
    case ExprKind::kIntImm: {
      Affine r;
      r.constant = e->int_value;
      return r;
    }
    case ExprKind::kVar: {
      Affine r;
      r.coef.emplace_back(&e->name, 1);
      return r;
    }
    case ExprKind::kAdd:
      return Combine(ToAffine(e->operands[0]), ToAffine(e->operands[1]), 1);
    case ExprKind::kSub:
      return Combine(ToAffine(e->operands[0]), ToAffine(e->operands[1]), -1);
    case ExprKind::kMul: {
      Affine a = ToAffine(e->operands[0]), b = ToAffine(e->operands[1]);
      if (!b.coef.empty()) std::swap(a, b);
      if (!b.coef.empty()) return Dependence(a, b);
      for (auto& [v, c] : a.coef) c *= b.constant;
      a.constant *= b.constant;
      a.affine = a.affine && b.affine;
      return a;
    }
    default:
      if (e->operands.size() == 2)
        return Dependence(ToAffine(e->operands[0]), ToAffine(e->operands[1]));
      if (e->operands.size() == 1) return Dependence(ToAffine(e->operands[0]), Affine());
      return Affine();
  }
}

struct Loop {
  const std::string* var;  // the For node's name; the IR outlives the walk
  int64_t extent;          // static upper bound
  ir::ForKind kind;
};

struct Access {
  std::string buffer;
  Affine index;
  bool local = false;
  int64_t buffer_elems = 1;
  // index.Coef(loop var) per loop level of the site (outermost first), filled once the
  // site is chosen: footprints then need no name lookups.
  std::vector<int64_t> level_coef;
  // Bytes of one element of the buffer (u8/s8 1, float32/s32 4), and the elements one
  // index position reads: 4 for a Dot4 operand (a word of four bytes), else 1.
  double elem_bytes = kElemBytes;
  double word_elems = 1;
};

struct StoreSite {
  std::vector<Loop> loops;       // outermost first
  std::vector<Access> accesses;  // [0] the store target, then loads in order
  int float_ops = 0;
  double trips = 1;
};

// Only the dominant site (the first with the most iterations) is kept in full; the
// others are only counted. Building the access forms of every store was most of the
// extraction time.
struct WalkState {
  std::vector<Loop> loops;
  // Allocated buffers in scope: name, elements, bytes per element.
  std::vector<std::tuple<std::string, int64_t, double>> locals;
  StoreSite dominant;
  int num_sites = 0;
  double total_trips = 0;
  int ifs = 0;
  int allocs = 0;
  double local_bytes = 0;
  const ir::LoweredFunc* func = nullptr;
};

void FillBuffer(const WalkState& st, Access* a) {
  for (const auto& [name, n, bytes] : st.locals)
    if (name == a->buffer) {
      a->local = true;
      a->buffer_elems = n;
      a->elem_bytes = bytes;
      return;
    }
  for (const ir::BufferParam& p : st.func->params)
    if (p.name == a->buffer) {
      a->buffer_elems = p.NumElements();
      a->elem_bytes = ir::DTypeBytes(p.dtype);
    }
}

void CollectValue(const Expr& e, const WalkState& st, StoreSite* site) {
  if (e->kind == ExprKind::kLoad) {
    Access a{e->name, ToAffine(e->operands[0]), false, 1, {}, kElemBytes, 1};
    FillBuffer(st, &a);
    site->accesses.push_back(std::move(a));
    return;
  }
  if (e->dtype == ir::DType::kFloat32 && e->operands.size() == 2) ++site->float_ops;
  if (e->kind == ExprKind::kDot4) {
    site->float_ops += 8;  // 4 multiplies and 4 adds per lane
    CollectValue(e->operands[0], st, site);
    for (size_t i = 1; i < 3; ++i) {  // the byte operands: a word of four per position
      CollectValue(e->operands[i], st, site);
      site->accesses.back().word_elems = 4;
    }
    return;
  }
  for (const Expr& op : e->operands) CollectValue(op, st, site);
}

// Counts a store site that runs `per_trip` times per trip of its enclosing loops; a
// new StoreSite (its loops and trips filled in) when it dominates the ones so far
// (the most trips; the first site always).
std::optional<StoreSite> CountSite(WalkState* st, double per_trip) {
  double trips = per_trip;
  for (const Loop& l : st->loops) trips *= static_cast<double>(l.extent);
  ++st->num_sites;
  st->total_trips += trips;
  if (st->num_sites > 1 && trips <= st->dominant.trips) return std::nullopt;
  StoreSite site;
  site.loops = st->loops;
  site.trips = trips;
  return site;
}

void Walk(const Stmt& s, WalkState* st) {
  if (!s) return;
  switch (s->kind) {
    case StmtKind::kFor:
      st->loops.push_back(Loop{&s->var, std::max<int64_t>(1, s->max_extent), s->for_kind});
      Walk(s->body, st);
      st->loops.pop_back();
      return;
    case StmtKind::kStore: {
      std::optional<StoreSite> dominant = CountSite(st, 1);
      if (!dominant) return;
      StoreSite& site = *dominant;
      Access target{s->buffer, ToAffine(s->index), false, 1, {}, kElemBytes, 1};
      FillBuffer(*st, &target);
      site.accesses.push_back(std::move(target));
      CollectValue(s->value, *st, &site);
      st->dominant = std::move(site);
      return;
    }
    case StmtKind::kPrefetch:  // a hint: the model sees it as its knob (prefetch_k)
      return;
    case StmtKind::kTileConfig:  // per block of MatrixDots; the dots carry the work
      return;
    case StmtKind::kMatrixDot: {
      // A store site of rows x cols accumulators, each 4 * groups multiply-adds: the
      // accumulator tile written, A's rows and B's panels read a 4-byte word per group.
      const ir::MatrixDotOperands& m = *s->matrix;
      std::optional<StoreSite> dominant = CountSite(st, static_cast<double>(m.rows * m.cols * m.groups * m.segments));
      if (!dominant) return;
      StoreSite& site = *dominant;
      site.float_ops = 8;
      for (const auto& [name, index] : {std::pair<std::string, Expr>{s->buffer, s->index}, {m.a, m.a_index},
                                        {m.b, m.b_index}}) {
        Access access{name, ToAffine(index), false, 1, {}, kElemBytes, 1};
        FillBuffer(*st, &access);
        if (name != s->buffer) access.word_elems = 4;
        site.accesses.push_back(std::move(access));
      }
      st->dominant = std::move(site);
      return;
    }
    case StmtKind::kBlock:
      for (const Stmt& c : s->stmts) Walk(c, st);
      return;
    case StmtKind::kIfThenElse:
      ++st->ifs;
      Walk(s->body, st);
      Walk(s->else_case, st);
      return;
    case StmtKind::kAllocate:
      ++st->allocs;
      st->local_bytes += static_cast<double>(s->alloc_size) * ir::DTypeBytes(s->alloc_dtype);
      st->locals.emplace_back(s->buffer, s->alloc_size, ir::DTypeBytes(s->alloc_dtype));
      Walk(s->body, st);
      st->locals.pop_back();
      return;
  }
}

double Log2p(double x) { return std::log2(1.0 + std::max(0.0, x)); }

// Distinct bytes `a` touches while loops [level, end) run (a box estimate of the index
// positions: exact for the nested strides lowering produces; times the elements one
// position reads), capped at the buffer's size.
double Footprint(const Access& a, const std::vector<Loop>& loops, size_t level) {
  double positions = 1;
  for (size_t i = level; i < loops.size(); ++i)
    if (a.level_coef[i] != 0) positions *= static_cast<double>(loops[i].extent);
  return std::min(positions * a.word_elems, static_cast<double>(a.buffer_elems)) * a.elem_bytes;
}

// Bytes of all distinct buffers the site touches inside loops [level, end).
double WorkingSet(const StoreSite& s, size_t level) {
  std::vector<std::pair<std::string, double>> per_buffer;  // buffer -> bytes
  for (const Access& a : s.accesses) {
    double f = Footprint(a, s.loops, level);
    bool found = false;
    for (auto& [b, v] : per_buffer)
      if (b == a.buffer) {
        v = std::max(v, f);
        found = true;
      }
    if (!found) per_buffer.emplace_back(a.buffer, f);
  }
  double bytes = 0;
  for (const auto& [b, v] : per_buffer) bytes += v;
  return bytes;
}

double TripsInside(const StoreSite& s, size_t level) {
  double t = 1;
  for (size_t i = level; i < s.loops.size(); ++i) t *= static_cast<double>(s.loops[i].extent);
  return t;
}

// What the register tile asks of the vector register file. The trailing run of
// unrolled and vectorized loops of the dominant store becomes straight-line SIMD code:
// its store target's elements there are accumulators, live across the loops outside
// the run (a GEMM's k loop, a convolution's reduction), and each operand it reads
// needs registers for the part the target's loops select (a reduction loop unrolled
// inside the run, such as a GEMM's k unroll, reuses them). A broadcast scalar needs
// one register at a time. Counted in vector registers of the run's width; a tile that
// needs more than the target has spills (on AVX2, 8x2 or 4x4 accumulators of a GEMM
// with their operands exceed 16 ymm registers, 4x3 or 6x2 fit).
struct RegisterTile {
  double accumulators = 0;
  double vectors = 0;  // accumulators + operands
};

RegisterTile MeasureRegisterTile(const StoreSite& s) {
  RegisterTile tile;
  if (s.loops.empty()) return tile;
  size_t run = s.loops.size();
  while (run > 0 && (s.loops[run - 1].kind == ir::ForKind::kUnrolled ||
                     s.loops[run - 1].kind == ir::ForKind::kVectorized))
    --run;
  const Access& target = s.accesses[0];
  // Registers `a` needs in the run, counting only the loops `counted` says.
  auto registers = [&](const Access& a, auto&& counted) {
    double elems = 1, lanes = 1;
    for (size_t l = run; l < s.loops.size(); ++l) {
      if (a.level_coef[l] == 0 || !counted(l)) continue;
      const double extent = static_cast<double>(s.loops[l].extent);
      if (s.loops[l].kind == ir::ForKind::kVectorized)
        lanes *= extent;
      else
        elems *= extent;
    }
    return std::min(elems, std::max(1.0, static_cast<double>(a.buffer_elems) / lanes));
  };
  tile.accumulators = registers(target, [](size_t) { return true; });
  // Per buffer read (other than the target's), the most registers one access needs.
  std::vector<std::pair<const std::string*, double>> operands;
  for (size_t i = 1; i < s.accesses.size(); ++i) {
    const Access& a = s.accesses[i];
    if (a.buffer == target.buffer) continue;
    const double need = registers(a, [&](size_t l) { return target.level_coef[l] != 0; });  // >= 1
    bool vector = false;
    for (size_t l = run; l < s.loops.size(); ++l)
      vector |= s.loops[l].kind == ir::ForKind::kVectorized && a.level_coef[l] != 0;
    const double regs = vector ? need : 1.0;  // scalars are broadcast one at a time
    auto it = std::find_if(operands.begin(), operands.end(), [&](const auto& o) { return *o.first == a.buffer; });
    if (it == operands.end())
      operands.emplace_back(&a.buffer, regs);
    else
      it->second = std::max(it->second, regs);
  }
  tile.vectors = tile.accumulators;
  for (const auto& [buffer, regs] : operands) tile.vectors += regs;
  return tile;
}

// The richer set (FeatureOptions::rich), written at out[*f...] for the dominant site
// `s` with its working sets `ws` by level, its L2 tile level `l2` and float ops `ops`.
void PutRichFeatures(const StoreSite& s, const std::vector<const Access*>& slots,
                     const std::vector<double>& ws, size_t l2, double ops, int* f, float* out) {
  auto put = [&](double x) { out[(*f)++] = static_cast<float>(std::isfinite(x) ? x : 0.0); };
  const size_t depth = s.loops.size();
  // Intensity curve: flops per distinct byte inside the innermost
  // 1, 2, ... kIntensityLevels loops (a deeper level than the nest repeats the last).
  for (int l = 0; l < kIntensityLevels; ++l) {
    const size_t level = depth >= static_cast<size_t>(l + 1) ? depth - (l + 1) : 0;
    put(std::log2(ops * TripsInside(s, level) / std::max(kElemBytes, ws[level])));
  }
  // Per access slot: distinct bytes inside the innermost loop and the L2 tile, the
  // position of its innermost reuse (the innermost loop it does not move in, as a
  // fraction of the depth from outside: 1 = reused by the innermost loop, 0 = none),
  // and the 64-byte lines one run of the innermost loop touches.
  const size_t inner = depth > 0 ? depth - 1 : 0;
  for (int k = 0; k < kAccessSlots; ++k) {
    if (k >= static_cast<int>(slots.size())) {
      *f += 4;
      continue;
    }
    const Access& a = *slots[k];
    put(Log2p(Footprint(a, s.loops, inner)));
    put(Log2p(Footprint(a, s.loops, l2)));
    double reuse = 0;
    for (size_t l = depth; l-- > 0;)
      if (a.level_coef[l] == 0) {
        reuse = static_cast<double>(l + 1) / static_cast<double>(depth);
        break;
      }
    put(reuse);
    const double stride = depth > 0 ? std::abs(static_cast<double>(a.level_coef[inner])) : 0;
    const double extent = depth > 0 ? static_cast<double>(s.loops[inner].extent) : 1;
    const double lines = stride == 0 ? 1
                         : stride * a.elem_bytes >= 64
                             ? extent
                             : std::ceil(extent * stride * a.elem_bytes / 64);
    put(Log2p(lines));
  }
  // Where the annotations sit: level of the outermost parallel loop, the outermost
  // unrolled loop and the vectorized loop, as a fraction of the depth (0: none).
  auto position = [&](ir::ForKind kind) {
    for (size_t l = 0; l < depth; ++l)
      if (s.loops[l].kind == kind) return static_cast<double>(l + 1) / static_cast<double>(depth);
    return 0.0;
  };
  put(position(ir::ForKind::kParallel));
  put(position(ir::ForKind::kUnrolled));
  put(position(ir::ForKind::kVectorized));
}

const std::vector<std::string>& Names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n = {
        // 0-4: whole function
        "num_stores", "dominant_trip_fraction", "log2_num_ifs", "num_allocs", "log2_local_bytes",
        // 5-19: the dominant store's loop nest
        "depth", "log2_trips", "vector_lanes_over_max", "log2_vector_lanes", "innermost_vectorized",
        "log2_unroll_product", "num_unrolled_loops", "log2_parallel_extent",
        "parallel_extent_over_cores", "parallel_balance", "has_parallel",
        "log2_innermost_serial_extent", "float_ops_per_iter", "loads_per_iter", "store_is_local"};
    for (int s = 0; s < kAccessSlots; ++s) {
      std::string p = "access" + std::to_string(s) + "_";
      for (const char* f : {"log2_stride_innermost", "log2_stride_first_serial", "present",
                            "is_local", "log2_reuse_in_l1_tile"})
        n.push_back(p + f);
    }
    for (const char* f :
         {"l1_fit_trip_fraction", "l2_fit_trip_fraction", "l3_fit_trip_fraction",
          "log2_innermost_working_set", "log2_intensity_l1_tile", "log2_intensity_l2_tile",
          "log2_l2_traffic_per_flop", "log2_l3_traffic_per_flop", "log2_dram_traffic_per_flop"})
      n.push_back(f);
    return n;
  }();
  return names;
}

}  // namespace

const std::vector<std::string>& IrFeatureNames() {
  TF_CHECK(static_cast<int>(Names().size()) == kNumIrFeatures,
           "feature names out of sync: ", Names().size());
  return Names();
}

namespace {

std::vector<Knob> FeatureKnobs(const ConfigSpace& space, KnobFeatures which) {
  std::vector<Knob> out;
  for (const Knob& k : space.knobs())
    if (which == KnobFeatures::kAll ||
        (which == KnobFeatures::kSpace && (space.knob_features() || k.hidden_in_ir)))
      out.push_back(k);
  return out;
}

}  // namespace

FeatureExtractor::FeatureExtractor(const ConfigSpace& space, const Target& target,
                                   FeatureOptions options)
    : knobs_(FeatureKnobs(space, options.knobs)),
      cores_(std::max(1, target.num_threads)),
      max_lanes_(std::max(1, target.MaxF32Lanes())),
      vector_registers_(std::max(1, target.VectorRegisters())),
      options_(options) {}

std::vector<std::string> FeatureExtractor::Names() const {
  std::vector<std::string> n = IrFeatureNames();
  if (options_.rich) {
    for (int l = 0; l < kIntensityLevels; ++l) n.push_back("log2_intensity_inner" + std::to_string(l));
    for (int s = 0; s < kAccessSlots; ++s) {
      std::string p = "access" + std::to_string(s) + "_";
      for (const char* f : {"log2_bytes_innermost", "log2_bytes_l2_tile", "reuse_level_fraction", "log2_lines_innermost"})
        n.push_back(p + f);
    }
    for (const char* f : {"parallel_position", "unroll_position", "vector_position"}) n.push_back(f);
  }
  if (options_.register_tile)
    for (const char* f : {"accumulators_over_registers", "register_tile_over_registers"}) n.push_back(f);
  for (const Knob& k : knobs_) n.push_back("knob_" + k.name);
  return n;
}

FeatureVector FeatureExtractor::Extract(const ir::LoweredFunc& func, const Config& config) const {
  FeatureVector v(size(), 0.0f);
  ExtractIr(func, v.data());
  for (size_t i = 0; i < knobs_.size(); ++i) {
    const Knob& k = knobs_[i];
    auto it = config.values().find(k.name);
    // A knob added by a later template version may be absent: it then has its default.
    const nlohmann::json* knob_value = it != config.values().end() ? &*it
                                       : k.default_value          ? &*k.default_value
                                                                  : nullptr;
    float value = -1;  // absent knob without a default (not a checked config)
    if (knob_value) {
      if (knob_value->is_number()) {
        value = knob_value->get<float>();
      } else {
        for (size_t j = 0; j < k.values.size(); ++j)
          if (k.values[j] == *knob_value) value = static_cast<float>(j);
      }
    }
    v[knob_offset() + i] = value;
  }
  return v;
}

void FeatureExtractor::ExtractIr(const ir::LoweredFunc& func, float* out) const {
  WalkState st;
  st.func = &func;
  Walk(func.body, &st);
  if (st.num_sites == 0) return;  // all zeros

  double total_trips = st.total_trips;
  StoreSite& s = st.dominant;
  for (Access& a : s.accesses) {
    a.level_coef.resize(s.loops.size());
    for (size_t l = 0; l < s.loops.size(); ++l) a.level_coef[l] = a.index.Coef(*s.loops[l].var);
  }
  int f = 0;
  auto put = [&](double x) { out[f++] = static_cast<float>(std::isfinite(x) ? x : 0.0); };

  // 0-4
  put(static_cast<double>(st.num_sites));
  put(s.trips / total_trips);
  put(Log2p(st.ifs));
  put(st.allocs);
  put(Log2p(st.local_bytes));

  // 5-19
  double lanes = 1, unroll = 1, parallel = 1, serial_inner = 1;
  int unrolled = 0;
  bool has_parallel = false, found_serial = false;
  for (auto it = s.loops.rbegin(); it != s.loops.rend(); ++it) {
    switch (it->kind) {
      case ir::ForKind::kVectorized:
        lanes *= it->extent;
        break;
      case ir::ForKind::kUnrolled:
        unroll *= it->extent;
        ++unrolled;
        break;
      case ir::ForKind::kParallel:
        parallel *= it->extent;
        has_parallel = true;
        break;
      case ir::ForKind::kSerial:
        if (!found_serial) serial_inner = it->extent;
        found_serial = true;
        break;
    }
  }
  bool inner_vec = !s.loops.empty() && s.loops.back().kind == ir::ForKind::kVectorized;
  put(static_cast<double>(s.loops.size()));
  put(std::log2(s.trips));
  put(lanes / max_lanes_);
  put(std::log2(lanes));
  put(inner_vec ? 1 : 0);
  put(std::log2(unroll));
  put(unrolled);
  put(has_parallel ? std::log2(parallel) : 0);
  put(has_parallel ? std::min(parallel / cores_, 64.0) : 0);
  put(has_parallel ? parallel / (std::ceil(parallel / cores_) * cores_) : 0);
  put(has_parallel ? 1 : 0);
  put(std::log2(serial_inner));
  put(s.float_ops);
  put(static_cast<double>(s.accesses.size()) - 1);
  put(s.accesses[0].local ? 1 : 0);

  // Working sets by level (0 = outermost; level == loops.size() is one iteration).
  size_t depth = s.loops.size();
  std::vector<double> ws(depth + 1);
  for (size_t l = 0; l <= depth; ++l) ws[l] = WorkingSet(s, l);
  auto fit_level = [&](double bytes) {  // outermost level whose working set fits
    for (size_t l = 0; l <= depth; ++l)
      if (ws[l] <= bytes) return l;
    return depth;
  };
  size_t l1 = fit_level(options_.l1_bytes), l2 = fit_level(options_.l2_bytes),
         l3 = fit_level(options_.l3_bytes);

  // 20-34: up to kAccessSlots accesses: the target, then the first other buffers read.
  std::vector<const Access*> slots = {&s.accesses[0]};
  for (size_t i = 1; i < s.accesses.size() && static_cast<int>(slots.size()) < kAccessSlots; ++i) {
    bool dup = false;
    for (const Access* a : slots) dup |= a->buffer == s.accesses[i].buffer;
    if (!dup) slots.push_back(&s.accesses[i]);
  }
  int first_serial = -1;  // level of the innermost plain serial loop
  for (int l = static_cast<int>(s.loops.size()) - 1; l >= 0; --l)
    if (s.loops[l].kind == ir::ForKind::kSerial) {
      first_serial = l;
      break;
    }
  for (int k = 0; k < kAccessSlots; ++k) {
    if (k >= static_cast<int>(slots.size())) {
      f += 5;
      continue;
    }
    const Access& a = *slots[k];
    double inner = s.loops.empty() ? 0 : std::abs(a.level_coef.back());
    put(Log2p(inner));
    put(Log2p(first_serial < 0 ? 0 : std::abs(a.level_coef[first_serial])));
    put(1);
    put(a.local ? 1 : 0);
    put(std::log2(TripsInside(s, l1) / std::max(1.0, Footprint(a, s.loops, l1) / a.elem_bytes)));
  }

  // 35-43: cache fit, intensity, traffic.
  double log_trips = std::max(1.0, std::log2(s.trips));
  put(std::log2(TripsInside(s, l1)) / log_trips);
  put(std::log2(TripsInside(s, l2)) / log_trips);
  put(std::log2(TripsInside(s, l3)) / log_trips);
  put(Log2p(ws[depth > 0 ? depth - 1 : 0]));
  double ops = std::max(1, s.float_ops);
  put(std::log2(ops * TripsInside(s, l1) / std::max(kElemBytes, ws[l1])));
  put(std::log2(ops * TripsInside(s, l2) / std::max(kElemBytes, ws[l2])));
  double flops = ops * s.trips;
  auto traffic = [&](size_t level) {  // bytes loaded into the tile at `level`, per flop
    return ws[level] * (s.trips / TripsInside(s, level)) / flops;
  };
  put(std::log2(traffic(l1)));
  put(std::log2(traffic(l2)));
  put(std::log2(traffic(l3)));
  TF_CHECK(f == kNumIrFeatures, "wrote ", f, " features");
  if (options_.rich) PutRichFeatures(s, slots, ws, l2, ops, &f, out);
  if (options_.register_tile) {
    const RegisterTile tile = MeasureRegisterTile(s);
    put(tile.accumulators / vector_registers_);
    put(tile.vectors / vector_registers_);
  }
  TF_CHECK(f == knob_offset(), "wrote ", f, " features");
}

}  // namespace tuneforge::costmodel

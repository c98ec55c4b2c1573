// Lowering: Schedule -> LoweredFunc. One straight pipeline:
//   1. extents of every loop from the split tree (constants where the factor divides,
//      min() tails where it does not); loops of extent 1 disappear;
//   2. axis values (i = i.o * f + i.i) substituted into the output index and value;
//   3. the nest: spatial loops outside the first reduction, then the output's zero
//      initialisation and the update nest; with CacheWrite, the update accumulates in
//      a local tile that is zeroed, updated and written back inside the chosen loop;
//      the compute's epilogue is applied where the sum is finished: in that
//      write-back (guarded by "last iteration of the reduction loops outside the
//      tile" when there are any), or as a pass over the output without a tile;
//   4. versioning: a tile gets one copy per distinct shape it takes (full, and each
//      tail of the static shape: e.g. 2 rows x 24 columns at the corner), each with
//      constant extents and guarded by the extents of the loops around it, so tails
//      run unrolled register tiles and narrower vectors instead of scalar code; where
//      the shapes cannot be enumerated, a copy for full tiles and a generic one. A
//      vectorised loop with a tail gets a full-vector copy and a copy with the tail's
//      extent, which codegen vectorizes when that extent is a constant there.
#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>

#include "compiler/schedule/schedule.h"
#include "compiler/support/status.h"

namespace tuneforge {
namespace {

using ir::Expr;
using ir::Stmt;

// What lowering decided about one leaf loop.
struct LoopPlan {
  std::string name;
  Expr extent;
  int64_t max_extent = 0;
  ir::ForKind kind = ir::ForKind::kSerial;
  bool is_reduce = false;
};

// Maximum elements of a CacheWrite tile; it lives on the stack (registers, ideally).
constexpr int64_t kMaxLocalTile = 4096;
// Tail versioning (Lowerer::TailVersions): at most this many copies of a tile, found
// by visiting at most this many points of the loops around it.
constexpr size_t kMaxTileVersions = 8;
constexpr int64_t kMaxShapePoints = 1 << 18;

// An integer expression of loop variables, compiled to postfix with every variable
// resolved to a slot: TailVersions evaluates the anchors' extents at each point of its
// walk (thousands per GEMM candidate the cost model scores), and looking variables up
// by name took most of that time.
class IntProgram {
 public:
  // None when `e` reads anything but integer constants, integer arithmetic and the
  // variables of `slots` whose slot is below `max_slot`.
  static std::optional<IntProgram> Compile(const Expr& e, const std::map<std::string, size_t>& slots,
                                           size_t max_slot) {
    IntProgram p;
    if (!p.Append(e, slots, max_slot)) return std::nullopt;
    return p;
  }

  // The value with slot i's variable = env[i]; none on a division by zero.
  std::optional<int64_t> Eval(const std::vector<int64_t>& env, std::vector<int64_t>* stack) const {
    stack->clear();
    for (const Op& op : ops_) {
      if (op.kind == ir::ExprKind::kIntImm) {
        stack->push_back(op.value);
        continue;
      }
      if (op.kind == ir::ExprKind::kVar) {
        stack->push_back(env[op.value]);
        continue;
      }
      const int64_t b = stack->back();
      stack->pop_back();
      int64_t& a = stack->back();
      switch (op.kind) {
        case ir::ExprKind::kAdd: a += b; break;
        case ir::ExprKind::kSub: a -= b; break;
        case ir::ExprKind::kMul: a *= b; break;
        case ir::ExprKind::kDiv:
          if (b == 0) return std::nullopt;
          a /= b;
          break;
        case ir::ExprKind::kMod:
          if (b == 0) return std::nullopt;
          a %= b;
          break;
        case ir::ExprKind::kMin: a = std::min(a, b); break;
        default: a = std::max(a, b); break;
      }
    }
    return stack->back();
  }

  // The slots the program reads.
  std::set<size_t> Slots() const {
    std::set<size_t> out;
    for (const Op& op : ops_)
      if (op.kind == ir::ExprKind::kVar) out.insert(static_cast<size_t>(op.value));
    return out;
  }

 private:
  struct Op {
    ir::ExprKind kind;
    int64_t value;  // kIntImm: the constant; kVar: the slot
  };

  bool Append(const Expr& e, const std::map<std::string, size_t>& slots, size_t max_slot) {
    switch (e->kind) {
      case ir::ExprKind::kIntImm:
        ops_.push_back({e->kind, e->int_value});
        return true;
      case ir::ExprKind::kVar: {
        auto it = slots.find(e->name);
        if (it == slots.end() || it->second >= max_slot) return false;
        ops_.push_back({e->kind, static_cast<int64_t>(it->second)});
        return true;
      }
      case ir::ExprKind::kAdd:
      case ir::ExprKind::kSub:
      case ir::ExprKind::kMul:
      case ir::ExprKind::kDiv:
      case ir::ExprKind::kMod:
      case ir::ExprKind::kMin:
      case ir::ExprKind::kMax:
        if (!Append(e->operands[0], slots, max_slot) || !Append(e->operands[1], slots, max_slot)) return false;
        ops_.push_back({e->kind, 0});
        return true;
      default:
        return false;
    }
  }

  std::vector<Op> ops_;
};

// The extents of a split's outer and inner loops: `parent` is the split loop's extent
// (at most `pmax`), `f` the factor, `outer_var` the outer loop's variable. A factor
// that does not divide leaves a min() tail in the inner loop.
std::pair<Expr, Expr> SplitExtents(const Expr& parent, int64_t pmax, int64_t f,
                                   const Expr& outer_var) {
  int64_t c;
  if (ir::IsConst(parent, &c)) {
    if (c <= f) return {ir::IntImm(1), ir::IntImm(c)};  // one inner iteration holds it all
    if (c % f == 0) return {ir::IntImm(c / f), ir::IntImm(f)};
    return {ir::IntImm((c + f - 1) / f),
            ir::Min(ir::IntImm(f), ir::Sub(ir::IntImm(c), ir::Mul(outer_var, ir::IntImm(f))))};
  }
  if (f >= pmax) return {ir::IntImm(1), parent};
  return {ir::Div(ir::Add(parent, ir::IntImm(f - 1)), ir::IntImm(f)),
          ir::Min(ir::IntImm(f), ir::Sub(parent, ir::Mul(outer_var, ir::IntImm(f))))};
}

class Lowerer {
 public:
  explicit Lowerer(const Schedule& s) : s_(s) {}

  absl::StatusOr<ir::LoweredFunc> Run(const std::string& func_name) {
    ComputeExtents();
    RETURN_IF_ERROR(ApplyFuses());
    RETURN_IF_ERROR(PlanLoops());
    Substituted();
    ir::LoweredFunc f;
    f.name = func_name;
    f.params = s_.def().params;
    ASSIGN_OR_RETURN(f.body, BuildBody());
    return f;
  }

 private:
  // Step 1: extents through the split tree, in the order splits were made.
  void ComputeExtents() {
    const size_t loops = s_.def().axes.size() + 2 * s_.splits().size() + s_.fuses().size();
    loop_.reserve(loops);
    for (const AxisDef& axis : s_.def().axes) {
      Set(axis.name, ir::IntImm(axis.extent), axis.extent);  // extent 1: the variable is 0
    }
    for (const Schedule::SplitRecord& sp : s_.splits()) {
      LoopInfo& parent = loop_[sp.parent];
      const int64_t pmax = parent.max, f = sp.factor;
      parent.split = &sp;
      auto [outer, inner] = SplitExtents(parent.extent, pmax, f, ir::Var(sp.outer));
      Set(sp.outer, outer, (pmax + f - 1) / f);
      Set(sp.inner, inner, std::min(f, pmax));
      loop_[sp.outer].made_by = &sp;
      loop_[sp.inner].made_by = &sp;
    }
  }

  // Step 1b: a fused loop f of two constant loops o, i: o = f / |i|, i = f % |i| in
  // every extent and axis value.
  absl::Status ApplyFuses() {
    for (const Schedule::FuseRecord& fu : s_.fuses()) {
      int64_t no, ni;
      if (!ir::IsConst(loop_[fu.outer].extent, &no) || !ir::IsConst(loop_[fu.inner].extent, &ni)) {
        return absl::InvalidArgumentError("fuse: " + fu.outer + " and " + fu.inner +
                                          " must have constant extents (no tails)");
      }
      Set(fu.fused, ir::IntImm(no * ni), no * ni);
      const Expr f = loop_[fu.fused].var;
      std::map<std::string, Expr> sub = {
          {fu.outer, no == 1 ? ir::IntImm(0) : ir::Div(f, ir::IntImm(ni))},
          {fu.inner, ni == 1 ? ir::IntImm(0) : ir::Mod(f, ir::IntImm(ni))}};
      loop_[fu.outer].var = sub[fu.outer];
      loop_[fu.inner].var = sub[fu.inner];
      for (auto& [name, info] : loop_) info.extent = ir::Substitute(info.extent, sub);
    }
    return absl::OkStatus();
  }

  void Set(const std::string& loop, Expr extent, int64_t max) {
    LoopInfo& info = loop_[loop];
    int64_t c;
    // A loop of extent 1 is not emitted; its variable is 0 everywhere.
    info.var = (ir::IsConst(extent, &c) && c == 1) ? ir::IntImm(0) : ir::Var(loop);
    info.extent = std::move(extent);
    info.max = max;
  }

  // Finds the loop (or split-away loop) at or above `loop` whose extent depends only
  // on `bound` variables and whose fullness implies `loop`'s: every split between
  // them divides evenly. False when there is none.
  bool FindFullAnchor(const std::string& loop, const std::set<std::string>& bound,
                      std::set<std::string>* anchors) {
    std::set<std::string> used;
    ir::CollectVars(loop_[loop].extent, &used);
    bool all_bound = true;
    for (const std::string& v : used) all_bound &= bound.count(v) > 0;
    if (all_bound) {
      anchors->insert(loop);
      return true;
    }
    const Schedule::SplitRecord* made_by = loop_[loop].made_by;
    if (made_by == nullptr) return false;
    const Schedule::SplitRecord& sp = *made_by;
    const int64_t pmax = loop_[sp.parent].max;
    if (sp.factor < pmax && pmax % sp.factor != 0) return false;
    return FindFullAnchor(sp.parent, bound, anchors);
  }

  Expr AxisValue(const std::string& loop) {
    const LoopInfo& info = loop_[loop];
    if (info.split == nullptr) return info.var;
    const Schedule::SplitRecord& sp = *info.split;
    return ir::Add(ir::Mul(AxisValue(sp.outer), ir::IntImm(sp.factor)), AxisValue(sp.inner));
  }

  // Leaves that survive (extent != 1), checked for lowerability.
  absl::Status PlanLoops() {
    std::set<std::string> outer_vars;
    for (const Schedule::Loop& leaf : s_.leaves()) {
      int64_t c;
      const LoopInfo& info = loop_[leaf.name];
      if (ir::IsConst(info.extent, &c) && c == 1) continue;
      std::set<std::string> used;
      ir::CollectVars(info.extent, &used);
      for (const std::string& v : used) {
        if (!outer_vars.count(v)) {
          return absl::InvalidArgumentError("loop " + leaf.name + " has a tail that depends on " + v +
                                            ", which is not outside it");
        }
      }
      outer_vars.insert(leaf.name);
      loops_.push_back(LoopPlan{leaf.name, info.extent, info.max, leaf.kind,
                                leaf.is_reduce});
    }
    for (size_t i = 0; i < loops_.size(); ++i) {
      if (loops_[i].kind == ir::ForKind::kVectorized && i + 1 != loops_.size()) {
        return absl::InvalidArgumentError("vectorized loop " + loops_[i].name +
                                          " is not the innermost loop");
      }
    }
    return absl::OkStatus();
  }

  void Substituted() {
    std::map<std::string, Expr> axis_values;
    for (const AxisDef& axis : s_.def().axes) axis_values[axis.name] = AxisValue(axis.name);
    out_index_ = ir::Substitute(s_.def().output_index, axis_values);
    value_ = ir::Substitute(s_.def().value, axis_values);
    if (s_.def().epilogue) epilogue_ = ir::Substitute(s_.def().epilogue, axis_values);
  }

  // The finished sum as stored: the compute's epilogue applied to `reduced`.
  Expr Finish(const Expr& reduced) const {
    return epilogue_ ? ir::Substitute(epilogue_, {{"%reduced", reduced}}) : reduced;
  }

  // One step of the reduction from the running sum `acc`.
  Expr Step(const Expr& acc) const {
    return s_.def().value_is_update ? ir::Substitute(value_, {{"%acc", acc}}) : ir::Add(acc, value_);
  }

  // The zero sums start from, in the accumulator's type.
  Expr Zero() const {
    return s_.def().accumulator == ir::DType::kFloat32 ? ir::FloatImm(0.0)
                                                       : ir::Cast(s_.def().accumulator, ir::IntImm(0));
  }

  // Builds loops around `body`, innermost last in `loops`. Loops named in `extents`
  // get that extent instead of their own (the caller guarantees it holds there).
  Stmt Nest(const std::vector<const LoopPlan*>& loops, Stmt body,
            const std::map<std::string, Expr>& extents = {}) {
    for (auto it = loops.rbegin(); it != loops.rend(); ++it) {
      const LoopPlan& l = **it;
      auto fixed = extents.find(l.name);
      Expr extent = fixed != extents.end() ? fixed->second : l.extent;
      int64_t c;
      const int64_t max_extent = ir::IsConst(extent, &c) ? c : l.max_extent;
      if (l.kind == ir::ForKind::kVectorized && !ir::IsConst(extent)) {
        Expr max = ir::IntImm(l.max_extent);
        body = ir::IfThenElse(ir::EQ(extent, max),
                              ir::For(l.name, max, l.max_extent, ir::ForKind::kVectorized, body),
                              ir::For(l.name, extent, l.max_extent, ir::ForKind::kVectorized, body));
      } else {
        body = ir::For(l.name, extent, max_extent, l.kind, body);
      }
    }
    return body;
  }

  // The extents of every loop when the loops in `fixed` have the given extents (one
  // shape of a tile): the split tree again, from those constants.
  std::unordered_map<std::string, Expr> ExtentsGiven(const std::map<std::string, int64_t>& fixed) const {
    std::unordered_map<std::string, Expr> ext;
    ext.reserve(loop_.size());
    auto pin = [&](const std::string& loop) {
      auto it = fixed.find(loop);
      if (it != fixed.end()) ext[loop] = ir::IntImm(it->second);
    };
    for (const AxisDef& axis : s_.def().axes) {
      ext[axis.name] = ir::IntImm(axis.extent);
      pin(axis.name);
    }
    for (const Schedule::SplitRecord& sp : s_.splits()) {
      auto [outer, inner] =
          SplitExtents(ext.at(sp.parent), loop_.at(sp.parent).max, sp.factor, loop_.at(sp.outer).var);
      ext[sp.outer] = outer;
      ext[sp.inner] = inner;
      pin(sp.outer);
      pin(sp.inner);
    }
    return ext;
  }

  // The nearest loop at or above `loop` in the split tree whose extent depends on
  // `bound` variables only; none when there is none.
  std::optional<std::string> BoundAncestor(std::string loop, const std::set<std::string>& bound) const {
    for (;;) {
      std::set<std::string> used;
      const LoopInfo& info = loop_.at(loop);
      ir::CollectVars(info.extent, &used);
      if (std::all_of(used.begin(), used.end(), [&](const std::string& v) { return bound.count(v) > 0; }))
        return loop;
      if (info.made_by == nullptr) return std::nullopt;
      loop = info.made_by->parent;
    }
  }

  // One copy of the tile per shape it takes, most frequent first: the tile's unrolled
  // and vectorized loops get constant extents in each (ExtentsGiven), chosen by the
  // extents of their nearest ancestors that the loops around the tile decide
  // ("anchors"). The shapes are found by walking those loops' iterations (static
  // shapes: a few hundred points for a GEMM). None when the tile has no such tail,
  // when an anchor is missing, or when there are too many points or shapes.
  std::optional<Stmt> TailVersions(const std::vector<const LoopPlan*>& around,
                                   const std::vector<const LoopPlan*>& inner,
                                   const std::function<Stmt(const std::map<std::string, Expr>&)>& build) {
    std::set<std::string> bound;
    for (const LoopPlan* l : around) bound.insert(l->name);
    std::set<std::string> anchor_set;
    for (const LoopPlan* l : inner) {
      if (ir::IsConst(l->extent)) continue;
      if (l->kind != ir::ForKind::kUnrolled && l->kind != ir::ForKind::kVectorized) continue;
      std::optional<std::string> a = BoundAncestor(l->name, bound);
      if (!a) return std::nullopt;
      anchor_set.insert(*a);
    }
    if (anchor_set.empty()) return std::nullopt;
    const std::vector<std::string> anchors(anchor_set.begin(), anchor_set.end());

    // The loops around the tile that the anchors' extents depend on, and the loops
    // their extents depend on in turn, in nest order.
    std::set<std::string> needed;
    for (const std::string& a : anchors) ir::CollectVars(loop_.at(a).extent, &needed);
    for (auto it = around.rbegin(); it != around.rend(); ++it) {
      if (needed.count((*it)->name)) ir::CollectVars((*it)->extent, &needed);
    }
    std::vector<const LoopPlan*> walk;
    for (const LoopPlan* l : around)
      if (needed.count(l->name)) walk.push_back(l);

    // Slot i holds walk[i]'s variable. A walk loop's extent may read the loops outside
    // it; the anchors' extents may read every walk loop.
    std::map<std::string, size_t> slots;
    for (size_t i = 0; i < walk.size(); ++i) slots[walk[i]->name] = i;
    std::vector<IntProgram> walk_extents, anchor_extents;
    for (size_t i = 0; i < walk.size(); ++i) {
      std::optional<IntProgram> p = IntProgram::Compile(walk[i]->extent, slots, i);
      if (!p) return std::nullopt;
      walk_extents.push_back(*std::move(p));
    }
    for (const std::string& a : anchors) {
      std::optional<IntProgram> p = IntProgram::Compile(loop_.at(a).extent, slots, walk.size());
      if (!p) return std::nullopt;
      anchor_extents.push_back(*std::move(p));
    }

    // The walk factors into groups of loops that no extent links (typically one per
    // tiled axis). Each group is walked alone; a shape is one partial shape of every
    // group, its count the product of theirs: the shapes and counts of one walk over
    // every point, in the sum of the groups' points instead of their product.
    std::vector<size_t> root(walk.size());
    for (size_t i = 0; i < walk.size(); ++i) root[i] = i;
    std::function<size_t(size_t)> find = [&](size_t i) { return root[i] == i ? i : root[i] = find(root[i]); };
    auto unite = [&](const std::set<size_t>& slots_read, size_t* first) {
      for (size_t slot : slots_read) {
        if (*first == SIZE_MAX)
          *first = find(slot);
        else
          root[find(slot)] = *first;
      }
    };
    for (size_t i = 0; i < walk.size(); ++i) {
      size_t first = find(i);
      unite(walk_extents[i].Slots(), &first);
    }
    struct Group {
      std::vector<size_t> loops;    // slots, in nest order
      std::vector<size_t> anchors;  // indices into `anchors`
      std::map<std::vector<int64_t>, int64_t> shapes;  // its anchors' extents -> points
      int64_t points = 0;
    };
    std::map<size_t, Group> groups;  // by root slot; SIZE_MAX - i: anchor i reads no slot
    std::vector<std::set<size_t>> anchor_reads;
    for (const IntProgram& p : anchor_extents) {
      anchor_reads.push_back(p.Slots());
      size_t first = SIZE_MAX;
      unite(anchor_reads.back(), &first);
    }
    for (size_t a = 0; a < anchors.size(); ++a) {
      const std::set<size_t>& read = anchor_reads[a];
      groups[read.empty() ? SIZE_MAX - a : find(*read.begin())].anchors.push_back(a);
    }
    for (size_t i = 0; i < walk.size(); ++i) groups[find(i)].loops.push_back(i);

    std::vector<int64_t> env(walk.size(), 0), stack;
    for (auto& entry : groups) {
      Group& g = entry.second;  // a reference, not a binding: lambdas capture it (C++17)
      std::vector<int64_t> shape(g.anchors.size());
      bool ok = true;
      std::function<void(size_t)> visit = [&](size_t depth) {
        if (!ok) return;
        if (depth == g.loops.size()) {
          for (size_t i = 0; i < g.anchors.size(); ++i) {
            std::optional<int64_t> v = anchor_extents[g.anchors[i]].Eval(env, &stack);
            if (!v) {
              ok = false;
              return;
            }
            shape[i] = *v;
          }
          auto it = g.shapes.find(shape);
          if (it == g.shapes.end())
            g.shapes.emplace(shape, 1);
          else
            ++it->second;
          ok = ++g.points < kMaxShapePoints && g.shapes.size() <= kMaxTileVersions;
          return;
        }
        const size_t slot = g.loops[depth];
        std::optional<int64_t> n = walk_extents[slot].Eval(env, &stack);
        if (!n) {
          ok = false;
          return;
        }
        for (int64_t i = 0; i < *n && ok; ++i) {
          env[slot] = i;
          visit(depth + 1);
        }
      };
      visit(0);
      if (!ok) return std::nullopt;
    }
    // The products, within the budgets of one walk over every point.
    std::vector<std::pair<std::vector<int64_t>, int64_t>> products = {{std::vector<int64_t>(anchors.size()), 1}};
    int64_t points = 1;
    for (const auto& [unused, g] : groups) {
      points = g.points == 0 ? 0 : std::min(kMaxShapePoints, points * g.points);
      std::vector<std::pair<std::vector<int64_t>, int64_t>> next;
      for (const auto& [shape, count] : products) {
        for (const auto& [part, part_count] : g.shapes) {
          std::vector<int64_t> full = shape;
          for (size_t i = 0; i < g.anchors.size(); ++i) full[g.anchors[i]] = part[i];
          next.emplace_back(std::move(full), count * part_count);
        }
      }
      products = std::move(next);
      if (products.size() > kMaxTileVersions || points >= kMaxShapePoints) return std::nullopt;
    }
    const std::map<std::vector<int64_t>, int64_t> shapes(products.begin(), products.end());
    if (shapes.empty()) return std::nullopt;

    std::vector<std::pair<std::vector<int64_t>, int64_t>> ordered(shapes.begin(), shapes.end());
    std::stable_sort(ordered.begin(), ordered.end(),
                     [](const auto& a, const auto& b) { return a.second > b.second; });
    std::optional<Stmt> chain;
    for (auto it = ordered.rbegin(); it != ordered.rend(); ++it) {
      std::map<std::string, int64_t> fixed;
      Expr guard;
      for (size_t i = 0; i < anchors.size(); ++i) {
        fixed[anchors[i]] = it->first[i];
        Expr eq = ir::EQ(loop_.at(anchors[i]).extent, ir::IntImm(it->first[i]));
        guard = guard ? ir::And(guard, eq) : eq;
      }
      const std::unordered_map<std::string, Expr> ext = ExtentsGiven(fixed);
      std::map<std::string, Expr> extents;
      for (const LoopPlan* l : inner) extents[l->name] = ext.at(l->name);
      Stmt tile = build(extents);
      // The least frequent shape needs no guard: the walk found every shape.
      chain = chain ? ir::IfThenElse(guard, tile, *chain) : tile;
    }
    return chain;
  }

  static std::vector<const LoopPlan*> Spatial(const std::vector<const LoopPlan*>& loops) {
    std::vector<const LoopPlan*> out;
    for (const LoopPlan* l : loops)
      if (!l->is_reduce) out.push_back(l);
    return out;
  }

  absl::StatusOr<Stmt> BuildBody() {
    const std::string& out = s_.def().output().name;
    const ir::DType out_type = s_.def().output().dtype;
    const ir::DType acc_type = s_.def().accumulator;
    std::vector<const LoopPlan*> all;
    for (const LoopPlan& l : loops_) all.push_back(&l);

    size_t first_reduce = all.size();
    for (size_t i = 0; i < all.size(); ++i) {
      if (all[i]->is_reduce) {
        first_reduce = i;
        break;
      }
    }
    bool has_reduction = false;
    for (const AxisDef& a : s_.def().axes) has_reduction |= a.is_reduce;
    if (!has_reduction || first_reduce == all.size()) {
      // No reduction loop left (none defined, or all of extent 1): out = value.
      for (const LoopPlan* l : all) {
        if (l->kind == ir::ForKind::kParallel && l->is_reduce)
          return absl::InvalidArgumentError("parallel reduction loop " + l->name);
      }
      return Nest(all, ir::Store(out, out_index_, Finish(s_.def().value_is_update ? Step(Zero()) : value_)));
    }

    std::vector<const LoopPlan*> prefix(all.begin(), all.begin() + first_reduce);
    std::vector<const LoopPlan*> rest(all.begin() + first_reduce, all.end());
    Stmt init = Nest(Spatial(rest), ir::Store(out, out_index_, Zero()));
    // Sums kept in the output itself (no tile, or a tile that does not hold the whole
    // reduction) need the output in the accumulator's type.
    auto in_output = [&] {
      return absl::InvalidArgumentError(absl::StrCat(
          "the sums of ", s_.def().name, " are ", ir::DTypeName(acc_type), " but its output is ",
          ir::DTypeName(out_type), ": a schedule must keep the whole reduction in a cache_write tile"));
    };

    if (!s_.cache_write_at()) {
      if (out_type != acc_type) return in_output();
      Stmt update = ir::Store(out, out_index_, Step(ir::Load(out, out_type, out_index_)));
      std::vector<Stmt> steps = {init, Nest(rest, update)};
      // Without a local tile the epilogue is a separate pass over the finished output.
      if (epilogue_) {
        steps.push_back(Nest(Spatial(rest), ir::Store(out, out_index_,
                                                      Finish(ir::Load(out, out_type, out_index_)))));
      }
      return Nest(prefix, ir::Block(steps));
    }

    // CacheWrite: the tile starts at the first surviving loop at or after the named one.
    size_t at = rest.size();
    bool seen = false;
    for (const Schedule::Loop& leaf : s_.leaves()) {
      seen |= (leaf.name == *s_.cache_write_at());
      if (!seen) continue;
      for (size_t i = 0; i < rest.size() && at == rest.size(); ++i)
        if (rest[i]->name == leaf.name) at = i;
      if (at != rest.size()) break;
    }
    for (size_t i = 0; i < prefix.size(); ++i) {
      if (prefix[i]->name == *s_.cache_write_at()) {
        return absl::InvalidArgumentError("cache_write at " + prefix[i]->name +
                                          ", outside the first reduction loop");
      }
    }
    std::vector<const LoopPlan*> outer(rest.begin(), rest.begin() + at);
    std::vector<const LoopPlan*> inner(rest.begin() + at, rest.end());
    std::vector<const LoopPlan*> tile = Spatial(inner);

    const std::string acc = out + ".local";
    Expr local_index = ir::IntImm(0);
    int64_t size = 1;
    for (const LoopPlan* l : tile) {
      if (l->kind == ir::ForKind::kParallel)
        return absl::InvalidArgumentError("parallel loop " + l->name + " inside cache_write tile");
      local_index = ir::Add(ir::Mul(local_index, ir::IntImm(l->max_extent)), ir::Var(l->name));
      size *= l->max_extent;
    }
    if (size > kMaxLocalTile) {
      return absl::InvalidArgumentError("cache_write tile of " + std::to_string(size) +
                                        " elements is larger than " + std::to_string(kMaxLocalTile));
    }
    for (const LoopPlan* l : inner) {
      if (l->kind == ir::ForKind::kParallel)
        return absl::InvalidArgumentError("parallel loop " + l->name + " inside cache_write tile");
    }
    // With every reduction loop inside the tile, the tile holds the final value.
    bool complete = outer.empty();
    if (!complete && out_type != acc_type) return in_output();
    Expr acc_value = ir::Load(acc, acc_type, local_index);
    // A tile that does not hold finished sums adds to the output; the epilogue then runs
    // in the write-back of the last iteration of every reduction loop outside the tile.
    Expr last_reduction;
    for (const LoopPlan* l : outer) {
      if (!l->is_reduce) continue;
      Expr last = ir::EQ(ir::Var(l->name), ir::Sub(l->extent, ir::IntImm(1)));
      last_reduction = last_reduction ? ir::And(last_reduction, last) : last;
    }
    auto build_tile = [&](const std::map<std::string, Expr>& full) {
      Stmt zero = Nest(tile, ir::Store(acc, local_index, Zero()), full);
      Stmt update = Nest(inner, ir::Store(acc, local_index, Step(acc_value)), full);
      Stmt back;
      if (complete) {
        back = Nest(tile, ir::Store(out, out_index_, Finish(acc_value)), full);
      } else {
        Expr sum = ir::Add(ir::Load(out, out_type, out_index_), acc_value);
        back = Nest(tile, ir::Store(out, out_index_, sum), full);
        if (epilogue_) {
          back = ir::IfThenElse(last_reduction,
                                Nest(tile, ir::Store(out, out_index_, Finish(sum)), full), back);
        }
      }
      return ir::Allocate(acc, acc_type, size, ir::Block({zero, update, back}));
    };

    std::vector<const LoopPlan*> around = prefix;
    around.insert(around.end(), outer.begin(), outer.end());
    std::optional<Stmt> versions = TailVersions(around, inner, build_tile);
    Stmt block;
    if (versions) {
      block = *versions;
    } else {
      // Full-tile versioning: one condition on the loops outside the tile says that
      // every tail inside it is full; that copy gets constant extents.
      std::set<std::string> bound;
      for (const LoopPlan* l : around) bound.insert(l->name);
      std::map<std::string, Expr> full;
      std::set<std::string> anchors;
      bool can_specialise = true;
      for (const LoopPlan* l : inner) {
        if (ir::IsConst(l->extent)) continue;
        full[l->name] = ir::IntImm(l->max_extent);
        can_specialise &= FindFullAnchor(l->name, bound, &anchors);
      }
      Expr condition;
      for (const std::string& a : anchors) {
        const LoopInfo& info = loop_[a];
        Expr eq = ir::EQ(info.extent, ir::IntImm(info.max));
        condition = condition ? ir::And(condition, eq) : eq;
      }
      block = build_tile({});
      if (condition && can_specialise) block = ir::IfThenElse(condition, build_tile(full), block);
    }
    Stmt main = Nest(outer, block);
    return Nest(prefix, complete ? main : ir::Block({init, main}));
  }

  // What lowering knows of one loop of the split tree (leaf or not).
  struct LoopInfo {
    Expr extent;
    int64_t max = 0;  // the largest extent it takes
    Expr var;         // its value in index expressions (0 for extent 1)
    const Schedule::SplitRecord* split = nullptr;    // the split of this loop, if any
    const Schedule::SplitRecord* made_by = nullptr;  // the split that made it, if any
  };

  const Schedule& s_;
  // By loop name, one hashed map: five ordered maps (extent, max, var, split, parent)
  // compared the loops' names byte by byte (names share prefixes like "j.o.i") and
  // took a quarter of a GEMM's lowering. Nothing iterates it where the order shows.
  std::unordered_map<std::string, LoopInfo> loop_;
  std::vector<LoopPlan> loops_;
  Expr out_index_, value_;
  Expr epilogue_;  // the compute's epilogue over loop variables; null when none
};

}  // namespace

absl::StatusOr<ir::LoweredFunc> Lower(const Schedule& schedule, const std::string& func_name) {
  return Lowerer(schedule).Run(func_name);
}

}  // namespace tuneforge

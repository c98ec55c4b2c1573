// Search policies on a synthetic cost function: no builds, no measurements, so these
// run in seconds and are deterministic for their seeds.
#include "compiler/target/testing/test_target.h"
#include "tuner/search_policy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "costmodel/xgb_model.h"
#include "tuner/ga_policy.h"
#include "tuner/model_policy.h"
#include "tuner/model_store.h"

namespace tuneforge {
namespace {

PolicyContext Context(const std::string& task, uint64_t seed) {
  PolicyContext c{*ParseTask(task), Avx512TestTarget(), nullptr, seed, nullptr, {}};
  c.tmpl = *FindTemplate(c.task);
  return c;
}

// A made-up but structured "machine": speed grows with the register tile up to a
// register budget, with vector width, with a cache tile that fits, with parallelism
// and register accumulation, and loses a little to software prefetch and packing A.
// Configs with vec_lanes 4 and unroll 4 "crash".
double SyntheticSeconds(const TuningTask& task, const Config& c, bool* failed) {
  *failed = c.Int("vec_lanes") == 4 && c.Int("unroll_k") == 4;
  double regs = c.Int("tile_i_reg") * c.Int("tile_j_vecs");
  double reg_eff = regs <= 16 ? regs / 16 : 16 / regs;
  reg_eff *= reg_eff;
  double vec_eff = static_cast<double>(c.Int("vec_lanes")) / 16;
  double tile_bytes = 4.0 * c.Int("tile_k") *
                      (c.Int("tile_i_reg") * c.Int("tile_i_blocks") +
                       c.Int("vec_lanes") * c.Int("tile_j_vecs") * c.Int("tile_j_blocks"));
  double cache_eff = tile_bytes < 32768 ? 1.0 : tile_bytes < 1 << 20 ? 0.7 : 0.5;
  double par = c.Int("parallel") ? 1.9 : 1.0;
  double acc = c.Str("accumulate") == "registers" ? 1.0 : 0.5;
  double order = c.Str("loop_order") == "ikj" ? 0.8 : 1.0;
  // Software prefetch and packing A cost a little on this machine, as they do on the
  // Zen 5 host (docs/history/benchmarks-2026-11.md, session 9: prefetch 0.78-0.98x, pack_a 0.93-1.07x).
  auto knob = [&](const char* name) { return c.values().contains(name) ? c.Int(name) : 0; };
  double prefetch = knob("prefetch_k") ? 0.85 : 1.0;
  double pack_a = knob("pack_a") ? 0.97 : 1.0;
  double gflops =
      200 * reg_eff * vec_eff * cache_eff * par * acc * order * prefetch * pack_a + 0.5;
  return task.Flops() / (gflops * 1e9);
}

// A record of `c` on the context's task, without a result yet.
TuningRecord EmptyRecord(const PolicyContext& ctx, const Config& c) {
  TuningRecord r;
  r.workload = WorkloadInfo{ctx.task.WorkloadKey(), ctx.task.op(), ctx.task.CanonicalText(),
                            ctx.task.ToJson(), ctx.task.Flops()};
  r.target.key = ctx.target.Key();
  r.template_name = ctx.tmpl->name();
  r.template_version = ctx.tmpl->version();
  r.config_json = c.ToJson();
  return r;
}

TuningRecord MakeRecord(const PolicyContext& ctx, const Config& c) {
  TuningRecord r = EmptyRecord(ctx, c);
  bool failed = false;
  double s = SyntheticSeconds(ctx.task, c, &failed);
  if (failed) {
    r.result.error = MeasureErrorKind::kRuntimeError;
  } else {
    r.result.costs = {s};
  }
  return r;
}

// Runs a policy for `trials` and returns the best GFLOP/s after each trial.
std::vector<double> RunSynthetic(SearchPolicy* policy, const PolicyContext& ctx, int trials,
                                 int batch) {
  std::vector<double> best_curve;
  double best = 0;
  while (static_cast<int>(best_curve.size()) < trials) {
    std::vector<Config> configs = policy->Propose(std::min(batch, trials - (int)best_curve.size()));
    if (configs.empty()) break;
    std::vector<TuningRecord> records;
    for (const Config& c : configs) {
      records.push_back(MakeRecord(ctx, c));
      const TuningRecord& r = records.back();
      if (r.result.error == MeasureErrorKind::kNone)
        best = std::max(best, ctx.task.Flops() / r.result.MedianCost() / 1e9);
      best_curve.push_back(best);
    }
    policy->Observe(records);
  }
  return best_curve;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

TEST(SearchPolicyTest, RegistryKnowsAllPolicies) {
  PolicyContext ctx = Context("matmul M=64 N=64 K=64", 1);
  for (const std::string& name : SearchPolicyNames()) {
    auto p = MakeSearchPolicy(name, ctx);
    ASSERT_TRUE(p.ok()) << name;
    EXPECT_EQ((*p)->name(), name);
  }
  EXPECT_EQ((*MakeSearchPolicy("", ctx))->name(), "model");
  EXPECT_FALSE(MakeSearchPolicy("annealing", ctx).ok());
}

TEST(SearchPolicyTest, EveryPolicyProposesValidDistinctUnvisitedConfigs) {
  PolicyContext ctx = Context("matmul M=128 N=128 K=128", 7);
  ConfigSpace space = ctx.tmpl->Space(ctx.task, ctx.target);
  for (const std::string& name : SearchPolicyNames()) {
    std::unique_ptr<SearchPolicy> policy = *MakeSearchPolicy(name, ctx);
    // Pretend some configs were measured earlier (e.g. loaded from the db): enough
    // that the model proposes full batches (ModelPolicyOptions::early_batch_rows).
    std::mt19937_64 rng(99);
    std::vector<TuningRecord> earlier;
    std::set<std::string> seen;
    for (int i = 0; i < 32; ++i) {
      earlier.push_back(MakeRecord(ctx, *space.Sample(rng)));
      seen.insert(earlier.back().config_json);
    }
    policy->Observe(earlier);
    for (int round = 0; round < 8; ++round) {
      int n = 4 + round;  // batch size follows the free agents: vary it
      std::vector<Config> configs = policy->Propose(n);
      ASSERT_EQ(static_cast<int>(configs.size()), n) << name;
      std::vector<TuningRecord> records;
      for (const Config& c : configs) {
        EXPECT_TRUE(space.Check(c).ok()) << name << " " << c.ToJson();
        EXPECT_TRUE(seen.insert(c.ToJson()).second) << name << " proposed twice: " << c.ToJson();
        records.push_back(MakeRecord(ctx, c));
      }
      policy->Observe(records);
    }
  }
}

// No silent fallback: a model that cannot be trained still yields a full batch, but the
// policy says it proposed at random and why (the loop puts that in the job's status).
TEST(SearchPolicyTest, ModelSaysWhenItFallsBackToRandom) {
  PolicyContext ctx = Context("matmul M=128 N=128 K=128", 5);
  for (bool broken : {false, true}) {
    ModelPolicyOptions options;
    options.cost_model.min_records = 8;
    options.early_batch = 0;  // full batches from the start
    if (broken) options.cost_model.xgb.objective = "no:such-objective";  // XGBoost refuses to train
    ModelPolicy policy(ctx, options);
    // Too few records: random by design, not a failure.
    std::vector<Config> first = policy.Propose(12);
    ASSERT_EQ(first.size(), 12u);
    EXPECT_EQ(policy.last_proposer(), "model:random");
    EXPECT_TRUE(policy.TakeWarnings().empty());
    std::vector<TuningRecord> records;
    for (const Config& c : first) records.push_back(MakeRecord(ctx, c));
    policy.Observe(records);
    std::vector<Config> next = policy.Propose(4);
    EXPECT_EQ(next.size(), 4u);
    std::vector<std::string> warnings = policy.TakeWarnings();
    if (broken) {
      EXPECT_EQ(policy.last_proposer(), "model:random");
      ASSERT_EQ(warnings.size(), 1u);
      EXPECT_NE(warnings[0].find("cost model training failed"), std::string::npos) << warnings[0];
      EXPECT_TRUE(policy.TakeWarnings().empty());  // each once
    } else {
      EXPECT_EQ(policy.last_proposer(), "model");
      EXPECT_TRUE(warnings.empty());
    }
  }
}

// No silent fallback: a hardware prior whose features are not in the layout (the
// register tile's, switched off) says which terms count 0; with them, no notice.
TEST(CostModelTest, HardwarePriorSaysWhichFeaturesItLacks) {
  PolicyContext ctx = Context("matmul M=128 N=128 K=128", 5);
  ModelPolicyOptions full;
  EXPECT_TRUE(ModelPolicy(ctx, full).TakeWarnings().empty());
  ModelPolicyOptions no_tile;
  no_tile.cost_model.features.register_tile = false;
  ModelPolicy policy(ctx, no_tile);
  std::vector<std::string> notices = policy.TakeWarnings();
  ASSERT_EQ(notices.size(), 1u);
  EXPECT_NE(notices[0].find("hardware prior incomplete"), std::string::npos) << notices[0];
  EXPECT_NE(notices[0].find("register_tile_over_registers"), std::string::npos) << notices[0];
  EXPECT_TRUE(policy.TakeWarnings().empty());  // each once
  no_tile.prior_pool = 0;
  no_tile.cost_model.hardware_prior_weight = 0;  // no prior: nothing missing
  EXPECT_TRUE(ModelPolicy(ctx, no_tile).TakeWarnings().empty());
}

// A model trained on direct convolutions only has never seen the Winograd knob vary:
// it must not be the one to rule Winograd out. Every algorithm gets its quota of
// measurements (two slots per batch while it lacks them), then the ranking decides.
TEST(SearchPolicyTest, ModelMeasuresEveryAlgorithmBeforeRulingOneOut) {
  PolicyContext ctx = Context("conv2d N=1 C=128 H=28 W=28 K=128 R=3 S=3 stride=1 pad=1", 11);
  ConfigSpace space = ctx.tmpl->Space(ctx.task, ctx.target);
  // Made-up speeds: direct kernels with bigger register tiles are faster.
  auto record = [&](const Config& c) {
    TuningRecord r = EmptyRecord(ctx, c);
    double gflops = 10.0 * c.Int("ow_reg") * c.Int("oc_vecs");
    r.result.costs = {ctx.task.Flops() / (gflops * 1e9)};
    return r;
  };
  auto algorithm = [](const Config& c) { return c.Str("algorithm"); };
  for (int quota : {0, 4}) {
    ModelPolicyOptions options;
    options.structural_quota = quota;
    options.early_batch = 0;  // batches of 8 after 24 configs
    ModelPolicy policy(ctx, options);
    std::mt19937_64 rng(5);
    std::vector<TuningRecord> direct;
    while (direct.size() < 24) {
      Config c = *space.Sample(rng);
      if (algorithm(c) == "direct") direct.push_back(record(c));
    }
    policy.Observe(direct);
    std::map<std::string, int> proposed;
    for (int batch = 0; batch < 3; ++batch) {
      std::vector<Config> configs = policy.Propose(8);
      ASSERT_EQ(configs.size(), 8u);
      std::vector<TuningRecord> records;
      for (const Config& c : configs) {
        ++proposed[algorithm(c)];
        records.push_back(record(c));
      }
      policy.Observe(records);
    }
    if (quota == 0) {
      // The set-up is one where the model alone neglects Winograd.
      EXPECT_LT(proposed["winograd_f23"] + proposed["winograd_f43"], 4);
    } else {
      EXPECT_GE(proposed["winograd_f23"], 4);
      EXPECT_GE(proposed["winograd_f43"], 4);
      EXPECT_GE(proposed["direct"], 12);  // at most half of a batch is quota picks
    }
  }
}

TEST(SearchPolicyTest, GridWalksTheWholeSmallSpaceOnce) {
  PolicyContext ctx = Context("matmul M=4 N=4 K=4", 3);
  ConfigSpace space = ctx.tmpl->Space(ctx.task, ctx.target);
  GridPolicy grid(space, 3);
  std::set<std::string> seen;
  for (;;) {
    std::vector<Config> c = grid.Propose(64);
    if (c.empty()) break;
    for (const Config& x : c) EXPECT_TRUE(seen.insert(x.ToJson()).second);
  }
  EXPECT_EQ(seen.size(), space.CountValid());
}

// A mutation that the constraint rejects is repaired by a second knob: from a 6-row x
// 4-vector register tile (24 accumulators, the budget), an 8-row tile accumulating in
// registers is two knob changes away across an invalid middle (8 x 4).
TEST(SearchPolicyTest, MutationRepairCrossesInvalidMiddles) {
  PolicyContext ctx = Context("matmul M=256 N=256 K=256", 1);
  ConfigSpace space = ctx.tmpl->Space(ctx.task, ctx.target);
  std::mt19937_64 rng(1);
  Config start;
  do {
    start = *space.Sample(rng);
  } while (start.Int("tile_i_reg") != 6 || start.Int("tile_j_vecs") != 4 ||
           start.Str("accumulate") != "registers");
  auto tall_in_registers = [](const Config& c) {
    return c.Int("tile_i_reg") == 8 && c.Str("accumulate") == "registers";
  };
  int tall_plain = 0, tall_repaired = 0;
  for (int i = 0; i < 2000; ++i) {
    Config plain = MutateConfig(space, start, 0, &rng);
    Config repaired = MutateConfig(space, start, 4, &rng);
    for (const Config* c : {&plain, &repaired}) {
      EXPECT_TRUE(space.Check(*c).ok()) << c->ToJson();
      int changed = 0;
      for (const Knob& k : space.knobs()) changed += c->values()[k.name] != start.values()[k.name];
      EXPECT_GE(changed, 1);
      EXPECT_LE(changed, c == &plain ? 1 : 2);
    }
    tall_plain += tall_in_registers(plain);
    tall_repaired += tall_in_registers(repaired);
  }
  EXPECT_EQ(tall_plain, 0);
  EXPECT_GT(tall_repaired, 5);  // 17 with this seed

  // A change of algorithm is not repaired: from a direct convolution whose reduction
  // order Winograd does not have, no mutation reaches Winograd.
  PolicyContext conv = Context("conv2d N=1 C=64 H=56 W=56 K=64 R=3 S=3 stride=1 pad=1", 1);
  ConfigSpace conv_space = conv.tmpl->Space(conv.task, conv.target);
  do {
    start = *conv_space.Sample(rng);
  } while (start.Str("algorithm") != "direct" || start.Str("reduce_order") != "rsc");
  int algorithm_changes = 0, repairs = 0;
  for (int i = 0; i < 2000; ++i) {
    Config c = MutateConfig(conv_space, start, 4, &rng);
    algorithm_changes += c.Str("algorithm") != "direct";
    int changed = 0;
    for (const Knob& k : conv_space.knobs()) changed += c.values()[k.name] != start.values()[k.name];
    repairs += changed == 2;
  }
  EXPECT_EQ(algorithm_changes, 0);
  EXPECT_GT(repairs, 0);  // other rejected changes are repaired
}

// The model-based policy beats random search on the synthetic machine. Deterministic
// (fixed seeds, no timing); the assertions are on medians over seeds with a wide
// margin, so neither XGBoost's tie breaking nor a new knob in the template flips them.
// The model policy against random search on the synthetic machine, 12 seeds: medians
// of the best GFLOP/s after `trials`, and per seed.
struct SyntheticRace {
  std::vector<double> model_best, random_best;
};
SyntheticRace RaceOnSyntheticCost(const Target& target, const ModelPolicyOptions& options, int trials) {
  SyntheticRace race;
  for (uint64_t seed : {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}) {
    PolicyContext ctx = Context("matmul M=256 N=256 K=256", seed);
    ctx.target = target;
    ModelPolicy model(ctx, options);
    RandomPolicy random(ctx.tmpl->Space(ctx.task, ctx.target), seed);
    race.model_best.push_back(RunSynthetic(&model, ctx, trials, 8).back());
    race.random_best.push_back(RunSynthetic(&random, ctx, trials, 8).back());
  }
  return race;
}

TEST(SearchPolicyTest, ModelBeatsRandomOnSyntheticCost) {
  const int kTrials = 96, kBatch = 8;
  std::vector<double> model_best, random_best, model_at_32, random_at_32;
  ModelPolicyOptions options;
  options.chains = 32;  // a cheaper search than the default keeps the test fast
  options.steps = 16;
  for (uint64_t seed : {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}) {
    PolicyContext ctx = Context("matmul M=256 N=256 K=256", seed);
    ModelPolicy model(ctx, options);
    RandomPolicy random(ctx.tmpl->Space(ctx.task, ctx.target), seed);
    std::vector<double> m = RunSynthetic(&model, ctx, kTrials, kBatch);
    std::vector<double> r = RunSynthetic(&random, ctx, kTrials, kBatch);
    model_best.push_back(m.back());
    random_best.push_back(r.back());
    model_at_32.push_back(m[31]);
    random_at_32.push_back(r[31]);
  }
  std::printf("median best GFLOP/s after %d trials: model %.1f, random %.1f\n", kTrials,
              Median(model_best), Median(random_best));
  for (size_t i = 0; i < model_best.size(); ++i)
    std::printf("  seed %zu: model %.1f random %.1f\n", i + 1, model_best[i], random_best[i]);
  EXPECT_GT(Median(model_best), 1.3 * Median(random_best));
  // The model is strictly ahead at the end in at least two thirds of the seeds (12
  // seeds: with 5, one seed decided the outcome; ties on the synthetic optimum happen).
  int wins = 0;
  for (size_t i = 0; i < model_best.size(); ++i) wins += model_best[i] > random_best[i];
  EXPECT_GE(wins, 8);
}

// A model batch holds no two configs that differ in a single knob (when the model
// ranks enough candidates): with min_knob_distance 1 the same trained model proposes
// such near-duplicates, its scores tying on knobs it cannot tell apart.
TEST(SearchPolicyTest, ModelBatchesHaveNoNearDuplicates) {
  auto near_pairs = [](int min_distance) {
    PolicyContext ctx = Context("matmul M=256 N=256 K=256", 3);
    ctx.target = Avx2TestTarget();
    ModelPolicyOptions options;
    options.chains = 32;
    options.steps = 16;
    options.epsilon = 0;
    options.min_knob_distance = min_distance;
    ModelPolicy model(ctx, options);
    RandomPolicy random(ctx.tmpl->Space(ctx.task, ctx.target), 3);
    std::vector<TuningRecord> seen;
    for (const Config& c : random.Propose(64)) seen.push_back(MakeRecord(ctx, c));
    model.Observe(seen);
    int pairs = 0;
    for (int round = 0; round < 4; ++round) {
      std::vector<Config> batch = model.Propose(16);
      EXPECT_EQ(model.last_proposer(), "model");
      for (size_t i = 0; i < batch.size(); ++i) {
        for (size_t j = i + 1; j < batch.size(); ++j) {
          int d = 0;
          for (const auto& [k, v] : batch[i].values().items()) d += batch[j].values().value(k, nlohmann::json()) != v;
          pairs += d < 2;
        }
      }
      std::vector<TuningRecord> records;
      for (const Config& c : batch) records.push_back(MakeRecord(ctx, c));
      model.Observe(records);
    }
    return pairs;
  };
  const int without = near_pairs(1), with = near_pairs(2);
  std::printf("near-duplicate pairs in 4 batches of 16: %d without the rule, %d with\n", without, with);
  EXPECT_GT(without, 0);
  EXPECT_EQ(with, 0);
}

// The probe IncumbentProbes would choose after `seen`: of the best measured config's
// valid one-knob neighbours whose new value has fewer than probe_quota of the seen
// configs, the one `model` scores best.
Config ExpectedProbe(ModelPolicy& model, const ConfigSpace& space, int probe_quota,
                     const std::vector<TuningRecord>& seen) {
  std::map<std::string, int> count;  // "knob=value" -> measured configs
  const TuningRecord* best = nullptr;
  for (const TuningRecord& r : seen) {
    const Config c = *Config::FromJson(r.config_json);
    for (const auto& [k, v] : c.values().items()) ++count[k + "=" + v.dump()];
    if (!best || RecordThroughput(r) > RecordThroughput(*best)) best = &r;
  }
  const Config incumbent = *Config::FromJson(best->config_json);
  std::vector<Config> neighbours;
  for (const Knob& k : space.knobs())
    for (const nlohmann::json& v : k.values) {
      nlohmann::json values = incumbent.values();
      if (values[k.name] == v || count[k.name + "=" + v.dump()] >= probe_quota) continue;
      values[k.name] = v;
      Config c(std::move(values));
      if (space.Check(c).ok()) neighbours.push_back(std::move(c));
    }
  EXPECT_FALSE(neighbours.empty());
  if (neighbours.empty()) return incumbent;
  std::vector<float> scores = *model.cost_model().Predict(neighbours);
  return neighbours[std::max_element(scores.begin(), scores.end()) - scores.begin()];
}

// A model policy's first batch of 8 after 24 sampled configs that `record` measures
// (nullopt: not one of the 24), and the probe it would choose (ExpectedProbe).
struct ProbeBatch {
  std::vector<Config> batch;
  Config probe;
  bool HoldsProbe() const { return std::find(batch.begin(), batch.end(), probe) != batch.end(); }
};
ProbeBatch ProposeAfter24(const PolicyContext& ctx, const ModelPolicyOptions& options,
                          const std::function<std::optional<TuningRecord>(const Config&)>& record) {
  const ConfigSpace space = ctx.tmpl->Space(ctx.task, ctx.target);
  ModelPolicyOptions full_batches = options;
  full_batches.early_batch = 0;  // a batch of 8 after 24 configs
  ModelPolicy model(ctx, full_batches);
  std::mt19937_64 rng(5);
  std::vector<TuningRecord> seen;
  while (seen.size() < 24)
    if (std::optional<TuningRecord> r = record(*space.Sample(rng, 1000))) seen.push_back(*std::move(r));
  model.Observe(seen);
  ProbeBatch out;
  out.batch = model.Propose(8);
  EXPECT_EQ(model.last_proposer(), "model");
  out.probe = ExpectedProbe(model, space, options.probe_quota, seen);
  return out;
}

// Incumbent probes: after 24 random configs, none with tile_k 256 (the synthetic
// machine's choice would depend on the other knobs), the next batch holds the
// best-scored of the best config's one-knob neighbours whose new value has fewer than
// probe_quota measurements; without probes, for this seed, it does not.
TEST(SearchPolicyTest, ModelProbesTheBestConfigInUnderMeasuredValues) {
  PolicyContext ctx = Context("matmul M=256 N=256 K=256", 5);
  auto record = [&](const Config& c) -> std::optional<TuningRecord> {
    if (c.Int("tile_k") == 256) return std::nullopt;
    return MakeRecord(ctx, c);
  };
  for (int probes : {1, 0}) {
    ModelPolicyOptions options;
    options.incumbent_probes = probes;
    ProbeBatch run = ProposeAfter24(ctx, options, record);
    EXPECT_EQ(run.HoldsProbe(), probes > 0) << run.probe.ToJson();
  }
}

// Records of direct conv2d kernels only, with made-up speeds (as in
// ModelMeasuresEveryAlgorithmBeforeRulingOneOut); nullopt for the other algorithms.
std::function<std::optional<TuningRecord>(const Config&)> DirectOnly(const PolicyContext& ctx) {
  return [ctx](const Config& c) -> std::optional<TuningRecord> {
    if (c.Str("algorithm") != "direct") return std::nullopt;
    TuningRecord r = EmptyRecord(ctx, c);
    r.result.costs = {ctx.task.Flops() / (10e9 * c.Int("ow_reg") * c.Int("oc_vecs"))};
    return r;
  };
}

// A batch that has quota picks (an algorithm of conv2d measured fewer than
// structural_quota times) has no probe: the quota already spends up to half the batch
// on exploration. For this seed the batch after 24 direct configs holds quota picks
// and not the probe; with the quota off, the probe.
TEST(SearchPolicyTest, ModelLeavesProbesOutWhileTheQuotaPicks) {
  PolicyContext ctx = Context("conv2d N=1 C=128 H=28 W=28 K=128 R=3 S=3 stride=1 pad=1", 11);
  auto record = DirectOnly(ctx);
  for (int quota : {4, 0}) {
    ModelPolicyOptions options;
    options.structural_quota = quota;
    ProbeBatch run = ProposeAfter24(ctx, options, record);
    int winograd = 0;
    for (const Config& c : run.batch) winograd += c.Str("algorithm") != "direct";
    if (quota > 0) {
      EXPECT_GE(winograd, 2);  // the quota picks
    }
    EXPECT_EQ(run.HoldsProbe(), quota == 0) << run.probe.ToJson();
  }
}

// early_batch: while cold and with fewer than early_batch_rows own configs, a Propose
// returns at most early_batch configs, so the model retrains after each few; full
// batches after that, and from the start when other shapes' records are there.
TEST(SearchPolicyTest, ModelProposesSmallBatchesWhileColdAndFew) {
  PolicyContext ctx = Context("matmul M=256 N=256 K=256", 3);
  ModelPolicyOptions options;
  options.early_batch = 4;
  options.cost_model.min_records = 4;
  options.early_batch_rows = 12;
  ModelPolicy policy(ctx, options);
  std::vector<size_t> sizes;
  std::vector<std::string> proposers;
  for (int batch = 0; batch < 5; ++batch) {
    std::vector<Config> configs = policy.Propose(8);
    sizes.push_back(configs.size());
    proposers.push_back(policy.last_proposer());
    std::vector<TuningRecord> records;
    for (const Config& c : configs) records.push_back(MakeRecord(ctx, c));
    policy.Observe(records);
  }
  EXPECT_EQ(sizes, (std::vector<size_t>{4, 4, 4, 8, 8}));
  EXPECT_EQ(proposers, (std::vector<std::string>{"model:random", "model", "model", "model", "model"}));

  ModelPolicyOptions off_options;
  off_options.early_batch = 0;
  ModelPolicy off(ctx, off_options);
  EXPECT_EQ(off.Propose(8).size(), 8u);
  ModelPolicy by_default(ctx, ModelPolicyOptions{});
  EXPECT_EQ(by_default.Propose(8).size(), 2u);
  // The job's switch (JobSpec.model_early_batch, tune --model-early-batch) goes through
  // the factory; a negative one is refused.
  for (auto [early_batch, size] : {std::pair<std::optional<int>, size_t>{std::nullopt, 2},
                                   {0, 8}, {5, 5}}) {
    PolicyContext switched = ctx;
    switched.model_early_batch = early_batch;
    absl::StatusOr<std::unique_ptr<SearchPolicy>> made = MakeSearchPolicy("model", switched);
    ASSERT_TRUE(made.ok()) << made.status();
    EXPECT_EQ((*made)->Propose(8).size(), size) << early_batch.value_or(-1);
  }
  PolicyContext negative = ctx;
  negative.model_early_batch = -1;
  EXPECT_FALSE(MakeSearchPolicy("model", negative).ok());

  PolicyContext other = Context("matmul M=128 N=256 K=256", 3);
  ConfigSpace other_space = other.tmpl->Space(other.task, other.target);
  std::mt19937_64 rng(7);
  std::vector<TuningRecord> others;
  for (int i = 0; i < 16; ++i) others.push_back(MakeRecord(other, *other_space.Sample(rng, 1000)));
  ModelPolicy transfer(ctx, options);
  transfer.ObserveOtherTasks(others);
  ASSERT_GT(transfer.cost_model().rows(), 0);
  EXPECT_EQ(transfer.Propose(8).size(), 8u);
}

// The hardware prior (ModelPolicyOptions::prior_pool, CostModelOptions::hardware_prior_weight): it prefers the
// target's widest vectors, a parallel loop, and a register tile that fills the vector
// registers without spilling; the first configs are drawn by it, and the cold model is
// trained on top of it.
TEST(SearchPolicyTest, ModelStartsFromTheHardwarePrior) {
  PolicyContext ctx = Context("matmul M=256 N=256 K=256", 1);
  ModelPolicy probe(ctx, ModelPolicyOptions{});
  Config base(nlohmann::json{{"tile_i_reg", 4}, {"vec_lanes", 16}, {"tile_j_vecs", 4},
                             {"tile_i_blocks", 4}, {"tile_j_blocks", 1}, {"tile_k", 128},
                             {"unroll_k", 1}, {"loop_order", "ijk"}, {"parallel", 1},
                             {"accumulate", "registers"}, {"pack_b", 1}});
  auto with = [&](const char* knob, nlohmann::json value) {
    nlohmann::json v = base.values();
    v[knob] = std::move(value);
    return Config(std::move(v));
  };
  ASSERT_TRUE(ctx.tmpl->Space(ctx.task, ctx.target).Check(base).ok());
  // 16 accumulators of 32 registers; narrower vectors, no parallel loop, a tile of 4
  // or of 2 accumulators each score lower.
  const std::vector<float> prior =
      probe.cost_model().HardwarePriorOf({base, with("vec_lanes", 4), with("parallel", 0),
                             with("tile_j_vecs", 1), with("tile_i_reg", 2)});
  for (size_t i = 1; i < prior.size(); ++i) EXPECT_LT(prior[i], prior[0]) << i;

  // The first configs: the prior's best of 16 random draws, against plain random
  // draws, 8 seeds; the mean prior of each.
  double by_prior = 0, by_chance = 0;
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    PolicyContext seeded = Context("matmul M=256 N=256 K=256", seed);
    ModelPolicy with_prior(seeded, ModelPolicyOptions{});
    ModelPolicyOptions off;
    off.prior_pool = 0;
    ModelPolicy plain(seeded, off);
    std::vector<Config> first = with_prior.Propose(2);
    ASSERT_EQ(first.size(), 2u);
    EXPECT_EQ(with_prior.last_proposer(), "model:random");
    EXPECT_GE(KnobDistance(seeded.tmpl->Space(seeded.task, seeded.target), first[0], first[1]), 2);
    for (float p : with_prior.cost_model().HardwarePriorOf(first)) by_prior += p / 16;
    for (float p : probe.cost_model().HardwarePriorOf(plain.Propose(2))) by_chance += p / 16;
  }
  std::printf("mean prior of the first two configs of 8 seeds: %.3f picked by it, %.3f at random\n",
              by_prior, by_chance);
  EXPECT_GT(by_prior, by_chance + 0.5);

  // Cold, the model learns on top of the prior: a score is the trees' output plus
  // hardware_prior_weight x the prior.
  ModelPolicyOptions options;
  options.cost_model.hardware_prior_weight = 2;
  ModelPolicy policy(ctx, options);
  ConfigSpace space = ctx.tmpl->Space(ctx.task, ctx.target);
  std::mt19937_64 rng(5);
  std::vector<TuningRecord> records;
  for (int i = 0; i < 12; ++i) records.push_back(MakeRecord(ctx, *space.Sample(rng, 1000)));
  policy.Observe(records);
  ASSERT_TRUE(policy.cost_model().Update().ok());
  std::vector<Config> configs = {base, with("vec_lanes", 4), with("tile_i_reg", 2)};
  const std::vector<float> scores = *policy.cost_model().Predict(configs);
  const std::vector<float> priors = policy.cost_model().HardwarePriorOf(configs);
  costmodel::FeatureExtractor extractor(space, ctx.target, options.cost_model.features);
  for (size_t i = 0; i < configs.size(); ++i) {
    absl::StatusOr<ir::LoweredFunc> func = ctx.tmpl->InstantiateKernel(ctx.task, ctx.target, configs[i]);
    ASSERT_TRUE(func.ok()) << func.status();
    const float trees = (*policy.cost_model().own_model().Predict({extractor.Extract(*func, configs[i])}))[0];
    EXPECT_NEAR(scores[i], trees + 2 * priors[i], 1e-4) << i;
  }
}

// On an AVX2 target the matmul space has two more knobs the synthetic machine barely
// cares about (prefetch_k, pack_a): many configs the model cannot tell apart.
TEST(SearchPolicyTest, ModelBeatsRandomWithKnobsThatHardlyMatter) {
  ModelPolicyOptions options;
  options.chains = 32;
  options.steps = 16;
  // The synthetic machine's register tile is best at 16 accumulators, also in AVX2's 16
  // registers, where a real core would have none left for the operands; the hardware
  // prior knows better (3/8 to 4/5 of the registers) and would lead the search away
  // from this machine's optimum. The test is about the search and the model: no prior.
  options.prior_pool = 0;
  options.cost_model.hardware_prior_weight = 0;
  SyntheticRace race = RaceOnSyntheticCost(Avx2TestTarget(), options, 96);
  std::printf("AVX2 space, median best GFLOP/s after 96 trials: model %.1f, random %.1f\n",
              Median(race.model_best), Median(race.random_best));
  EXPECT_GT(Median(race.model_best), 1.2 * Median(race.random_best));
}

// The model ranks held-out configs far better than chance (0.5), and a model trained
// only on another shape of matmul (transfer learning) also ranks this shape's configs.
TEST(CostModelTest, ModelRanksHeldOutConfigsAndTransfers) {
  PolicyContext ctx = Context("matmul M=256 N=256 K=256", 11);
  PolicyContext other = Context("matmul M=128 N=384 K=192", 12);
  ConfigSpace space = ctx.tmpl->Space(ctx.task, ctx.target);
  ConfigSpace other_space = other.tmpl->Space(other.task, other.target);
  std::mt19937_64 rng(5);
  std::vector<Config> held_out;
  std::vector<float> labels;
  for (int i = 0; i < 300; ++i) {
    Config c = *space.Sample(rng);
    TuningRecord r = MakeRecord(ctx, c);
    held_out.push_back(c);
    labels.push_back(r.result.error == MeasureErrorKind::kNone ? 1 / r.result.MedianCost() : 0);
  }
  auto accuracy = [&](ModelPolicy* p) {
    auto scores = p->cost_model().Predict(held_out);
    EXPECT_TRUE(scores.ok()) << scores.status();
    return scores.ok() ? costmodel::PairwiseAccuracy(*scores, labels) : 0.0;
  };

  ModelPolicy trained(ctx, ModelPolicyOptions{});
  std::vector<TuningRecord> train;
  for (int i = 0; i < 300; ++i) train.push_back(MakeRecord(ctx, *space.Sample(rng)));
  trained.Observe(train);
  ASSERT_TRUE(trained.cost_model().Update().ok());
  double own = accuracy(&trained);

  ModelPolicy transferred(ctx, ModelPolicyOptions{});
  std::vector<TuningRecord> other_records;
  for (int i = 0; i < 300; ++i)
    other_records.push_back(MakeRecord(other, *other_space.Sample(rng)));
  transferred.ObserveOtherTasks(other_records);
  ASSERT_TRUE(transferred.cost_model().Update().ok());
  double transfer = accuracy(&transferred);
  std::printf("pairwise accuracy on held-out configs: trained %.3f, transferred %.3f\n", own,
              transfer);
  EXPECT_GT(own, 0.8);
  EXPECT_GT(transfer, 0.7);
}

// Scoring on several threads (the workers take runs of candidates as they go) gives
// every candidate the score one thread gives it, in the candidates' order.
// The scores of `candidates` by a model policy with `options` trained on `train`.
std::vector<float> TrainedScores(const PolicyContext& ctx, const ModelPolicyOptions& options,
                                 const std::vector<TuningRecord>& train,
                                 const std::vector<Config>& candidates) {
  ModelPolicy policy(ctx, options);
  policy.Observe(train);
  EXPECT_TRUE(policy.cost_model().Update().ok());
  absl::StatusOr<std::vector<float>> out = policy.cost_model().Predict(candidates);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *out : std::vector<float>{};
}

TEST(CostModelTest, ScoringThreadsDoNotChangeScores) {
  PolicyContext ctx = Context("matmul M=256 N=256 K=256", 13);
  ConfigSpace space = ctx.tmpl->Space(ctx.task, ctx.target);
  std::mt19937_64 rng(7);
  std::vector<TuningRecord> train;
  for (int i = 0; i < 200; ++i) train.push_back(MakeRecord(ctx, *space.Sample(rng)));
  std::vector<Config> candidates;  // not a multiple of a run, with repeats
  for (int i = 0; i < 301; ++i) candidates.push_back(*space.Sample(rng));
  candidates.push_back(candidates[5]);
  auto scores = [&](int threads) {
    ModelPolicyOptions options;
    options.cost_model.scoring_threads = threads;
    return TrainedScores(ctx, options, train, candidates);
  };
  const std::vector<float> one = scores(1);
  ASSERT_EQ(one.size(), candidates.size());
  EXPECT_EQ(one[5], one.back());
  EXPECT_GT(std::set<float>(one.begin(), one.end()).size(), 10u);  // not a constant
  EXPECT_EQ(scores(2), one);
  EXPECT_EQ(scores(3), one);
}

// A DirectoryModelStore in a fresh temporary directory, removed at the end, and a
// matmul 64^3 context that uses it.
struct StoreFixture {
  explicit StoreFixture(const std::string& name)
      : dir(std::filesystem::temp_directory_path() / (name + "_" + std::to_string(getpid()))),
        store(dir.string()),
        ctx(Context("matmul M=64 N=64 K=64", 2)) {
    ctx.model_store = &store;
  }
  ~StoreFixture() { std::filesystem::remove_all(dir); }
  std::filesystem::path dir;
  DirectoryModelStore store;
  PolicyContext ctx;
};

TEST(CostModelTest, ModelStoreRoundTrip) {
  StoreFixture fx("model_store_test");
  DirectoryModelStore& store = fx.store;
  const PolicyContext& ctx = fx.ctx;
  // Trained on top of the hardware prior (the default): under a key of its own.
  std::string key = ModelKey(ctx.tmpl->name(), ctx.tmpl->version(), ctx.target.Key()) + "/hw2";
  EXPECT_EQ(ModelPolicy(ctx, ModelPolicyOptions{}).cost_model().OwnModelKey(), key);
  EXPECT_FALSE(store.Load(key)->has_value());
  ConfigSpace space = ctx.tmpl->Space(ctx.task, ctx.target);
  std::mt19937_64 rng(1);
  std::vector<Config> probe;
  for (int i = 0; i < 20; ++i) probe.push_back(*space.Sample(rng));
  std::vector<float> before;
  {
    ModelPolicy p(ctx, ModelPolicyOptions{});
    std::vector<TuningRecord> records;
    for (int i = 0; i < 50; ++i) records.push_back(MakeRecord(ctx, *space.Sample(rng)));
    p.Observe(records);
    ASSERT_TRUE(p.cost_model().Update().ok());
    before = *p.cost_model().Predict(probe);
  }
  ASSERT_TRUE(store.Load(key)->has_value());
  ModelPolicy fresh(ctx, ModelPolicyOptions{});  // loads the stored model
  auto after = fresh.cost_model().Predict(probe);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(before, *after);
  // Without the prior its scores would be other ones: not loaded.
  ModelPolicyOptions no_prior;
  no_prior.cost_model.hardware_prior_weight = 0;
  EXPECT_FALSE(ModelPolicy(ctx, no_prior).cost_model().can_predict());
}

// A stored model of another feature layout (e.g. saved before kFeatureVersion changed,
// under a key written by hand) is not loaded: scoring its rows would be wrong or fail.
TEST(CostModelTest, StoredModelOfAnotherFeatureLengthIsIgnored) {
  StoreFixture fx("model_store_len");
  const PolicyContext& ctx = fx.ctx;
  costmodel::XgbModel other;
  std::vector<costmodel::FeatureVector> rows;
  std::vector<float> labels;
  for (int i = 0; i < 16; ++i) {
    rows.push_back(costmodel::FeatureVector(7, static_cast<float>(i)));
    labels.push_back(static_cast<float>(i));
  }
  ASSERT_TRUE(other.Train(rows, labels).ok());
  ASSERT_EQ(other.num_features(), 7);
  ASSERT_TRUE(fx.store.Save(ModelPolicy(ctx, ModelPolicyOptions{}).cost_model().OwnModelKey(),
                            *other.SaveToBytes()).ok());
  ModelPolicy policy(ctx, ModelPolicyOptions{});
  EXPECT_FALSE(policy.cost_model().can_predict());
  // It proposes at random (no model yet; a small early batch), it does not fail.
  EXPECT_EQ(policy.Propose(4).size(), 2u);
  EXPECT_EQ(policy.last_proposer(), "model:random");
  std::vector<std::string> warnings = policy.TakeWarnings();
  ASSERT_EQ(warnings.size(), 1u);  // the stored model of another feature length
  EXPECT_NE(warnings[0].find("stored cost model ignored"), std::string::npos) << warnings[0];
}

}  // namespace
}  // namespace tuneforge

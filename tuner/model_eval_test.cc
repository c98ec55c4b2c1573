// The cost model on real measurements: tuner/testdata/matmul_records.jsonl holds one
// tuning run each of matmul 512^3 (327 configs) and 256^3 (247 configs), random
// search, measured on the 2-core znver4 development machine (the best time of each
// config; null = failed). Training and the held-out split are deterministic, so these
// are assertions on fixed numbers, not on timing or luck.
#include "compiler/target/testing/test_target.h"
#include "tuner/model_eval.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <fstream>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "tuner/log_model.h"
#include "tuner/model_policy.h"
#include "tuner/model_store.h"
#include "tuner/tuning_loop.h"

#include "nlohmann/json.hpp"

namespace tuneforge {
namespace {

std::vector<TuningRecord> LoadRecords(const Target& target,
                                      const std::string& file = "matmul_records.jsonl") {
  std::ifstream in(std::string(TF_TESTDATA_DIR) + "/" + file);
  EXPECT_TRUE(in.good());
  std::vector<TuningRecord> out;
  std::string line;
  while (std::getline(in, line)) {
    nlohmann::json j = nlohmann::json::parse(line);
    TuningTask task = *ParseTask(j["task"].get<std::string>());
    TuningRecord r;
    r.workload = WorkloadInfo{task.WorkloadKey(), task.op(), task.CanonicalText(), task.ToJson(),
                              task.Flops()};
    r.target = MakeTargetInfo(target);
    r.template_name = (*FindTemplate(task))->name();
    r.template_version = (*FindTemplate(task))->version();
    r.config_json = j["config"].dump();
    if (j["seconds"].is_null())
      r.result.error = MeasureErrorKind::kRuntimeError;
    else
      r.result.costs = {j["seconds"].get<double>()};
    out.push_back(std::move(r));
  }
  return out;
}

PolicyContext ContextFor(const std::string& task) {
  PolicyContext c{*ParseTask(task), Avx512TestTarget(), nullptr, 1, nullptr, {}};
  c.tmpl = *FindTemplate(c.task);
  return c;
}

// Mean held-out pairwise accuracy over 4 splits.
double MeanAccuracy(const PolicyContext& ctx, const std::vector<TuningRecord>& own,
                    const std::vector<TuningRecord>& others, bool own_train) {
  double sum = 0;
  for (uint64_t split = 1; split <= 4; ++split) {
    HeldOutOptions h;
    h.split_seed = split;
    absl::StatusOr<HeldOutResult> r =
        EvaluateHeldOut(ctx, ModelPolicyOptions{}, own, others, h, own_train);
    EXPECT_TRUE(r.ok()) << r.status();
    if (r.ok()) sum += r->pairwise_accuracy;
  }
  return sum / 4;
}

TEST(ModelEvalTest, RanksHeldOutRealMeasurementsFarBetterThanChance) {
  PolicyContext small = ContextFor("matmul M=256 N=256 K=256");
  PolicyContext large = ContextFor("matmul M=512 N=512 K=512");
  std::vector<TuningRecord> all = LoadRecords(small.target), small_records, large_records;
  for (const TuningRecord& r : all)
    (r.workload.key == small.task.WorkloadKey() ? small_records : large_records).push_back(r);
  ASSERT_GT(small_records.size(), 200u);
  ASSERT_GT(large_records.size(), 300u);

  double own_small = MeanAccuracy(small, small_records, {}, true);
  double own_large = MeanAccuracy(large, large_records, {}, true);
  // Transfer: a model of the other shape only, then both.
  double transfer_small = MeanAccuracy(small, small_records, large_records, false);
  double both_small = MeanAccuracy(small, small_records, large_records, true);
  std::printf("held-out pairwise accuracy: 256^3 %.3f, 512^3 %.3f; 256^3 from 512^3 only %.3f, "
              "from both %.3f\n",
              own_small, own_large, transfer_small, both_small);
  // Chance is 0.5. Measured noise on a loaded machine caps these (docs/search.md).
  EXPECT_GT(own_small, 0.78);
  EXPECT_GT(own_large, 0.72);
  EXPECT_GT(transfer_small, 0.78);
  EXPECT_GT(both_small, 0.78);
}

TEST(ModelEvalTest, HeldOutSplitIsDeterministicAndDisjoint) {
  PolicyContext ctx = ContextFor("matmul M=256 N=256 K=256");
  std::vector<TuningRecord> all = LoadRecords(ctx.target);
  auto a = EvaluateHeldOut(ctx, ModelPolicyOptions{}, all, {});
  auto b = EvaluateHeldOut(ctx, ModelPolicyOptions{}, all, {});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->pairwise_accuracy, b->pairwise_accuracy);
  std::set<std::string> distinct;
  for (const TuningRecord& r : all)
    if (r.workload.key == ctx.task.WorkloadKey()) distinct.insert(r.config_json);
  int n = static_cast<int>(distinct.size());
  EXPECT_EQ(a->train + a->test, n);
  EXPECT_EQ(a->train, static_cast<int>(n * 0.75));
  // Other seeds split differently (the mean over splits means something).
  std::set<double> accuracies;
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    HeldOutOptions h;
    h.split_seed = seed;
    auto r = EvaluateHeldOut(ctx, ModelPolicyOptions{}, all, {}, h);
    ASSERT_TRUE(r.ok());
    accuracies.insert(r->pairwise_accuracy);
  }
  EXPECT_EQ(accuracies.size(), 4u);
}

// SimulateOptions::bar_rank lowers the bar to the k-th best config and changes nothing
// else: the same seed proposes the same configs, so the run stops no later, and at
// least k configs are within 95% of the bar.
TEST(ModelEvalTest, SimulatedSearchBarRankLowersOnlyTheBar) {
  PolicyContext ctx = ContextFor("matmul M=256 N=256 K=256");
  std::vector<TuningRecord> pool;
  for (const TuningRecord& r : LoadRecords(ctx.target))
    if (r.workload.key == ctx.task.WorkloadKey()) pool.push_back(r);
  std::vector<double> fastest;
  for (const TuningRecord& r : pool) fastest.push_back(RecordThroughput(r));
  std::sort(fastest.begin(), fastest.end(), std::greater<>());
  SimulateOptions fifth;
  fifth.bar_rank = 5;
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    PolicyContext seeded = ctx;
    seeded.seed = seed;
    absl::StatusOr<SimulatedSearch> best = SimulateTrialsTo95(seeded, ModelPolicyOptions{}, pool, {});
    absl::StatusOr<SimulatedSearch> lower = SimulateTrialsTo95(seeded, ModelPolicyOptions{}, pool, {}, fifth);
    ASSERT_TRUE(best.ok() && lower.ok());
    EXPECT_EQ(best->bar, fastest[0]);
    EXPECT_EQ(best->best, fastest[0]);
    EXPECT_EQ(lower->bar, fastest[4]);
    EXPECT_EQ(lower->best, fastest[0]);
    EXPECT_GE(lower->within, 5);
    EXPECT_GE(lower->within, best->within);
    EXPECT_LE(lower->random_expected, best->random_expected);
    EXPECT_LE(lower->trials, best->trials) << "seed " << seed;
  }
  SimulateOptions bad;
  bad.bar_rank = 0;
  EXPECT_EQ(SimulateTrialsTo95(ctx, ModelPolicyOptions{}, pool, {}, bad).status().code(),
            absl::StatusCode::kInvalidArgument);
  bad.bar_rank = static_cast<int>(pool.size()) + 1;  // more than the distinct configs
  EXPECT_EQ(SimulateTrialsTo95(ctx, ModelPolicyOptions{}, pool, {}, bad).status().code(),
            absl::StatusCode::kInvalidArgument);
}

class MemoryModelStore : public ModelStore {
 public:
  absl::StatusOr<std::optional<std::string>> Load(const std::string& key) override {
    auto it = blobs.find(key);
    if (it == blobs.end()) return std::optional<std::string>();
    return std::optional<std::string>(it->second);
  }
  absl::Status Save(const std::string& key, const std::string& bytes) override {
    blobs[key] = bytes;
    return absl::OkStatus();
  }
  std::map<std::string, std::string> blobs;
};

// The median over seeds 1-5 of SimulateTrialsTo95 (tuner/model_eval.h: the search on
// the pool, every trial a lookup) on `pool` (records of ctx's task), the model started
// from `others` (records of other shapes; none: cold), must be at most 1/`fraction`
// of what random search expects (0: not asserted): over a pool of N configs of which K
// are within 95% of the best, (N + 1) / (K + 1) trials on average.
void ExpectFractionOfRandomsTrials(const char* name, const PolicyContext& ctx,
                                   const std::vector<TuningRecord>& pool,
                                   const std::vector<TuningRecord>& others, int fraction) {
  std::vector<int> trials;
  int within = 0;
  double random_expected = 0;
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    PolicyContext seeded = ctx;
    seeded.seed = seed;
    absl::StatusOr<SimulatedSearch> s = SimulateTrialsTo95(seeded, ModelPolicyOptions{}, pool, others);
    ASSERT_TRUE(s.ok()) << s.status();
    ASSERT_EQ(s->configs, static_cast<int>(pool.size())) << name << ": a config recorded twice";
    trials.push_back(s->trials);
    within = s->within;
    random_expected = s->random_expected;
  }
  std::vector<int> sorted = trials;
  std::sort(sorted.begin(), sorted.end());
  std::printf(
      "%s: trials to 95%% of the pool's best (%d of %zu configs within), seeds 1-5: "
      "%d %d %d %d %d (median %d); random expects %.1f\n",
      name, within, pool.size(), trials[0], trials[1], trials[2], trials[3], trials[4], sorted[2],
      random_expected);
  if (fraction > 0) {
    EXPECT_LE(sorted[2], random_expected / fraction) << name;
  }
}

// Splits `file`'s records into those of `a`'s task and those of `b`'s; every config
// must be one of its task's space.
std::pair<std::vector<TuningRecord>, std::vector<TuningRecord>> PoolsOf(const PolicyContext& a,
                                                                        const PolicyContext& b,
                                                                        const std::string& file) {
  std::vector<TuningRecord> first, second;
  const ConfigSpace a_space = a.tmpl->Space(a.task, a.target), b_space = b.tmpl->Space(b.task, b.target);
  for (TuningRecord& r : LoadRecords(a.target, file)) {
    const bool of_a = r.workload.key == a.task.WorkloadKey();
    EXPECT_TRUE((of_a ? a_space : b_space).Check(*Config::FromJson(r.config_json)).ok()) << r.config_json;
    (of_a ? first : second).push_back(std::move(r));
  }
  return {std::move(first), std::move(second)};
}

// `ctx` warm from the log, as a tuning job starts: a log model trained on `others`
// (the records of other shapes), kept in `store`.
PolicyContext WithLogModel(PolicyContext ctx, const std::vector<TuningRecord>& others,
                           MemoryModelStore* store) {
  LogModelOptions o;
  o.exclude_workload = ctx.task.WorkloadKey();
  LogModelInfo info;
  absl::StatusOr<std::string> bytes = TrainLogModel(*ctx.tmpl, ctx.target, others, o, &info);
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  if (bytes.ok()) store->blobs[info.key] = *bytes;
  ctx.model_store = store;
  return ctx;
}

// Two shapes' pools of `file` (`per_shape` configs each): the model's simulated trials to
// 95% of a pool's best, cold (<= 1/3 of random's), started from the other shape's
// records (<= 1/transfer_fraction) and warm from a log model of the other shape's
// records and those of `log_file` (more shapes of the op, as a team's log holds them;
// <= 1/log_fraction, the warm goal is 6; 0: printed, not asserted).
void ExpectSearchBeatsRandomOnPools(const std::string& file, size_t per_shape, const char* task_a,
                                    const char* name_a, const char* task_b, const char* name_b,
                                    int transfer_fraction, int log_fraction,
                                    const std::string& log_file = "") {
  PolicyContext a = ContextFor(task_a), b = ContextFor(task_b);
  auto [a_records, b_records] = PoolsOf(a, b, file);
  std::vector<TuningRecord> a_log = b_records, b_log = a_records;
  if (!log_file.empty()) {
    for (const TuningRecord& r : LoadRecords(a.target, log_file)) {
      a_log.push_back(r);
      b_log.push_back(r);
    }
  }
  ASSERT_EQ(a_records.size(), per_shape);
  ASSERT_EQ(b_records.size(), per_shape);
  const std::string a_cold = std::string(name_a) + " cold", b_cold = std::string(name_b) + " cold";
  const std::string a_warm = std::string(name_a) + " from " + name_b,
                    b_warm = std::string(name_b) + " from " + name_a;
  ExpectFractionOfRandomsTrials(a_cold.c_str(), a, a_records, {}, 3);
  ExpectFractionOfRandomsTrials(b_cold.c_str(), b, b_records, {}, 3);
  ExpectFractionOfRandomsTrials(a_warm.c_str(), a, a_records, b_records, transfer_fraction);
  ExpectFractionOfRandomsTrials(b_warm.c_str(), b, b_records, a_records, transfer_fraction);
  MemoryModelStore a_store, b_store;
  const std::string with = log_file.empty() ? "" : " + " + log_file;
  ExpectFractionOfRandomsTrials((a_warm + with + "'s log").c_str(), WithLogModel(a, a_log, &a_store),
                                a_records, a_log, log_fraction);
  ExpectFractionOfRandomsTrials((b_warm + with + "'s log").c_str(), WithLogModel(b, b_log, &b_store),
                                b_records, b_log, log_fraction);
}

// Held-out pairwise accuracy on the same pools (mean of 4 splits), trained on the
// shape's own configs and on them plus the other shape's: at least `min` (the issue
// asks 0.88 of the model warm from the log).
void ExpectHeldOutAccuracyOnPools(const std::string& file, const char* task_a, const char* task_b,
                                  double min) {
  PolicyContext a = ContextFor(task_a), b = ContextFor(task_b);
  auto [a_records, b_records] = PoolsOf(a, b, file);
  const double own_a = MeanAccuracy(a, a_records, {}, true),
               own_b = MeanAccuracy(b, b_records, {}, true);
  const double both_a = MeanAccuracy(a, a_records, b_records, true);
  const double both_b = MeanAccuracy(b, b_records, a_records, true);
  std::printf(
      "held-out pairwise accuracy: %s %.3f, %s %.3f; with the other shape's records %.3f, %.3f\n",
      task_a, own_a, task_b, own_b, both_a, both_b);
  EXPECT_GE(own_a, min);
  EXPECT_GE(own_b, min);
  EXPECT_GE(both_a, min);
  EXPECT_GE(both_b, min);
}

// Issue 20's trials-to-95% goals on recorded measurements:
// tuner/testdata/matmul_pool_records.jsonl holds 1,500 configs each of matmul 256^3 and
// 128x768x192, drawn uniformly (seed 1) from every config the ops suite of `bench
// search` measured on the 2-core Zen 5 VM (sessions 14-18: random and model runs, so
// the pool is denser near the top than the space, which favours random). The model
// must need a third of random's trials at most (median of 5 seeds), from scratch (the
// issue's cold goal) and started from the other shape's records (model+transfer: a
// sixth would be missed by 128x768x192, 48 vs 187.6), and a sixth warm from a log
// model of the other shape and three more (the warm goal; the log a team would
// have): tuner/testdata/matmul_log_pool_records.jsonl, 500 configs each of matmul
// 64x1024x256, 256x512x128 and 192x192x384 drawn by `scripts/pool-records --count 500
// --seed 1` from `bench search --suite matmul`'s runs on the Xeon VM (session 26,
// /tmp/mm5.db; labels are normalised per shape, so the other machine's figures teach
// the ranking, not the speed).
// Figures at the time of writing: cold 33 and 54 trials, from the other shape's records
// 14 and 48, from a log model of it alone 12 and 22, of it and the three others 18
// and 7 (random expects 136.5 and 187.6; the warm goal allows 22.75 and 31.3).
TEST(ModelEvalTest, SimulatedSearchOnRecordedMeasurementsBeatsRandomWidely) {
  ExpectSearchBeatsRandomOnPools("matmul_pool_records.jsonl", 1500, "matmul M=256 N=256 K=256",
                                 "256^3", "matmul M=128 N=768 K=192", "128x768x192", 3, 6,
                                 "matmul_log_pool_records.jsonl");
}

// The same pools for the other cases, measured on the 2-core Xeon VM of
// sessions 19-22: 1,000 configs of each shape drawn uniformly (seed 1) from session
// 19's ops-suite runs (random and model runs; `/tmp/ops_intel.db`), labels that
// machine's (11-23% apart between two measurements of a config, so a pool's best is
// partly a lucky draw). tuner/testdata/conv2d_pool_records.jsonl: ResNet-18's conv
// 128->128 3x3 @28^2 and 256->256 3x3 @14^2, whose space holds three algorithms
// (direct, Winograd F(2,3), F(4,3)), less the configs with vec_lanes 1, which the space
// no longer has; 1 and 2 configs within 95% of the best. Figures at the time of
// writing: cold 76 and 30 trials (random expects 500.5 and 333.7), from the other
// shape's records 9 and 18, from a log model of it 1 and 15 and of it and the two
// strided layers below 9 and 26 (asserted: the latter, the log a team would have);
// accuracy 0.913 and 0.918, with the other shape 0.921 and 0.921. Asserted there: the
// issue's goals (warm 1/6, accuracy 0.88).
// tuner/testdata/dense_pool_records.jsonl: BERT-base's dense 128x768x768 and
// 128x3072x768 (bias, relu); 13 and 1 configs within 95% of the best (128x3072x768's
// next is at 94.7%: the bar splits this VM's noise). Figures at the time of writing:
// cold 19 and 51 trials (random expects 71.5 and 500.5), from the other shape's records
// 15 and 126, from its log model 1 and 153: the warm goal (1/6: 11.9 and 83.4) is met
// by 128x768x768 only; accuracy 0.891 and 0.878, with the other shape 0.894 and 0.884.
// Asserted there: what holds with a margin (transfer 1/3, the cold margin; accuracy
// 0.85; the log model's runs printed only), the misses are in docs/search.md.
constexpr char kConvLarge[] = "conv2d N=1 C=128 H=28 W=28 K=128 R=3 S=3 stride=1 pad=1";
constexpr char kConvDeep[] = "conv2d N=1 C=256 H=14 W=14 K=256 R=3 S=3 stride=1 pad=1";
constexpr char kDenseSquare[] = "dense M=128 N=768 K=768 bias=1 relu=0";
constexpr char kDenseWide[] = "dense M=128 N=3072 K=768 bias=1 relu=1";

TEST(ModelEvalTest, SimulatedSearchOnRecordedConvolutionsBeatsRandomWidely) {
  ExpectSearchBeatsRandomOnPools("conv2d_pool_records.jsonl", 1000, kConvLarge, "128@28^2", kConvDeep,
                                 "256@14^2", 6, 6, "conv2d_strided_pool_records.jsonl");
}

TEST(ModelEvalTest, RanksHeldOutRecordedConvolutions) {
  ExpectHeldOutAccuracyOnPools("conv2d_pool_records.jsonl", kConvLarge, kConvDeep, 0.88);
}

TEST(ModelEvalTest, SimulatedSearchOnRecordedDenseLayersBeatsRandomWidely) {
  ExpectSearchBeatsRandomOnPools("dense_pool_records.jsonl", 1000, kDenseSquare, "128x768x768",
                                 kDenseWide, "128x3072x768", 3, 0);
}

TEST(ModelEvalTest, RanksHeldOutRecordedDenseLayers) {
  ExpectHeldOutAccuracyOnPools("dense_pool_records.jsonl", kDenseSquare, kDenseWide, 0.85);
}

// tuner/testdata/conv2d_strided_pool_records.jsonl: ResNet-18's 3x3 stride-2 layers
// 64->128 @56^2 and 128->256 @28^2 (direct convolution only), 1,000 configs each drawn
// by `scripts/pool-records --seed 1` from `tuneforge bench search --suite strided`'s
// runs on the Xeon VM (session 23; /tmp/strided.db); 6 and 16 configs within 95% of
// the best. These are the layers whose cold search missed the goal on the Zen 5 VM
// (session 18). Figures at the time of writing: cold 15 and 11 trials (random expects
// 143.0 and 58.9), from the other shape's records 26 and 9, warm from a log model of
// the other shape alone 34 and 9, of it and the two stride-1 pools above 5 and 1;
// accuracy 0.896 and 0.920, with the other shape 0.900 and 0.922. A log model of one
// other shape ranked 64->128's best 69th: it favoured a 1x14 register tile (the full
// output row of 128->256, half of 64->128's), while both layers' best is 2 vectors x 7.
constexpr char kConvStrided56[] = "conv2d N=1 C=64 H=56 W=56 K=128 R=3 S=3 stride=2 pad=1";
constexpr char kConvStrided28[] = "conv2d N=1 C=128 H=28 W=28 K=256 R=3 S=3 stride=2 pad=1";

TEST(ModelEvalTest, SimulatedSearchOnRecordedStridedConvolutionsBeatsRandomWidely) {
  ExpectSearchBeatsRandomOnPools("conv2d_strided_pool_records.jsonl", 1000, kConvStrided56,
                                 "64->128 s2", kConvStrided28, "128->256 s2", 3, 6,
                                 "conv2d_pool_records.jsonl");
}

TEST(ModelEvalTest, RanksHeldOutRecordedStridedConvolutions) {
  ExpectHeldOutAccuracyOnPools("conv2d_strided_pool_records.jsonl", kConvStrided56, kConvStrided28, 0.88);
}

// No silent drop: the records a log model leaves out are counted by reason in its
// info (kept in the db beside the model; `db train-model` prints them).
TEST(LogModelTest, CountsTheRecordsItLeavesOut) {
  PolicyContext mm = ContextFor("matmul M=256 N=256 K=256");
  std::vector<TuningRecord> records = LoadRecords(mm.target);
  ASSERT_GE(records.size(), 3u);
  records[0].config_json = "{not json";
  TuningRecord lone = records[1];  // the same task under a workload of its own
  lone.workload.key = "lone-workload";
  records.push_back(lone);
  records[2].workload.task_text = "matmul M=8 N=8";
  records[2].workload.key = "broken-workload";
  LogModelInfo info;
  ASSERT_TRUE(TrainLogModel(*mm.tmpl, mm.target, records, LogModelOptions{}, &info).ok());
  EXPECT_EQ(info.dropped["config does not parse"], 1);
  EXPECT_EQ(info.dropped["task does not parse"], 1);
  EXPECT_GE(info.dropped["alone in its workload"], 1);
  // Every record is either trained on or counted.
  EXPECT_EQ(info.records + info.dropped_total(), static_cast<int64_t>(records.size()));
  absl::StatusOr<LogModelInfo> back = LogModelInfo::FromJson(info.ToJson());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->dropped, info.dropped);
}

// The log model's trees are 8 deep where the features hold the knobs (conv2d: the
// algorithm knob and Winograd's), 6 where they leave them out (the GEMM spaces), as
// measured live (docs/search.md "Log models: deeper trees"); the stored info says
// which, and an info written before it reads as 0.
TEST(LogModelTest, TreesAreDeeperWhereTheFeaturesHoldTheKnobs) {
  PolicyContext mm = ContextFor("matmul M=256 N=256 K=256");
  PolicyContext a = ContextFor(kConvStrided56), b = ContextFor(kConvStrided28);
  LogModelOptions o;
  EXPECT_EQ(LogModelDepth(mm.tmpl->Space(mm.task, mm.target), o), 6);
  EXPECT_EQ(LogModelDepth(a.tmpl->Space(a.task, a.target), o), 8);
  LogModelOptions shallow;
  shallow.knob_features_max_depth = 5;
  EXPECT_EQ(LogModelDepth(a.tmpl->Space(a.task, a.target), shallow), 5);

  LogModelInfo gemm, conv;
  ASSERT_TRUE(TrainLogModel(*mm.tmpl, mm.target, LoadRecords(mm.target), o, &gemm).ok());
  auto [a_records, b_records] = PoolsOf(a, b, "conv2d_strided_pool_records.jsonl");
  a_records.insert(a_records.end(), b_records.begin(), b_records.end());
  ASSERT_TRUE(TrainLogModel(*a.tmpl, a.target, a_records, o, &conv).ok());
  EXPECT_EQ(gemm.max_depth, 6);
  EXPECT_EQ(conv.max_depth, 8);

  absl::StatusOr<LogModelInfo> back = LogModelInfo::FromJson(conv.ToJson());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->max_depth, 8);
  nlohmann::json old = nlohmann::json::parse(conv.ToJson());
  old.erase("max_depth");
  back = LogModelInfo::FromJson(old.dump());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->max_depth, 0);
  EXPECT_EQ(back->records, conv.records);
}

// The warm start of issue 20: a model pre-trained on the log (here: 512^3 only) ranks
// a shape the log does not hold, alone and fine-tuned with the shape's own records.
TEST(LogModelTest, RanksANewShapeFromTheLogAloneAndBlended) {
  PolicyContext small = ContextFor("matmul M=256 N=256 K=256");
  std::vector<TuningRecord> all = LoadRecords(small.target), small_records;
  for (const TuningRecord& r : all)
    if (r.workload.key == small.task.WorkloadKey()) small_records.push_back(r);

  LogModelOptions o;
  o.exclude_workload = small.task.WorkloadKey();
  LogModelInfo info;
  absl::StatusOr<std::string> bytes = TrainLogModel(*small.tmpl, small.target, all, o, &info);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(info.tasks, 1);
  EXPECT_EQ(info.records, static_cast<int64_t>(all.size() - small_records.size()));
  EXPECT_EQ(info.key, LogModelKey(small.tmpl->name(), small.tmpl->version(), small.target.Key()));

  MemoryModelStore store;
  store.blobs[info.key] = *bytes;
  PolicyContext warm = small;
  warm.model_store = &store;
  double log_only = MeanAccuracy(warm, small_records, {}, false);
  double tuned = MeanAccuracy(warm, small_records, {}, true);
  double own = MeanAccuracy(small, small_records, {}, true);
  std::printf("held-out pairwise accuracy on 256^3: log model of 512^3 alone %.3f, fine-tuned on "
              "75%% of 256^3 %.3f, 256^3 alone %.3f\n",
              log_only, tuned, own);
  EXPECT_GT(log_only, 0.78);
  EXPECT_GT(tuned, 0.78);

  // Nothing left to train on: a clear error, no model.
  o.exclude_workload.clear();
  std::vector<TuningRecord> few(small_records.begin(), small_records.begin() + 5);
  absl::StatusOr<std::string> none = TrainLogModel(*small.tmpl, small.target, few, o, nullptr);
  EXPECT_TRUE(absl::IsInvalidArgument(none.status())) << none.status();
  // Records of another target are not used for this one.
  std::vector<TuningRecord> other_target = all;
  for (TuningRecord& r : other_target) r.target.key = "another-target";
  none = TrainLogModel(*small.tmpl, small.target, other_target, o, nullptr);
  EXPECT_TRUE(absl::IsInvalidArgument(none.status())) << none.status();
}

TEST(LogModelTest, PolicyRanksTheFirstBatchWithTheLogModel) {
  PolicyContext small = ContextFor("matmul M=256 N=256 K=256");
  std::vector<TuningRecord> all = LoadRecords(small.target);
  LogModelOptions o;
  o.exclude_workload = small.task.WorkloadKey();
  LogModelInfo info;
  absl::StatusOr<std::string> bytes = TrainLogModel(*small.tmpl, small.target, all, o, &info);
  ASSERT_TRUE(bytes.ok()) << bytes.status();

  // Without a log model and without records: random proposals, a small early batch
  // (ModelPolicyOptions::early_batch); with the log model below, full batches.
  ModelPolicy cold(small, ModelPolicyOptions{});
  EXPECT_FALSE(cold.cost_model().has_log_model());
  EXPECT_EQ(cold.Propose(8).size(), 2u);
  EXPECT_EQ(cold.last_proposer(), "model:random");

  MemoryModelStore store;
  store.blobs[info.key] = *bytes;
  PolicyContext warm_ctx = small;
  warm_ctx.model_store = &store;
  ModelPolicy warm(warm_ctx, ModelPolicyOptions{});
  ASSERT_TRUE(warm.cost_model().has_log_model());
  // The fine-tuned model learns its corrections from the other shapes' records too
  // (CostModelOptions::transfer_with_log_model) ...
  EXPECT_TRUE(warm.WantsOtherTasks());
  warm.ObserveOtherTasks(all);
  EXPECT_EQ(warm.cost_model().rows(), 321);  // matmul 512^3's distinct configs; 256^3's are its own
  // ... unless told to rely on the log model alone.
  ModelPolicyOptions alone_options;
  alone_options.cost_model.transfer_with_log_model = false;
  ModelPolicy alone(warm_ctx, alone_options);
  EXPECT_FALSE(alone.WantsOtherTasks());
  alone.ObserveOtherTasks(all);
  EXPECT_EQ(alone.cost_model().rows(), 0);
  EXPECT_EQ(alone.Propose(8).size(), 8u);
  EXPECT_EQ(alone.last_proposer(), "model");
  std::vector<Config> batch = warm.Propose(8);
  EXPECT_EQ(batch.size(), 8u);
  EXPECT_EQ(warm.last_proposer(), "model");
  EXPECT_TRUE(warm.TakeWarnings().empty());
  // With records of its own the policy fine-tunes on top of the log model; that model
  // only corrects the log model, so it is not stored as the next job's model.
  std::vector<TuningRecord> own;
  for (const TuningRecord& r : all)
    if (r.workload.key == small.task.WorkloadKey() && own.size() < 40) own.push_back(r);
  warm.Observe(own);
  ASSERT_TRUE(warm.cost_model().Update().ok());
  EXPECT_TRUE(warm.cost_model().own_model().trained());
  EXPECT_EQ(store.blobs.size(), 1u);  // the log model only
  EXPECT_EQ(warm.Propose(8).size(), 8u);
  EXPECT_EQ(warm.last_proposer(), "model");
  // A log model of another target is not loaded.
  PolicyContext other = warm_ctx;
  other.target.device_key = "another-device";
  ModelPolicy elsewhere(other, ModelPolicyOptions{});
  EXPECT_FALSE(elsewhere.cost_model().has_log_model());
}

TEST(LogModelTest, RefreshTrainsFromTheDbAndOnlyWhenStale) {
  std::filesystem::path dir = std::filesystem::temp_directory_path() /
                              ("log_model_test_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  DatabaseOptions dbo;
  dbo.path = (dir / "log.db").string();
  std::unique_ptr<Database> db = *Database::Open(dbo);
  PolicyContext small = ContextFor("matmul M=256 N=256 K=256");
  std::vector<TuningRecord> all = LoadRecords(small.target);
  int64_t clock = 1;
  for (TuningRecord& r : all) {
    r.result.start_unix_us = clock++;
    r.result.end_unix_us = clock++;
  }
  std::vector<TuningRecord> first(all.begin(), all.end() - 40), later(all.end() - 40, all.end());
  ASSERT_TRUE(db->Commit(first).ok());

  LogModelRefresh refresh;
  absl::StatusOr<LogModelRefreshResult> r = RefreshLogModels(db.get(), refresh);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->trained.size(), 1u);
  EXPECT_EQ(r->trained[0].op, "matmul");
  EXPECT_EQ(r->trained[0].tasks, 2);
  EXPECT_EQ(r->trained[0].log_records, static_cast<int64_t>(first.size()));
  const std::string key = r->trained[0].key;
  absl::StatusOr<std::optional<LogModelInfo>> stored = StoredLogModelInfo(db.get(), key);
  ASSERT_TRUE(stored.ok() && stored->has_value());
  EXPECT_EQ((*stored)->records, r->trained[0].records);

  // Up to date: 40 new records are below the refresh bound.
  refresh.only_stale = true;
  ASSERT_TRUE(db->Commit(later).ok());
  r = RefreshLogModels(db.get(), refresh);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->trained.empty());
  ASSERT_EQ(r->skipped.size(), 1u);
  EXPECT_NE(r->skipped[0].find("up to date (40 new records"), std::string::npos) << r->skipped[0];
  refresh.min_new_records = 40;
  refresh.min_new_fraction = 0.05;
  r = RefreshLogModels(db.get(), refresh);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->trained.size(), 1u);
  EXPECT_EQ(r->trained[0].log_records, static_cast<int64_t>(all.size()));
  // Another op's filter trains nothing.
  refresh.op = "conv2d";
  r = RefreshLogModels(db.get(), refresh);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->trained.empty() && r->skipped.empty());

  // The policy of a job on this db starts from it.
  DatabaseModelStore store(db.get());
  PolicyContext ctx = small;
  ctx.model_store = &store;
  EXPECT_TRUE(ModelPolicy(ctx, ModelPolicyOptions{}).cost_model().has_log_model());
  db.reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tuneforge

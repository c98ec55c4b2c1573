// The cost model on real measurements: tuner/testdata/matmul_records.jsonl holds one
// tuning run each of matmul 512^3 (327 configs) and 256^3 (247 configs), random
// search, measured on the 2-core znver4 development machine (the best time of each
// config; null = failed). Training and the held-out split are deterministic, so these
// are assertions on fixed numbers, not on timing or luck.
#include "tuner/model_eval.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include "nlohmann/json.hpp"

namespace tuneforge {
namespace {

Target RecordedTarget() {  // what the features see of the recording machine
  Target t;
  t.triple = "x86_64-pc-linux-gnu";
  t.cpu = "znver4";
  t.features = "+avx,+avx2,+avx512f,+fma";
  t.num_threads = 2;
  t.device_key = "test";
  return t;
}

std::vector<TuningRecord> LoadRecords(const Target& target) {
  std::ifstream in(std::string(TF_TESTDATA_DIR) + "/matmul_records.jsonl");
  EXPECT_TRUE(in.good());
  std::vector<TuningRecord> out;
  std::string line;
  while (std::getline(in, line)) {
    nlohmann::json j = nlohmann::json::parse(line);
    TuningTask task = *ParseTask(j["task"].get<std::string>());
    TuningRecord r;
    r.workload = WorkloadInfo{task.WorkloadKey(), task.op(), task.CanonicalText(), task.ToJson(),
                              task.Flops()};
    r.target.key = target.Key();
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
  PolicyContext c{*ParseTask(task), RecordedTarget(), nullptr, 1, nullptr};
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

}  // namespace
}  // namespace tuneforge

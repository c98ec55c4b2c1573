// Tests of the tuning log's domain types and content ids.
#include "db/record.h"

#include <cmath>

#include "gtest/gtest.h"

namespace tuneforge {
namespace {

TEST(MeasureErrorKindTest, NamesRoundTrip) {
  const MeasureErrorKind kinds[] = {
      MeasureErrorKind::kNone,         MeasureErrorKind::kInvalidConfig,
      MeasureErrorKind::kBuildError,   MeasureErrorKind::kBuildTimeout,
      MeasureErrorKind::kRuntimeError, MeasureErrorKind::kWrongAnswer,
      MeasureErrorKind::kRunTimeout,   MeasureErrorKind::kAgentLost,
  };
  for (MeasureErrorKind kind : kinds) {
    std::optional<MeasureErrorKind> parsed = ParseMeasureErrorKind(MeasureErrorKindName(kind));
    ASSERT_TRUE(parsed.has_value()) << MeasureErrorKindName(kind);
    EXPECT_EQ(*parsed, kind);
  }
  // The stored names are part of the file format.
  EXPECT_STREQ(MeasureErrorKindName(MeasureErrorKind::kNone), "none");
  EXPECT_STREQ(MeasureErrorKindName(MeasureErrorKind::kWrongAnswer), "wrong_answer");
  EXPECT_STREQ(MeasureErrorKindName(MeasureErrorKind::kAgentLost), "agent_lost");
}

TEST(MeasureErrorKindTest, RejectsUnknownNames) {
  EXPECT_FALSE(ParseMeasureErrorKind("").has_value());
  EXPECT_FALSE(ParseMeasureErrorKind("None").has_value());
  EXPECT_FALSE(ParseMeasureErrorKind("timeout").has_value());
}

TEST(MeasureResultTest, MedianCost) {
  MeasureResult r;
  EXPECT_TRUE(std::isinf(r.MedianCost()));
  EXPECT_GT(r.MedianCost(), 0);
  r.costs = {3.0};
  EXPECT_DOUBLE_EQ(r.MedianCost(), 3.0);
  r.costs = {5.0, 1.0, 3.0};
  EXPECT_DOUBLE_EQ(r.MedianCost(), 3.0);
  r.costs = {4.0, 1.0, 2.0, 100.0};  // even count: mean of the middle two
  EXPECT_DOUBLE_EQ(r.MedianCost(), 3.0);
}

// Content ids are stored in every database and travel in every export: the function
// must never change. The value was computed by the first implementation.
TEST(ContentIdTest, IsStable) {
  TuningRecord r;
  r.workload.key = "matmul-0123abcd";
  r.target.key = "x86_64-pc-linux-gnu/znver4/t8/epyc/f0";
  r.template_name = "matmul_cpu";
  r.template_version = 3;
  r.config_json = R"({"tile_i":32,"tile_j":64})";
  r.result.environment_json = R"({"cpu":"AMD EPYC"})";
  r.result.start_unix_us = 1700000000123456;
  r.result.end_unix_us = 1700000000223456;
  r.result.agent_id = "agent-1";
  r.result.costs = {1.25e-3, 0.1, 3.0000000000000004, 0.0, 4.9e-324};
  EXPECT_EQ(ContentId(r), "9139b51a27d3f236a9f0fe744f9461c1");
  r.result.costs.clear();
  EXPECT_EQ(ContentId(r), "17a9e979aa1d981f592835080a4b5426");
}

}  // namespace
}  // namespace tuneforge

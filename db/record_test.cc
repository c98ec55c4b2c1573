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

}  // namespace
}  // namespace tuneforge

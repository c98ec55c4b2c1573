// Tests of the XGBoost wrapper: training, ranking, save/load.
#include "costmodel/xgb_model.h"

#include <gtest/gtest.h>

#include <random>
#include <utility>
#include <vector>

namespace tuneforge::costmodel {
namespace {

// y = a smooth function of x0, x1 with a noise feature x2.
void MakeData(int n, uint64_t seed, std::vector<FeatureVector>* x, std::vector<float>* y) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(0, 1);
  for (int i = 0; i < n; ++i) {
    FeatureVector f = {u(rng), u(rng), u(rng)};
    x->push_back(f);
    y->push_back(f[0] * 2 + (f[1] > 0.5f ? 1.0f : 0.0f));
  }
}

TEST(XgbModelTest, LearnsAndRanksHeldOutData) {
  for (const char* objective : {"rank:pairwise", "reg:squarederror"}) {
    std::vector<FeatureVector> x, hx;
    std::vector<float> y, hy;
    MakeData(400, 1, &x, &y);
    MakeData(200, 2, &hx, &hy);
    XgbParams p;
    p.objective = objective;
    XgbModel m(p);
    ASSERT_TRUE(m.Train(x, y).ok());
    auto scores = m.Predict(hx);
    ASSERT_TRUE(scores.ok()) << scores.status();
    EXPECT_GT(PairwiseAccuracy(*scores, hy), 0.9) << objective;
    EXPECT_GT(RecallAtK(*scores, hy, 20), 0.6) << objective;
  }
}

TEST(XgbModelTest, SaveLoadRoundTripGivesIdenticalPredictions) {
  std::vector<FeatureVector> x;
  std::vector<float> y;
  MakeData(300, 3, &x, &y);
  XgbModel m;
  ASSERT_TRUE(m.Train(x, y, {100, 200}).ok());
  auto bytes = m.SaveToBytes();
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  XgbModel loaded;
  ASSERT_TRUE(loaded.LoadFromBytes(*bytes).ok());
  EXPECT_EQ(*m.Predict(x), *loaded.Predict(x));
}

// A moved model keeps its trees (ModelPolicy loads a stored model into a scratch one,
// checks it, then moves it in); the moved-from one is untrained, and a model assigned
// over a trained one frees the old trees and predicts with the new.
TEST(XgbModelTest, MoveHandsOverTheTrees) {
  std::vector<FeatureVector> x;
  std::vector<float> y;
  MakeData(300, 4, &x, &y);
  XgbModel a;
  ASSERT_TRUE(a.Train(x, y).ok());
  const std::vector<float> expected = *a.Predict(x);
  XgbModel b(std::move(a));
  EXPECT_FALSE(a.trained());  // NOLINT(bugprone-use-after-move): the moved-from state is the point
  EXPECT_EQ(*b.Predict(x), expected);
  XgbModel c;
  std::vector<float> flipped(y.rbegin(), y.rend());
  ASSERT_TRUE(c.Train(x, flipped).ok());
  ASSERT_NE(*c.Predict(x), expected);
  c = std::move(b);
  EXPECT_EQ(*c.Predict(x), expected);
  EXPECT_EQ(c.num_features(), 3);
}

TEST(XgbModelTest, ErrorsAreStatus) {
  XgbModel m;
  EXPECT_FALSE(m.Predict({{1, 2}}).ok());
  EXPECT_FALSE(m.SaveToBytes().ok());
  EXPECT_FALSE(m.Train({}, {}).ok());
  EXPECT_FALSE(m.Train({{1}, {2}}, {1}).ok());
  EXPECT_FALSE(m.Train({{1}, {2}}, {1, 2}, {3}).ok());
  EXPECT_FALSE(m.LoadFromBytes("not a model").ok());
  EXPECT_FALSE(m.trained());
}

TEST(MetricsTest, PairwiseAndRecall) {
  EXPECT_DOUBLE_EQ(PairwiseAccuracy({1, 2, 3}, {10, 20, 30}), 1.0);
  EXPECT_DOUBLE_EQ(PairwiseAccuracy({3, 2, 1}, {10, 20, 30}), 0.0);
  EXPECT_DOUBLE_EQ(RecallAtK({1, 2, 3, 4}, {4, 3, 2, 1}, 2), 0.0);
  EXPECT_DOUBLE_EQ(RecallAtK({1, 2, 3, 4}, {1, 2, 3, 4}, 2), 1.0);
}

}  // namespace
}  // namespace tuneforge::costmodel

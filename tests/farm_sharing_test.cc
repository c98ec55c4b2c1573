// Two jobs on one agent: the fair share makes both progress together instead of one
// after the other (the exact alternation and the priority weights are unit-tested on
// the dispatch order in server_test). Real processes on loopback.
#include <algorithm>

#include "nlohmann/json.hpp"
#include "tests/farm_fixture.h"

namespace tuneforge {
namespace {

using testing::FarmFixture;

TEST_F(FarmFixture, TwoJobsOnOneAgentBothProgressAndBothComplete) {
  ASSERT_FALSE(StartServer({"--heartbeat-ms", "300"}).empty());
  StartAgent("s");
  ASSERT_TRUE(WaitForIdleAgents(1)) << server_->Stderr();
  const std::string task_a = "matmul M=24 N=20 K=16", task_b = "matmul M=20 N=24 K=16";
  auto args = [](const std::string& task) {
    return std::vector<std::string>{"--device-key", "s",      "--task", task,   "--trials",
                                    "12",           "--batch", "4",     "--policy", "random",
                                    "--json"};
  };
  auto a = StartTune(args(task_a), "a");
  auto b = StartTune(args(task_b), "b");
  ASSERT_EQ(a->Wait(std::chrono::seconds(300)), 0) << a->Stderr() << server_->Stderr();
  ASSERT_EQ(b->Wait(std::chrono::seconds(300)), 0) << b->Stderr() << server_->Stderr();
  EXPECT_EQ(nlohmann::json::parse(a->Stdout())["trials"], 12);
  EXPECT_EQ(nlohmann::json::parse(b->Stdout())["trials"], 12);
  ExpectEveryTrialRecordedOnce(task_a, 12);
  ExpectEveryTrialRecordedOnce(task_b, 12);

  // Measured interleaved: each job has measurements that started while the other was
  // between its first and its last.
  std::vector<TuningRecord> ra = Records(task_a), rb = Records(task_b);
  auto span = [](const std::vector<TuningRecord>& rs) {
    auto [lo, hi] = std::minmax_element(rs.begin(), rs.end(), [](const auto& x, const auto& y) {
      return x.result.start_unix_us < y.result.start_unix_us;
    });
    return std::make_pair(lo->result.start_unix_us, hi->result.start_unix_us);
  };
  auto inside = [](const std::vector<TuningRecord>& rs, std::pair<int64_t, int64_t> s) {
    return std::count_if(rs.begin(), rs.end(), [&](const TuningRecord& r) {
      return r.result.start_unix_us > s.first && r.result.start_unix_us < s.second;
    });
  };
  EXPECT_GT(inside(rb, span(ra)), 0);
  EXPECT_GT(inside(ra, span(rb)), 0);
}

}  // namespace
}  // namespace tuneforge

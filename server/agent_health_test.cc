// AgentHealth on a real registry (fake clock) and a real golden-kernel build: the
// tests play the agents, answering the golden request by hand.
#include "server/agent_health.h"

#include <gtest/gtest.h>

#include "compiler/codegen/build.h"

namespace tuneforge {
namespace {

class AgentHealthTest : public ::testing::Test {
 protected:
  AgentHealthTest() : builder_(1) {
    DispatchOptions o;
    o.reap_interval_ms = 0;
    o.clock_ms = [] { return int64_t{1000}; };
    registry_ = std::make_unique<AgentRegistry>(o);
    HealthOptions h;
    h.interval_s = 0;
    health_ = std::make_unique<AgentHealth>(registry_.get(), &builder_, h);
  }
  // A connected agent of key k on this machine's architecture, checked at once.
  std::string Agent() {
    v1::AgentCapabilities caps;
    caps.set_triple(DetectHostTarget("k").triple);
    std::string id = registry_->Register("k", caps, 1, /*checking=*/true);
    EXPECT_TRUE(registry_->Connect(id));
    health_->CheckAgent(id);
    return id;
  }
  // Answers the golden request sent to `agent` with `seconds` (error: wrong answer).
  void Answer(const std::string& agent, double seconds, bool wrong = false) {
    v1::MeasureRequest golden;
    ASSERT_TRUE(registry_->NextRequest(agent, &golden, 0)) << "no golden request for " << agent;
    EXPECT_EQ(golden.task(), "matmul M=64 N=64 K=64 dtype=float32");
    EXPECT_FALSE(golden.artifact().empty());
    v1::MeasureResult r;
    r.set_request_id(golden.request_id());
    if (wrong) {
      r.set_error(v1::WRONG_ANSWER);
      r.set_error_message("output differs");
    } else {
      r.set_error(v1::NONE);
      for (double f : {1.1, 1.0, 1.2}) r.add_costs(seconds * f);  // best of 3 = seconds
    }
    registry_->Complete(agent, r);
  }
  std::string State(const std::string& agent) { return registry_->Find(agent)->State(); }
  bool HasRequest(const std::string& agent) {
    v1::MeasureRequest r;
    return registry_->NextRequest(agent, &r, 0);
  }

  Builder builder_;
  std::unique_ptr<AgentRegistry> registry_;
  std::unique_ptr<AgentHealth> health_;
};

TEST_F(AgentHealthTest, AgentWorksOnlyAfterPassingTheGoldenKernel) {
  std::string a = Agent();
  EXPECT_EQ(State(a), "checking");
  EXPECT_EQ(registry_->ConnectedAgents("k"), 0);  // no job work yet
  Answer(a, 0.001);
  EXPECT_EQ(State(a), "idle");
  EXPECT_DOUBLE_EQ(registry_->Find(a)->golden_seconds, 0.001);
  EXPECT_EQ(registry_->ConnectedAgents("k"), 1);
}

TEST_F(AgentHealthTest, WrongGoldenAnswerQuarantines) {
  std::string a = Agent();
  Answer(a, 0, /*wrong=*/true);
  EXPECT_EQ(State(a), "quarantined");
  EXPECT_NE(registry_->Find(a)->state_reason.find("golden kernel: WRONG_ANSWER"), std::string::npos)
      << registry_->Find(a)->state_reason;
}

TEST_F(AgentHealthTest, AgentSlowerThanThreeTimesItsPeersTwiceIsQuarantined) {
  std::string slow = Agent();
  Answer(slow, 0.010);  // no peer yet: passes on correctness
  EXPECT_EQ(State(slow), "idle");
  std::string fast1 = Agent(), fast2 = Agent();
  Answer(fast1, 0.002);  // slow is 5x fast1: first strike, its golden kernel re-runs
  EXPECT_EQ(State(slow), "idle");
  Answer(fast2, 0.0025);
  Answer(slow, 0.0031);  // re-run within 3x of the median (2.25 ms): strikes cleared
  EXPECT_EQ(State(slow), "idle");
  EXPECT_FALSE(HasRequest(slow));

  health_->CheckAgent(slow);  // a periodic check
  Answer(slow, 0.009);        // 4x: strike one, re-run
  EXPECT_EQ(State(slow), "idle");
  Answer(slow, 0.009);        // strike two
  EXPECT_EQ(State(slow), "quarantined");
  EXPECT_NE(registry_->Find(slow)->state_reason.find("median 2.250 ms of 2 peer(s)"),
            std::string::npos)
      << registry_->Find(slow)->state_reason;
  EXPECT_EQ(State(fast1), "idle");
  EXPECT_EQ(State(fast2), "idle");
}

// A golden result faster than its kernel's peak allows is a lie: the liar is
// quarantined, its figure never becomes the median that honest peers are judged by.
TEST_F(AgentHealthTest, ImpossiblyFastGoldenResultQuarantinesTheLiarNotItsPeers) {
  std::string honest = Agent();
  Answer(honest, 0.002);
  std::string liar = Agent();
  Answer(liar, 1e-9);  // 64^3 * 2 flops in 1 ns: 524 TFLOP/s on one baseline core
  EXPECT_EQ(State(liar), "quarantined");
  EXPECT_NE(registry_->Find(liar)->state_reason.find("faster than the target's plausible peak"),
            std::string::npos)
      << registry_->Find(liar)->state_reason;
  EXPECT_DOUBLE_EQ(registry_->Find(liar)->golden_seconds, 0);
  std::string second = Agent();
  Answer(second, 0.0021);
  health_->CheckAgent(honest);
  Answer(honest, 0.002);
  EXPECT_EQ(State(honest), "idle");
  EXPECT_EQ(State(second), "idle");
}

TEST(HealthOptionsTest, OutOfRangeValuesAreRejected) {
  HealthOptions o;
  EXPECT_TRUE(o.Validate().ok());
  o.interval_s = -1;
  EXPECT_FALSE(o.Validate().ok());
  o = HealthOptions();
  o.slow_factor = 1.0;
  EXPECT_FALSE(o.Validate().ok());
}

}  // namespace
}  // namespace tuneforge

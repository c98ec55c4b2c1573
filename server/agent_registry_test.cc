// AgentRegistry with a fake clock: leases, heartbeats, re-dispatch, hand-back,
// quarantine and the fair share, without gRPC or sleeping.
#include "server/agent_registry.h"
#include "server/agent_runner.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <optional>
#include <thread>

namespace tuneforge {
namespace {

v1::MeasureRequest Request(const std::string& id, int timeout_ms = 1000) {
  v1::MeasureRequest r;
  r.set_request_id(id);
  r.mutable_options()->set_timeout_ms(timeout_ms);
  return r;
}

v1::MeasureResult Result(const std::string& id) {
  v1::MeasureResult r;
  r.set_request_id(id);
  r.set_error(v1::NONE);
  r.add_costs(0.001);
  return r;
}

// A registry on a clock the test moves: heartbeat 100 ms, lost after 3 missed
// (300 ms), grace 500 ms; no reaper thread.
class RegistryTest : public ::testing::Test {
 protected:
  DispatchOptions Options(int max_redispatch = 2) {
    DispatchOptions o;
    o.max_redispatch = max_redispatch;
    o.heartbeat_interval_ms = 100;
    o.missed_heartbeats = 3;
    o.lease_grace_ms = 500;
    o.reap_interval_ms = 0;
    o.clock_ms = [this] { return now_; };
    return o;
  }
  std::string Agent(AgentRegistry& reg, const std::string& key = "k", int workers = 1) {
    std::string id = reg.Register(key, {}, workers);
    EXPECT_TRUE(reg.Connect(id));
    return id;
  }
  // The request leased to `agent` now, or "" when there is none for it.
  std::string Take(AgentRegistry& reg, const std::string& agent) {
    v1::MeasureRequest r;
    return reg.NextRequest(agent, &r, 0) ? r.request_id() : "";
  }
  AgentRegistry::ResultCallback Collect() {
    return [this](const v1::MeasureResult& r) { results_[r.request_id()].push_back(r); };
  }
  std::string State(AgentRegistry& reg, const std::string& agent) {
    for (const AgentInfo& a : reg.Agents())
      if (a.id == agent) return a.State();
    return "?";
  }

  int64_t now_ = 1000;
  std::map<std::string, std::vector<v1::MeasureResult>> results_;
};

TEST_F(RegistryTest, DispatchNeedsAUsableAgentOfTheKey) {
  AgentRegistry reg(Options());
  EXPECT_FALSE(reg.Dispatch("k", Request("r1"), Collect()));
  Agent(reg, "other");
  EXPECT_FALSE(reg.Dispatch("k", Request("r1"), Collect()));
  EXPECT_FALSE(reg.Connect("agent-unknown"));
  std::string a = Agent(reg);
  reg.Quarantine(a, "test");
  EXPECT_FALSE(reg.Dispatch("k", Request("r1"), Collect()));
}

TEST_F(RegistryTest, ResultCompletesOnceAndLateOrDuplicateResultsAreDropped) {
  AgentRegistry reg(Options());
  std::string a = Agent(reg);
  ASSERT_TRUE(reg.Dispatch("k", Request("r1"), Collect()));
  EXPECT_EQ(State(reg, a), "idle");  // queued, not yet leased
  EXPECT_EQ(Take(reg, a), "r1");
  EXPECT_EQ(State(reg, a), "busy");
  reg.Complete(a, Result("r1"));
  reg.Complete(a, Result("r1"));  // duplicate
  reg.Complete(a, Result("r9"));  // never dispatched
  ASSERT_EQ(results_["r1"].size(), 1u);
  EXPECT_EQ(results_["r1"][0].error(), v1::NONE);
  EXPECT_EQ(results_.size(), 1u);
  EXPECT_EQ(reg.Stats().dropped_results, 2);
}

// Results are validated at the server: zero, negative, NaN, infinite, missing or
// faster-than-peak costs become a runtime_error of that request (counted against the
// agent), never a record of a speed.
TEST_F(RegistryTest, ImplausibleResultsAreRejectedAndCountAgainstTheAgent) {
  AgentRegistry reg(Options());
  std::string a = Agent(reg);
  auto bad = [](const std::string& id, std::vector<double> costs) {
    v1::MeasureResult r;
    r.set_request_id(id);
    r.set_error(v1::NONE);
    for (double c : costs) r.add_costs(c);
    return r;
  };
  const std::vector<std::pair<std::string, v1::MeasureResult>> cases = {
      {"zero", bad("zero", {0.0})},
      {"negative", bad("negative", {0.001, -1.0})},
      {"nan", bad("nan", {std::nan("")})},
      {"inf", bad("inf", {INFINITY})},
      {"none", bad("none", {})},
      {"too-fast", bad("too-fast", {1e-9})},  // below the 1e-6 s bound given below
      {"fine", bad("fine", {2e-6, 3e-6})},
  };
  for (const auto& [id, result] : cases) {
    ASSERT_TRUE(reg.Dispatch("k", Request(id), Collect(), "job", 1, /*min_plausible_seconds=*/1e-6));
    ASSERT_EQ(Take(reg, a), id);
    reg.Complete(a, result);
    ASSERT_EQ(results_[id].size(), 1u) << id;
    const v1::MeasureResult& got = results_[id][0];
    if (id == "fine") {
      EXPECT_EQ(got.error(), v1::NONE);
      EXPECT_EQ(got.costs_size(), 2);
    } else {
      EXPECT_EQ(got.error(), v1::RUNTIME_ERROR) << id;
      EXPECT_EQ(got.costs_size(), 0) << id;
      EXPECT_NE(got.error_message().find("result rejected by the server"), std::string::npos)
          << got.error_message();
    }
  }
  std::optional<AgentInfo> info = reg.Find(a);
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->measurements, 7);
  EXPECT_EQ(info->errors, 6);
  EXPECT_FALSE(info->quarantined);  // the job goes on; health decides separately
}

TEST_F(RegistryTest, BatchSpreadsOverFreeAgentsUpToTheirWorkers) {
  AgentRegistry reg(Options());
  std::string a = Agent(reg, "k", 1), b = Agent(reg, "k", 2);
  for (const char* id : {"r1", "r2", "r3", "r4"}) ASSERT_TRUE(reg.Dispatch("k", Request(id), Collect()));
  EXPECT_EQ(Take(reg, a), "r1");
  EXPECT_EQ(Take(reg, a), "");  // one worker: busy
  EXPECT_EQ(Take(reg, b), "r2");
  EXPECT_EQ(Take(reg, b), "r3");
  EXPECT_EQ(Take(reg, b), "");
  EXPECT_EQ(reg.Stats().queued, 1);
  EXPECT_EQ(reg.Stats().leased, 3);
  reg.Complete(a, Result("r1"));
  EXPECT_EQ(Take(reg, a), "r4");
}

TEST_F(RegistryTest, DisconnectRedispatchesToAnotherAgentAndDropsTheLateResult) {
  AgentRegistry reg(Options());
  std::string a = Agent(reg), b = Agent(reg);
  ASSERT_TRUE(reg.Dispatch("k", Request("r1"), Collect()));
  EXPECT_EQ(Take(reg, a), "r1");
  reg.Disconnect(a);
  EXPECT_EQ(State(reg, a), "lost");
  EXPECT_EQ(Take(reg, b), "r1");
  reg.Complete(a, Result("r1"));  // from the lost agent: dropped
  EXPECT_TRUE(results_.empty());
  reg.Complete(b, Result("r1"));
  ASSERT_EQ(results_["r1"].size(), 1u);
  EXPECT_EQ(results_["r1"][0].error(), v1::NONE);
  EXPECT_EQ(reg.Stats().redispatches, 1);
}

TEST_F(RegistryTest, SilentAgentLosesItsLeaseToAnotherAgent) {
  AgentRegistry reg(Options());
  std::string a = Agent(reg), b = Agent(reg);
  ASSERT_TRUE(reg.Dispatch("k", Request("r1", 60000), Collect()));
  EXPECT_EQ(Take(reg, a), "r1");
  // a hangs (SIGSTOP): no heartbeats. b keeps beating.
  for (int i = 0; i < 4; ++i) {
    now_ += 100;
    reg.Heartbeat(b, 0);
    reg.ReapExpiredLeases();
  }
  EXPECT_EQ(State(reg, a), "lost");
  EXPECT_EQ(Take(reg, a), "");  // no work for a silent agent
  EXPECT_EQ(Take(reg, b), "r1");
  // a wakes up and reports: too late, dropped; a is usable again.
  reg.Heartbeat(a, 0);
  reg.Complete(a, Result("r1"));
  EXPECT_TRUE(results_.empty());
  EXPECT_EQ(State(reg, a), "idle");
  reg.Complete(b, Result("r1"));
  EXPECT_EQ(results_["r1"].size(), 1u);
  for (const AgentInfo& info : reg.Agents()) EXPECT_EQ(info.lease_expiries, info.id == a ? 1 : 0);
}

TEST_F(RegistryTest, HeartbeatsRenewLeasesUntilTheHardDeadline) {
  AgentRegistry reg(Options());
  std::string a = Agent(reg), b = Agent(reg);
  ASSERT_TRUE(reg.Dispatch("k", Request("r1", 1000), Collect()));
  EXPECT_EQ(Take(reg, a), "r1");
  // Renewed: lives past 3 heartbeat intervals, up to timeout + grace = 1500 ms.
  for (int t = 100; t <= 1500; t += 100) {
    now_ += 100;
    reg.Heartbeat(a, 0, {"r1"});
    reg.Heartbeat(b, 0);
    reg.ReapExpiredLeases();
    ASSERT_EQ(Take(reg, b), "") << "expired at +" << t << " ms";
  }
  now_ += 100;
  reg.Heartbeat(a, 0, {"r1"});
  reg.Heartbeat(b, 0);
  reg.ReapExpiredLeases();
  EXPECT_EQ(Take(reg, b), "r1");  // stuck worker, live agent: the hard deadline
}

TEST_F(RegistryTest, HeartbeatRenewsOnlyTheLeasesItNames) {
  AgentRegistry reg(Options());
  std::string a = Agent(reg), b = Agent(reg);
  ASSERT_TRUE(reg.Dispatch("k", Request("r1", 60000), Collect()));
  EXPECT_EQ(Take(reg, a), "r1");
  for (int i = 0; i < 4; ++i) {
    now_ += 100;
    reg.Heartbeat(a, 0, {"something-else"});  // a does not hold r1 (lost in transit)
    reg.Heartbeat(b, 0);
    reg.ReapExpiredLeases();
  }
  EXPECT_EQ(State(reg, a), "idle");
  EXPECT_EQ(Take(reg, b), "r1");
}

TEST_F(RegistryTest, GivesUpAfterMaxRedispatchesWithAgentLost) {
  AgentRegistry reg(Options(/*max_redispatch=*/1));
  std::string a = Agent(reg), b = Agent(reg), c = Agent(reg);
  ASSERT_TRUE(reg.Dispatch("k", Request("r1"), Collect()));
  EXPECT_EQ(Take(reg, a), "r1");
  reg.Disconnect(a);
  EXPECT_EQ(Take(reg, b), "r1");  // re-dispatch 1 of 1
  reg.Disconnect(b);
  EXPECT_EQ(Take(reg, c), "");
  ASSERT_EQ(results_["r1"].size(), 1u);
  EXPECT_EQ(results_["r1"][0].error(), v1::AGENT_LOST);
  EXPECT_NE(results_["r1"][0].error_message().find("given up after 2"), std::string::npos)
      << results_["r1"][0].error_message();
}

TEST_F(RegistryTest, RequestNoOtherAgentMayTakeIsLostAtOnce) {
  AgentRegistry reg(Options());
  std::string a = Agent(reg);
  ASSERT_TRUE(reg.Dispatch("k", Request("r1", 60000), Collect()));
  EXPECT_EQ(Take(reg, a), "r1");
  for (int i = 0; i < 4; ++i) {
    now_ += 100;
    reg.Heartbeat(a, 0, {"x"});
    reg.ReapExpiredLeases();
  }
  ASSERT_EQ(results_["r1"].size(), 1u);
  EXPECT_EQ(results_["r1"][0].error(), v1::AGENT_LOST);
  EXPECT_NE(results_["r1"][0].error_message().find("no other agent"), std::string::npos);
}

TEST_F(RegistryTest, LostRequestWaitsWhenTheKeyHasNoAgentLeft) {
  AgentRegistry reg(Options());
  std::string a = Agent(reg);
  ASSERT_TRUE(reg.Dispatch("k", Request("r1"), Collect()));
  EXPECT_EQ(Take(reg, a), "r1");
  reg.Disconnect(a);
  EXPECT_TRUE(results_.empty());  // waits, like a job for a key with no agent
  std::string b = Agent(reg);     // e.g. a restarted agent, registered anew
  EXPECT_EQ(Take(reg, b), "r1");
  reg.Complete(b, Result("r1"));
  EXPECT_EQ(results_["r1"][0].error(), v1::NONE);
}

TEST_F(RegistryTest, DrainingAgentHandsBackWithoutUsingAnAttempt) {
  AgentRegistry reg(Options(/*max_redispatch=*/0));
  std::string a = Agent(reg, "k", 2), b = Agent(reg);
  ASSERT_TRUE(reg.Dispatch("k", Request("r1"), Collect()));
  ASSERT_TRUE(reg.Dispatch("k", Request("r2"), Collect()));
  ASSERT_TRUE(reg.Dispatch("k", Request("r3"), Collect()));
  EXPECT_EQ(Take(reg, a), "r1");
  EXPECT_EQ(Take(reg, a), "r2");
  reg.Drain(a, {"r2"});  // r1 runs on; r2 was not started
  EXPECT_EQ(State(reg, a), "draining");
  reg.Complete(a, Result("r1"));
  EXPECT_EQ(Take(reg, a), "");  // draining: no new work
  EXPECT_EQ(Take(reg, b), "r2");
  reg.Complete(b, Result("r2"));
  EXPECT_EQ(Take(reg, b), "r3");
  reg.Complete(b, Result("r3"));
  for (const char* id : {"r1", "r2", "r3"}) {
    ASSERT_EQ(results_[id].size(), 1u) << id;
    EXPECT_EQ(results_[id][0].error(), v1::NONE) << id;
  }
}

TEST_F(RegistryTest, QuarantinedAgentGetsOnlyItsPinnedRequests) {
  AgentRegistry reg(Options());
  std::string a = Agent(reg), b = Agent(reg);
  reg.Quarantine(a, "golden kernel: wrong answer");
  EXPECT_EQ(State(reg, a), "quarantined");
  ASSERT_TRUE(reg.Dispatch("k", Request("r1"), Collect()));
  EXPECT_EQ(Take(reg, a), "");
  ASSERT_TRUE(reg.DispatchTo(a, Request("golden"), Collect()));
  EXPECT_EQ(Take(reg, a), "golden");
  EXPECT_EQ(Take(reg, b), "r1");
  reg.Disconnect(a);  // a pinned request is never re-dispatched
  ASSERT_EQ(results_["golden"].size(), 1u);
  EXPECT_EQ(results_["golden"][0].error(), v1::AGENT_LOST);
  for (const AgentInfo& info : reg.Agents()) {
    if (info.id != a) continue;
    EXPECT_EQ(info.state_reason, "disconnected");
  }
}

TEST_F(RegistryTest, JobsOfEqualPriorityAlternateOnOneAgent) {
  AgentRegistry reg(Options());
  std::string a = Agent(reg);
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(reg.Dispatch("k", Request("A" + std::to_string(i)), Collect(), "jobA", 5));
  }
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(reg.Dispatch("k", Request("B" + std::to_string(i)), Collect(), "jobB", 5));
  }
  std::string order;
  for (int i = 0; i < 8; ++i) {
    std::string id = Take(reg, a);
    ASSERT_FALSE(id.empty());
    order += id[0];
    reg.Complete(a, Result(id));
  }
  EXPECT_EQ(order, "ABABABAB");
}

TEST_F(RegistryTest, PriorityWeightsTheShare) {
  AgentRegistry reg(Options());
  std::string a = Agent(reg);
  for (int i = 0; i < 12; ++i) {
    ASSERT_TRUE(reg.Dispatch("k", Request("H" + std::to_string(i)), Collect(), "high", 2));
    ASSERT_TRUE(reg.Dispatch("k", Request("L" + std::to_string(i)), Collect(), "low", 1));
  }
  std::map<char, int> served;
  for (int i = 0; i < 12; ++i) {
    std::string id = Take(reg, a);
    ++served[id[0]];
    reg.Complete(a, Result(id));
  }
  EXPECT_EQ(served['H'], 8);
  EXPECT_EQ(served['L'], 4);
}

TEST_F(RegistryTest, AbandonFailsTheRequestAndDropsTheLateResult) {
  AgentRegistry reg(Options());
  std::string a = Agent(reg);
  ASSERT_TRUE(reg.Dispatch("k", Request("r1"), Collect()));
  EXPECT_EQ(Take(reg, a), "r1");
  reg.Abandon("r1", "cancelled");
  reg.Complete(a, Result("r1"));
  ASSERT_EQ(results_["r1"].size(), 1u);
  EXPECT_EQ(results_["r1"][0].error(), v1::AGENT_LOST);
  EXPECT_EQ(results_["r1"][0].error_message(), "cancelled");
  EXPECT_EQ(State(reg, a), "idle");
}

TEST_F(RegistryTest, ShutdownWakesWaitingAgentsAndFailsPendingRequests) {
  AgentRegistry reg(Options());
  std::string a = Agent(reg);
  ASSERT_TRUE(reg.Dispatch("k", Request("r1"), Collect(), "j", 1));
  EXPECT_EQ(Take(reg, a), "r1");
  std::thread t([&] {
    v1::MeasureRequest r;
    EXPECT_FALSE(reg.NextRequest(a, &r));
  });
  reg.Shutdown();
  t.join();
  ASSERT_EQ(results_["r1"].size(), 1u);
  EXPECT_EQ(results_["r1"][0].error(), v1::AGENT_LOST);
}

TEST(DispatchOptionsTest, OutOfRangeValuesAreRejected) {
  DispatchOptions o;
  EXPECT_TRUE(o.Validate().ok());
  o.max_redispatch = -1;
  EXPECT_NE(o.Validate().message().find("max re-dispatches"), std::string::npos);
  o = DispatchOptions();
  o.heartbeat_interval_ms = 10;
  EXPECT_FALSE(o.Validate().ok());
}

TEST(LeaseTableTest, DeadlineIsTheEarlierOfHardAndLiveness) {
  LeaseTable t(300);
  t.Grant("r", "a", 1000, 5000);
  EXPECT_EQ(t.Holder("r"), "a");
  EXPECT_TRUE(t.TakeExpired(1300).empty());
  EXPECT_EQ(t.Renew("a", {"r"}, 1200), 1);
  EXPECT_EQ(t.Renew("b", {"r"}, 1250), 0);  // not the holder
  EXPECT_TRUE(t.TakeExpired(1500).empty());
  EXPECT_EQ(t.TakeExpired(1501).size(), 1u);
  t.Grant("r", "a", 1000, 1100);
  EXPECT_EQ(t.Renew("a", {}, 1090), 1);  // empty list: all of a's leases
  EXPECT_EQ(t.TakeExpired(1101).size(), 1u);
  EXPECT_EQ(t.size(), 0u);
}

TEST(FairQueueTest, EligibilityAndFrontInsertion) {
  FairQueue q;
  q.Push("r1", "k", "j", 1);
  q.Push("r2", "k", "j", 1);
  q.Push("r0", "k", "j", 1, /*front=*/true);
  EXPECT_EQ(q.Queued("k"), (std::vector<std::string>{"r0", "r1", "r2"}));
  EXPECT_EQ(q.Pop("k", [](const std::string& id) { return id != "r0"; }), "r1");
  EXPECT_EQ(q.Pop("other", [](const std::string&) { return true; }), std::nullopt);
  EXPECT_TRUE(q.Remove("r2"));
  EXPECT_FALSE(q.Remove("r2"));
  EXPECT_EQ(q.size(), 1u);
  q.ForgetJob("j");
  EXPECT_EQ(q.size(), 0u);
}

// A cancelled job ends at once, even when its requests sit in the queue with no
// agent to take them (its agent went away after they were queued): they end as
// agent_lost "job cancelled" instead of waiting for an agent to come back.
TEST_F(RegistryTest, CancelEndsAWaitForAgentsThatLeft) {
  AgentRegistry reg(Options());
  std::string a = Agent(reg);
  std::atomic<bool> cancel{false};
  AgentRunner runner(&reg, "k", "job-1", nullptr, &cancel);
  auto artifact = std::make_shared<Artifact>();
  auto expected = std::make_shared<ExpectedOutput>();
  std::vector<MeasureInput> inputs(2);
  for (MeasureInput& in : inputs) {
    in.task_text = "matmul M=8 N=8 K=8 dtype=float32";
    in.artifact = artifact;
    in.expected = expected;
  }
  std::vector<MeasureResult> results;
  std::thread job([&] { results = runner.Measure(inputs); });
  for (int i = 0; i < 200 && Take(reg, a).empty(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  reg.Disconnect(a);  // the leased request goes back to the queue; nobody serves it
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto cancelled_at = std::chrono::steady_clock::now();
  cancel = true;
  job.join();
  EXPECT_LT(std::chrono::steady_clock::now() - cancelled_at, std::chrono::seconds(2));
  ASSERT_EQ(results.size(), 2u);
  for (const MeasureResult& r : results) {
    EXPECT_EQ(r.error, MeasureErrorKind::kAgentLost);
    EXPECT_NE(r.error_message.find("job cancelled"), std::string::npos) << r.error_message;
  }
}

// No unchecked measurement: with a peak bound, an input whose config the server
// cannot read (so it cannot bound the result's speed) is not dispatched; its result
// says why, and a readable one next to it is measured as usual.
TEST_F(RegistryTest, InputTheServerCannotBoundIsNotMeasured) {
  AgentRegistry reg(Options());
  std::string a = Agent(reg);
  std::atomic<bool> cancel{false};
  AgentRunner runner(&reg, "k", "job-1", nullptr, &cancel, 1, /*peak_gflops=*/1000);
  std::vector<MeasureInput> inputs(2);
  for (MeasureInput& in : inputs) {
    in.task_text = "matmul M=8 N=8 K=8 dtype=float32";
    in.artifact = std::make_shared<Artifact>();
    in.expected = std::make_shared<ExpectedOutput>();
  }
  inputs[0].config_json = "{not a config";
  inputs[1].config_json = "{}";
  std::vector<MeasureResult> results;
  std::thread job([&] { results = runner.Measure(inputs); });
  std::string taken;
  for (int i = 0; i < 200 && taken.empty(); ++i) {
    taken = Take(reg, a);
    if (taken.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(taken, "job-1/r2");  // the readable one; r1 was never dispatched
  cancel = true;
  job.join();
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].error, MeasureErrorKind::kInvalidConfig);
  EXPECT_NE(results[0].error_message.find("cannot bound its plausible speed"), std::string::npos)
      << results[0].error_message;
}

// int8 kernels run far above the float32 FMA peak (AMX: 32x): their results are
// bounded by kInt8PlausibleFactor times it, float32 ones by the peak itself.
TEST(PlausibleFloorTest, Int8TasksMayRunFasterThanTheFloatPeak) {
  const TuningTask f = *ParseTask("conv2d N=1 C=64 H=56 W=56 K=64 R=3 S=3 stride=1 pad=1 dtype=float32");
  const TuningTask q = *ParseTask("qconv2d N=1 C=64 H=56 W=56 K=64 R=3 S=3 stride=1 pad=1 dtype=u8s8u8");
  EXPECT_FALSE(f.IsQuantized());
  EXPECT_TRUE(q.IsQuantized());
  EXPECT_DOUBLE_EQ(PlausibleFloorSeconds(f, 2e9, 1000), 2e-3);
  EXPECT_DOUBLE_EQ(PlausibleFloorSeconds(q, 2e9, 1000), 2e-3 / Target::kInt8PlausibleFactor);
}

}  // namespace
}  // namespace tuneforge

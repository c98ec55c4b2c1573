#include "server/agent_registry.h"

#include <gtest/gtest.h>

#include <thread>

namespace tuneforge {
namespace {

v1::MeasureRequest Request(const std::string& id) {
  v1::MeasureRequest r;
  r.set_request_id(id);
  return r;
}

v1::MeasureResult Result(const std::string& id) {
  v1::MeasureResult r;
  r.set_request_id(id);
  r.set_error(v1::NONE);
  r.add_costs(0.001);
  return r;
}

TEST(AgentRegistryTest, DispatchNeedsAConnectedAgentOfTheKey) {
  AgentRegistry reg;
  EXPECT_FALSE(reg.Dispatch("k", Request("r1"), [](const v1::MeasureResult&) {}));
  std::string a = reg.Register("other", {});
  ASSERT_TRUE(reg.Connect(a));
  EXPECT_FALSE(reg.Dispatch("k", Request("r1"), [](const v1::MeasureResult&) {}));
  EXPECT_FALSE(reg.Connect("agent-unknown"));
}

TEST(AgentRegistryTest, ResultCompletesOnceAndDuplicatesAreDropped) {
  AgentRegistry reg;
  std::string a = reg.Register("k", {});
  ASSERT_TRUE(reg.Connect(a));
  int calls = 0;
  ASSERT_TRUE(reg.Dispatch("k", Request("r1"), [&](const v1::MeasureResult& r) {
    ++calls;
    EXPECT_EQ(r.error(), v1::NONE);
  }));
  v1::MeasureRequest got;
  ASSERT_TRUE(reg.NextRequest(a, &got));
  EXPECT_EQ(got.request_id(), "r1");
  reg.Complete(a, Result("r1"));
  reg.Complete(a, Result("r1"));  // duplicate
  reg.Complete(a, Result("r9"));  // never dispatched
  EXPECT_EQ(calls, 1);
}

TEST(AgentRegistryTest, SpreadsOverAgentsAndRedispatchesOnDisconnect) {
  AgentRegistry reg;
  std::string a = reg.Register("k", {}), b = reg.Register("k", {});
  ASSERT_TRUE(reg.Connect(a));
  ASSERT_TRUE(reg.Connect(b));
  std::vector<v1::MeasureResult> results;
  auto done = [&](const v1::MeasureResult& r) { results.push_back(r); };
  ASSERT_TRUE(reg.Dispatch("k", Request("r1"), done));
  ASSERT_TRUE(reg.Dispatch("k", Request("r2"), done));
  int per_agent[2] = {0, 0};
  for (const AgentInfo& info : reg.Agents()) per_agent[info.id == a ? 0 : 1] = info.in_flight;
  EXPECT_EQ(per_agent[0], 1);
  EXPECT_EQ(per_agent[1], 1);

  v1::MeasureRequest got_a;
  ASSERT_TRUE(reg.NextRequest(a, &got_a));
  reg.Disconnect(a);  // a's request moves to b
  v1::MeasureRequest got_b1, got_b2;
  ASSERT_TRUE(reg.NextRequest(b, &got_b1));
  ASSERT_TRUE(reg.NextRequest(b, &got_b2));
  reg.Complete(a, Result(got_a.request_id()));  // late result from the lost agent: dropped
  EXPECT_TRUE(results.empty());
  reg.Complete(b, Result(got_b1.request_id()));
  reg.Complete(b, Result(got_b2.request_id()));
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].error(), v1::NONE);
  EXPECT_EQ(results[1].error(), v1::NONE);
}

TEST(AgentRegistryTest, LastAgentLostGivesAgentLost) {
  AgentRegistry reg;
  std::string a = reg.Register("k", {});
  ASSERT_TRUE(reg.Connect(a));
  std::vector<v1::MeasureResult> results;
  ASSERT_TRUE(reg.Dispatch("k", Request("r1"), [&](const v1::MeasureResult& r) { results.push_back(r); }));
  reg.Disconnect(a);
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].error(), v1::AGENT_LOST);
}

TEST(AgentRegistryTest, AbandonFailsTheRequestAndDropsTheLateResult) {
  AgentRegistry reg;
  std::string a = reg.Register("k", {});
  ASSERT_TRUE(reg.Connect(a));
  std::vector<v1::MeasureResult> results;
  ASSERT_TRUE(reg.Dispatch("k", Request("r1"), [&](const v1::MeasureResult& r) { results.push_back(r); }));
  reg.Abandon("r1", "deadline");
  reg.Complete(a, Result("r1"));
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].error(), v1::AGENT_LOST);
  EXPECT_EQ(results[0].error_message(), "deadline");
}

TEST(AgentRegistryTest, ShutdownWakesWaitingAgents) {
  AgentRegistry reg;
  std::string a = reg.Register("k", {});
  ASSERT_TRUE(reg.Connect(a));
  std::thread t([&] {
    v1::MeasureRequest r;
    EXPECT_FALSE(reg.NextRequest(a, &r));
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  reg.Shutdown();
  t.join();
}

}  // namespace
}  // namespace tuneforge

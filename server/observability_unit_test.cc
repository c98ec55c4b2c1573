// Observability without the network: /healthz answers and the dispatch hooks.
#include "server/observability.h"

#include <gtest/gtest.h>

#include "compiler/support/files.h"

namespace tuneforge {
namespace {

TEST(ObservabilityTest, HealthSaysWhyItIsNotServing) {
  Observability o;
  http::Response r = o.Health();
  EXPECT_EQ(r.status, 503);
  EXPECT_NE(r.body.find("not serving"), std::string::npos) << r.body;

  absl::StatusOr<TempDir> dir = TempDir::Create("tf_obs_unit");  // with -wal and -shm
  ASSERT_TRUE(dir.ok()) << dir.status();
  DatabaseOptions options;
  options.path = dir->File("obs.db");
  auto db = Database::Open(options);
  ASSERT_TRUE(db.ok()) << db.status();
  AgentRegistry registry;
  {
    JobManager jobs(db->get(), &registry, nullptr);
    o.Attach(&registry, &jobs, db->get());
    o.SetServing(true);
    EXPECT_EQ(o.Health().status, 200);
    EXPECT_EQ(o.Health().body, "ok\n");
    o.SetServing(false);
    EXPECT_EQ(o.Health().status, 503);
    o.Stop();
  }
}

TEST(ObservabilityTest, DispatchEventsBecomeMetrics) {
  struct Forward : DispatchObserver {
    int results = 0;
    void OnResult(v1::MeasureErrorKind, double) override { ++results; }
  } forward;
  Observability o(&forward);
  AgentRegistry registry;
  registry.SetObserver(&o);
  std::string id = registry.Register("k", v1::AgentCapabilities());
  ASSERT_TRUE(registry.Connect(id));
  v1::MeasureRequest request;
  request.set_request_id("r1");
  int done = 0;
  ASSERT_TRUE(registry.Dispatch("k", request, [&](const v1::MeasureResult&) { ++done; }));
  EXPECT_EQ(registry.Stats().queued, 1);
  v1::MeasureRequest sent;
  ASSERT_TRUE(registry.NextRequest(id, &sent));
  EXPECT_EQ(registry.Stats().queued, 0);
  EXPECT_EQ(registry.Stats().leased, 1);
  v1::MeasureResult result;
  result.set_request_id("r1");
  result.set_error(v1::WRONG_ANSWER);
  registry.Complete(id, result);
  registry.Complete(id, result);  // a duplicate is dropped, not counted
  EXPECT_EQ(done, 1);
  EXPECT_EQ(forward.results, 1);
  EXPECT_EQ(registry.Stats().leased, 0);
  std::string text = o.registry().Render();
  EXPECT_NE(text.find("tuneforge_measurements_total 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("tuneforge_leases_total 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("tuneforge_errors_total{kind=\"wrong_answer\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("tuneforge_lease_seconds_count 1\n"), std::string::npos) << text;
  registry.Shutdown();
}

}  // namespace
}  // namespace tuneforge

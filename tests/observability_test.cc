// /metrics and /healthz of a real tuneforge-server process, scraped with a real HTTP
// client on loopback while a real agent runs a tiny tuning job from the CLI.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include <grpcpp/grpcpp.h>

#include "nlohmann/json.hpp"
#include "server/http/http_client.h"
#include "tests/process_util.h"
#include "tuneforge/v1/tuning.grpc.pb.h"

namespace tuneforge {
namespace {

using testing::AgentArgv;
using testing::Process;
using testing::QuietCheck;
using testing::RunCommand;

const std::string kBin = TF_BIN_DIR;

// The exposition text parsed: "# TYPE" per family and every sample by its full
// series text (name{labels}).
struct Exposition {
  std::map<std::string, std::string> types;
  std::map<std::string, double> samples;
  double Get(const std::string& series) const {
    auto it = samples.find(series);
    return it == samples.end() ? -1 : it->second;
  }
};

Exposition Parse(const std::string& text) {
  Exposition e;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("# TYPE ", 0) == 0) {
      std::istringstream l(line.substr(7));
      std::string name, type;
      l >> name >> type;
      e.types[name] = type;
    } else if (!line.empty() && line[0] != '#') {
      size_t space = line.rfind(' ');
      EXPECT_NE(space, std::string::npos) << line;
      e.samples[line.substr(0, space)] = std::stod(line.substr(space + 1));
    }
  }
  return e;
}

class ObservabilityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (std::filesystem::temp_directory_path() /
            ("tf_obs_" + std::to_string(getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    if (!HasFailure()) std::filesystem::remove_all(dir_);
  }

  Exposition Scrape() {
    http::ClientResponse r = http::Get("127.0.0.1", metrics_port_, "/metrics");
    EXPECT_EQ(r.status, 200) << r.error;
    EXPECT_NE(r.head.find("text/plain; version=0.0.4"), std::string::npos) << r.head;
    return Parse(r.body);
  }

  // Scrapes until `series` has `value` (bounded: ~20 s); returns the last scrape.
  Exposition ScrapeUntil(const std::string& series, double value) {
    Exposition e;
    testing::WaitFor(
        [&] {
          e = Scrape();
          return e.Get(series) == value;
        },
        std::chrono::seconds(20), std::chrono::milliseconds(100));
    return e;
  }

  std::string dir_;
  int metrics_port_ = 0;
};

TEST_F(ObservabilityTest, MetricsFollowATinyTuningJob) {
  testing::ServerProcess started = testing::StartServerProcess(kBin, dir_ + "/obs.db", dir_ + "/server",
                                                               {"--metrics-listen", "127.0.0.1:0"});
  Process& server = *started.process;
  metrics_port_ = started.metrics_port;
  ASSERT_GT(metrics_port_, 0) << server.Stderr();
  const std::string address = started.address;

  http::ClientResponse health = http::Get("127.0.0.1", metrics_port_, "/healthz");
  EXPECT_EQ(health.status, 200) << health.error;
  EXPECT_EQ(health.body, "ok\n");
  EXPECT_EQ(http::Get("127.0.0.1", metrics_port_, "/").status, 200);  // the dashboard
  EXPECT_EQ(http::Get("127.0.0.1", metrics_port_, "/no-such-page").status, 404);

  Exposition before = Scrape();
  for (const auto& [name, type] : std::map<std::string, std::string>{
           {"tuneforge_agents", "gauge"},
           {"tuneforge_queue_depth", "gauge"},
           {"tuneforge_leases_outstanding", "gauge"},
           {"tuneforge_leases_total", "counter"},
           {"tuneforge_redispatches_total", "counter"},
           {"tuneforge_measurements_total", "counter"},
           {"tuneforge_errors_total", "counter"},
           {"tuneforge_lease_seconds", "histogram"},
           {"tuneforge_build_seconds", "histogram"},
           {"tuneforge_jobs", "gauge"}}) {
    EXPECT_EQ(before.types[name], type) << name;
  }
  EXPECT_EQ(before.Get("tuneforge_measurements_total"), 0);
  EXPECT_EQ(before.Get("tuneforge_jobs{state=\"SUCCEEDED\"}"), 0);
  EXPECT_EQ(before.Get("tuneforge_errors_total{kind=\"wrong_answer\"}"), 0);

  Process agent(AgentArgv(kBin, address, "obs", QuietCheck::kOff),
                dir_ + "/agent.out", dir_ + "/agent.err");
  Exposition idle = ScrapeUntil("tuneforge_agents{device_key=\"obs\",state=\"idle\"}", 1);
  ASSERT_EQ(idle.Get("tuneforge_agents{device_key=\"obs\",state=\"idle\"}"), 1) << agent.Stderr();
  EXPECT_EQ(idle.Get("tuneforge_agents{device_key=\"obs\",state=\"lost\"}"), 0);

  auto tune = RunCommand({kBin + "/tuneforge", "tune", "--server", address, "--device-key", "obs",
                          "--task", "matmul M=16 N=16 K=16", "--trials", "6", "--batch", "3",
                          "--policy", "random", "--json"},
                         dir_);
  ASSERT_EQ(tune.exit_code, 0) << tune.err << server.Stderr();
  int records = nlohmann::json::parse(tune.out)["records"].get<int>();

  Exposition after = Scrape();
  double measured = after.Get("tuneforge_measurements_total");
  // Every record of the job is either a measurement or a candidate that never built.
  EXPECT_EQ(measured + after.Get("tuneforge_errors_total{kind=\"invalid_config\"}") +
                after.Get("tuneforge_errors_total{kind=\"build_error\"}") +
                after.Get("tuneforge_errors_total{kind=\"build_timeout\"}"),
            records)
      << tune.out;
  EXPECT_GE(measured, 7);  // baseline + 6 trials (+ re-measurements)
  EXPECT_EQ(after.Get("tuneforge_leases_total"), measured);
  EXPECT_EQ(after.Get("tuneforge_lease_seconds_count"), measured);
  EXPECT_EQ(after.Get("tuneforge_lease_seconds_bucket{le=\"+Inf\"}"), measured);
  EXPECT_GT(after.Get("tuneforge_lease_seconds_sum"), 0);
  EXPECT_GE(after.Get("tuneforge_build_seconds_count"), 7);  // each measured trial was built once
  EXPECT_GT(after.Get("tuneforge_build_seconds_sum"), 0);
  EXPECT_EQ(after.Get("tuneforge_jobs{state=\"SUCCEEDED\"}"), 1);
  EXPECT_EQ(after.Get("tuneforge_jobs{state=\"RUNNING\"}"), 0);
  EXPECT_EQ(after.Get("tuneforge_leases_outstanding"), 0);
  EXPECT_EQ(after.Get("tuneforge_queue_depth"), 0);
  EXPECT_EQ(after.Get("tuneforge_redispatches_total"), 0);
  EXPECT_EQ(after.Get("tuneforge_errors_total{kind=\"agent_lost\"}"), 0);

  agent.Kill(SIGKILL);
  Exposition lost = ScrapeUntil("tuneforge_agents{device_key=\"obs\",state=\"lost\"}", 1);
  EXPECT_EQ(lost.Get("tuneforge_agents{device_key=\"obs\",state=\"lost\"}"), 1);
  EXPECT_EQ(lost.Get("tuneforge_agents{device_key=\"obs\",state=\"idle\"}"), 0);
}

TEST_F(ObservabilityTest, ConfigFileSetsEndpointsAndMessageLimits) {
  const std::string config = dir_ + "/server.yaml";
  std::ofstream(config) << "listen: 127.0.0.1:0\n"
                           "db: cfg.db\n"  // next to the config file
                           "metrics_listen: 127.0.0.1:0\n"
                           "log_level: warning\n"
                           "grpc:\n"
                           "  max_receive_message_bytes: 1MiB\n";
  Process server({kBin + "/tuneforge-server", "--config", config}, dir_ + "/server.out",
                 dir_ + "/server.err");
  int port = 0;
  testing::WaitFor(
      [&] {
        std::string out = server.Stdout();
        size_t p = out.find("listening on port "), m = out.find("metrics on port ");
        if (p == std::string::npos || m == std::string::npos || out.find('\n', m) == std::string::npos) return false;
        port = std::stoi(out.substr(p + 18));
        metrics_port_ = std::stoi(out.substr(m + 16));
        return true;
      },
      std::chrono::seconds(10));
  ASSERT_GT(metrics_port_, 0) << server.Stderr();
  EXPECT_EQ(http::Get("127.0.0.1", metrics_port_, "/healthz").status, 200);
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/cfg.db"));
  EXPECT_EQ(server.Stderr().find("] tuneforge server listening"), std::string::npos)
      << "log_level: warning hides info lines: " << server.Stderr();

  // The receive limit is applied: a 2 MiB request is refused, a small one is not.
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                     grpc::InsecureChannelCredentials());
  auto stub = v1::TuningService::NewStub(channel);
  v1::SubmitJobRequest big;
  big.mutable_spec()->set_task("matmul M=8 N=8 K=8 " + std::string(2 << 20, 'x'));
  grpc::ClientContext big_ctx;
  v1::SubmitJobResponse resp;
  grpc::Status st = stub->SubmitJob(&big_ctx, big, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  v1::SubmitJobRequest small;
  small.mutable_spec()->set_task("matmul M=8 N=8 K=8 bogus=1");
  grpc::ClientContext small_ctx;
  st = stub->SubmitJob(&small_ctx, small, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();

  // A bad file stops the server before it serves, naming the file and the key.
  std::ofstream(dir_ + "/bad.yaml") << "listen: 127.0.0.1:0\nmetrics: yes\n";
  auto bad = RunCommand({kBin + "/tuneforge-server", "--config", dir_ + "/bad.yaml"}, dir_,
                        std::chrono::seconds(60));
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("bad.yaml: unknown key 'metrics'"), std::string::npos) << bad.err;
}

TEST_F(ObservabilityTest, BadMetricsAddressesAreClearErrors) {
  for (const std::string& bad : {std::string("nowhere"), std::string("127.0.0.1:70000"),
                                 std::string("127.0.0.1:")}) {
    auto r = RunCommand({kBin + "/tuneforge-server", "--listen", "127.0.0.1:0", "--db",
                         dir_ + "/bad.db", "--metrics-listen", bad},
                        dir_, std::chrono::seconds(60));
    EXPECT_EQ(r.exit_code, 1) << bad << r.err;
    EXPECT_NE(r.err.find("--metrics-listen"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(bad), std::string::npos) << r.err;
  }
  auto missing = RunCommand({kBin + "/tuneforge-server", "--metrics-listen"}, dir_);
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("--metrics-listen needs HOST:PORT"), std::string::npos) << missing.err;
}

}  // namespace
}  // namespace tuneforge

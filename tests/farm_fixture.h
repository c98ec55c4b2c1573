// A farm on loopback for fault-injection tests: a real tuneforge-server process on a
// scratch SQLite file, real tuneforge-agent processes, the tuneforge CLI, and a gRPC
// FarmService client to watch it all. Helpers check the db afterwards: every trial
// of a job is recorded exactly once.
#pragma once

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "compiler/task/task.h"
#include "db/database.h"
#include "tests/process_util.h"
#include "tuneforge/v1/farm.grpc.pb.h"

namespace tuneforge::testing {

class FarmFixture : public ::testing::Test {
 protected:
  static inline const std::string kBin = TF_BIN_DIR;

  void SetUp() override {
    dir_ = (std::filesystem::temp_directory_path() /
            ("tf_farm_" + std::to_string(getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    db_ = dir_ + "/farm.db";
  }
  void TearDown() override {
    agents_.clear();
    server_.reset();
    if (!HasFailure()) std::filesystem::remove_all(dir_);
  }

  // Starts tuneforge-server on a free port with `extra` flags; returns its address.
  std::string StartServer(const std::vector<std::string>& extra = {}) {
    ServerProcess server = StartServerProcess(kBin, db_, dir_ + "/server", extra);
    server_ = std::move(server.process);
    if (server.address.empty()) {
      ADD_FAILURE() << "server did not start: " << server_->Stderr();
      return "";
    }
    address_ = server.address;
    farm_ = v1::FarmService::NewStub(grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
    return address_;
  }

  // Starts an agent of `key`, without the quiet check unless `quiet` says so (these
  // tests are about the farm, not measurement quality); its index in agents_ is returned.
  size_t StartAgent(const std::string& key, const std::vector<std::string>& extra = {},
                    QuietCheck quiet = QuietCheck::kOff) {
    size_t n = agents_.size();
    std::vector<std::string> argv = AgentArgv(kBin, address_, key, quiet, extra);
    std::string base = dir_ + "/agent" + std::to_string(n);
    agents_.push_back(std::make_unique<Process>(argv, base + ".out", base + ".err"));
    return n;
  }

  // Starts `tuneforge tune` against the server (it watches the job until it ends).
  std::unique_ptr<Process> StartTune(const std::vector<std::string>& args,
                                     const std::string& name = "tune") {
    std::vector<std::string> argv = {kBin + "/tuneforge", "tune", "--server", address_};
    argv.insert(argv.end(), args.begin(), args.end());
    return std::make_unique<Process>(argv, dir_ + "/" + name + ".out", dir_ + "/" + name + ".err");
  }

  v1::FarmStatus Status() {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::FarmStatus status;
    grpc::Status st = farm_->Status(&ctx, v1::FarmStatusRequest(), &status);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return status;
  }

  // Polls farm status every 50 ms until `done` holds (true) or `seconds` pass (false).
  bool WaitFor(const std::function<bool(const v1::FarmStatus&)>& done, int seconds) {
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
    while (std::chrono::steady_clock::now() < end) {
      if (done(Status())) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

  // The agent registered from the `n`th agent process: agent ids are given in
  // registration order, so callers start agents one at a time.
  static const v1::AgentStatus* FindAgent(const v1::FarmStatus& s, const std::string& id) {
    for (const v1::AgentStatus& a : s.agents())
      if (a.agent_id() == id) return &a;
    return nullptr;
  }

  // Waits until `count` agents are connected and past their health check (idle).
  bool WaitForIdleAgents(int count, int seconds = 60) {
    return WaitFor(
        [&](const v1::FarmStatus& s) {
          int idle = 0;
          for (const v1::AgentStatus& a : s.agents()) idle += a.state() == "idle";
          return idle >= count;
        },
        seconds);
  }

  std::vector<TuningRecord> Records(const std::string& task) {
    DatabaseOptions o;
    o.path = db_;
    o.create_if_missing = false;
    auto database = Database::Open(o);
    EXPECT_TRUE(database.ok()) << database.status();
    if (!database.ok()) return {};
    auto records = (*database)->Records(ParseTask(task)->WorkloadKey(), "");
    EXPECT_TRUE(records.ok()) << records.status();
    return records.ok() ? *records : std::vector<TuningRecord>{};
  }

  // One finished job of `trials` trials (random search, one server run): the
  // baseline once, the 3 finalists once as a trial and twice re-measured, every other
  // config once. So: trials + 1 distinct configs, none lost, none twice.
  void ExpectEveryTrialRecordedOnce(const std::string& task, int trials) {
    std::vector<TuningRecord> records = Records(task);
    std::map<std::string, int> seen;
    for (const TuningRecord& r : records) ++seen[r.config_json];
    std::map<int, int> configs_seen_n_times;
    for (const auto& [config, n] : seen) ++configs_seen_n_times[n];
    EXPECT_EQ(static_cast<int>(seen.size()), trials + 1) << "distinct configs (trials + baseline)";
    EXPECT_EQ(configs_seen_n_times[3], 3) << "the finalists";
    EXPECT_EQ(configs_seen_n_times[1], trials + 1 - 3);
    EXPECT_EQ(configs_seen_n_times.size(), 2u) << "a config recorded twice";
    EXPECT_EQ(static_cast<int>(records.size()), trials + 1 + 3 * 2);
  }

  std::string dir_, db_, address_;
  std::unique_ptr<Process> server_;
  std::vector<std::unique_ptr<Process>> agents_;
  std::unique_ptr<v1::FarmService::Stub> farm_;
};

}  // namespace tuneforge::testing

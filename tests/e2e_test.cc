// End to end on loopback with real processes: tuneforge-server, two tuneforge-agent
// processes and the tuneforge CLI as the client; a real SQLite file; real LLVM builds.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>

#include "db/database.h"
#include "compiler/task/task.h"
#include "nlohmann/json.hpp"
#include "tests/process_util.h"
#include "tuner/log_model.h"
#include "tuner/model_store.h"

namespace tuneforge {
namespace {

using testing::AgentArgv;
using testing::Process;
using testing::QuietCheck;
using testing::RunCommand;
using testing::WaitFor;

const std::string kBin = TF_BIN_DIR;

class EndToEndTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (std::filesystem::temp_directory_path() /
            ("tf_e2e_" + std::to_string(getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    if (!HasFailure()) std::filesystem::remove_all(dir_);
  }

  // Starts the server on `listen` (a free port by default); returns "127.0.0.1:PORT".
  std::string StartServer(const std::string& db, const std::vector<std::string>& extra = {},
                          const std::string& listen = "127.0.0.1:0", const std::string& out = "server") {
    testing::ServerProcess server = testing::StartServerProcess(kBin, db, dir_ + "/" + out, extra, listen);
    server_ = std::move(server.process);
    if (server.address.empty()) ADD_FAILURE() << "server did not start: " << server_->Stderr();
    return server.address;
  }

  // The db a test's server wrote, opened after the server stopped (never created).
  absl::StatusOr<std::unique_ptr<Database>> OpenDb(const std::string& path) {
    DatabaseOptions o;
    o.path = path;
    o.create_if_missing = false;
    return Database::Open(o);
  }

  std::string dir_;
  std::unique_ptr<Process> server_;
};

TEST_F(EndToEndTest, ServerTwoAgentsAndCliTuneASmallMatmul) {
  const std::string db = dir_ + "/farm.db";
  std::string address = StartServer(db);
  ASSERT_FALSE(address.empty());
  Process agent1(AgentArgv(kBin, address, "e2e", QuietCheck::kOff),
                 dir_ + "/agent1.out", dir_ + "/agent1.err");
  Process agent2(AgentArgv(kBin, address, "e2e", QuietCheck::kOff),
                 dir_ + "/agent2.out", dir_ + "/agent2.err");

  const std::string task = "matmul M=64 N=48 K=33";
  auto r = RunCommand({kBin + "/tuneforge", "tune", "--server", address, "--device-key", "e2e", "--task",
                task, "--trials", "16", "--batch", "8", "--seed", "3", "--json"},
               dir_);
  ASSERT_EQ(r.exit_code, 0) << r.err << "\nserver:\n" << server_->Stderr() << "\nagent1:\n"
                            << agent1.Stderr();
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["task"], "matmul M=64 N=48 K=33 dtype=float32");
  EXPECT_EQ(j["trials"], 16);
  EXPECT_GT(j["best"]["gflops"].get<double>(), 0.0);
  EXPECT_GT(j["best"]["seconds"].get<double>(), 0.0);
  EXPECT_TRUE(j["best"]["config"].is_object());
  EXPECT_EQ(j["target"]["device_key"], "e2e");
  EXPECT_GE(j["records"].get<int>(), 17);

  // farm status: both agents idle with measurements, the job done; a killed agent
  // shows as lost.
  agent2.Kill(SIGKILL);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  auto farm = RunCommand({kBin + "/tuneforge", "farm", "status", "--server", address, "--json"}, dir_);
  ASSERT_EQ(farm.exit_code, 0) << farm.err;
  nlohmann::json f = nlohmann::json::parse(farm.out);
  ASSERT_EQ(f["agents"].size(), 2u) << farm.out;
  std::multiset<std::string> states;
  for (const auto& a : f["agents"]) {
    EXPECT_EQ(a["device_key"], "e2e");
    EXPECT_GT(a["measurements"].get<int64_t>(), 0);
    states.insert(a["state"].get<std::string>());
  }
  EXPECT_EQ(states, (std::multiset<std::string>{"idle", "lost"})) << farm.out;
  ASSERT_EQ(f["jobs"].size(), 1u);
  EXPECT_EQ(f["jobs"][0]["state"], "SUCCEEDED");
  EXPECT_EQ(f["jobs"][0]["trials_done"], 16);

  // Both agents measured, every record is in the db, and the best is correct data.
  server_->Kill(SIGTERM);  // waits for the exit
  auto database = OpenDb(db);
  ASSERT_TRUE(database.ok()) << database.status();
  TuningTask t = *ParseTask(task);
  auto records = (*database)->Records(t.WorkloadKey(), "");
  ASSERT_TRUE(records.ok());
  EXPECT_EQ(static_cast<int>(records->size()), j["records"].get<int>());
  std::set<std::string> agents;
  for (const TuningRecord& rec : *records) {
    if (rec.result.error == MeasureErrorKind::kNone) agents.insert(rec.result.agent_id);
    EXPECT_NE(rec.result.error, MeasureErrorKind::kWrongAnswer) << rec.config_json;
  }
  EXPECT_EQ(agents.size(), 2u);
  // After the job the server trained the log model of matmul on this target from
  // every record (issue 20's warm start for the next new shape).
  ASSERT_FALSE(records->empty());
  auto log_info = StoredLogModelInfo(
      database->get(), LogModelKey("matmul_cpu", (*FindTemplate(t))->version(),
                                   records->front().target.key));
  ASSERT_TRUE(log_info.ok()) << log_info.status();
  ASSERT_TRUE(log_info->has_value()) << server_->Stderr();
  EXPECT_EQ((*log_info)->log_records, static_cast<int64_t>(records->size()));
  EXPECT_EQ((*log_info)->tasks, 1);

  auto best = RunCommand({kBin + "/tuneforge", "db", "best", "--db", db, "--task", task, "--json"}, dir_);
  ASSERT_EQ(best.exit_code, 0) << best.err;
  nlohmann::json b = nlohmann::json::parse(best.out);
  EXPECT_EQ(b["device_key"], "e2e");
  EXPECT_GT(b["gflops"].get<double>(), 0.0);

  auto list = RunCommand({kBin + "/tuneforge", "db", "list", "--db", db}, dir_);
  ASSERT_EQ(list.exit_code, 0) << list.err;
  EXPECT_NE(list.out.find("matmul M=64 N=48 K=33"), std::string::npos) << list.out;
}

// Device agents (issue 21): an agent that measures through a launcher and the
// cross-built device runner registers the device's triple; the server builds the
// job's kernels for that architecture (ld.lld) and only that agent gets them; it runs
// them under qemu-user, checks each output against the reference and streams the time
// back. aarch64 (NEON) and riscv64 (RVV), each on its own device key, beside a host
// agent and an AVX2-only agent on this machine (--device-flags: the server resolves
// its key's target to x86-64-v3 and measures natively); matmul and conv2d on each. Every record is keyed by its target, none is a wrong answer, and each
// target's best comes from its own records.
TEST_F(EndToEndTest, DeviceAgentsTuneForAarch64AndRiscv64UnderQemu) {
  const std::string db = dir_ + "/devices.db";
  std::string address = StartServer(db);
  ASSERT_FALSE(address.empty());
  struct Device {
    std::string key, triple, launcher, flags, target;
  };
  const std::vector<Device> devices = {
      {"host", "", "", "", ""},
      {"avx2", "", "", "", ""},
      {"arm", "aarch64-unknown-linux-gnu", "qemu-aarch64 -L /usr/aarch64-linux-gnu", "asimd",
       "-mtriple=aarch64-unknown-linux-gnu -mcpu=cortex-a76 -mattr=+neon -threads=1"},
      {"rv", "riscv64-unknown-linux-gnu", "qemu-riscv64 -L /usr/riscv64-linux-gnu -cpu rv64,v=true,vlen=128,vext_spec=v1.0",
       "", "-mtriple=riscv64-unknown-linux-gnu -mcpu=generic-rv64 -mattr=+m,+a,+f,+d,+c,+v -threads=1"},
  };
  std::vector<std::unique_ptr<Process>> agents;
  agents.push_back(std::make_unique<Process>(
      AgentArgv(kBin, address, "host", QuietCheck::kOff),
      dir_ + "/host.out", dir_ + "/host.err"));
  agents.push_back(std::make_unique<Process>(
      AgentArgv(kBin, address, "avx2", QuietCheck::kOff,
                {"--device-flags",
                 "sse,sse2,pni,ssse3,sse4_1,sse4_2,popcnt,avx,avx2,fma,f16c,bmi1,bmi2,abm,movbe,cx16,lahf_lm"}),
      dir_ + "/avx2.out", dir_ + "/avx2.err"));
  // The aarch64 "board" does not see the agent's files: its launcher refuses any path
  // in the agent's directory, so the runner, kernel and inputs must be copied to the
  // board's own directory (--push) and the output back (--pull), as over ssh or adb.
  // Its shell runs mkdir itself; everything else runs under qemu.
  const std::string board_launcher = dir_ + "/board.sh";
  std::ofstream(board_launcher) << "#!/bin/sh\n"
                                << "case \"$*\" in *agent-tmp*) echo \"board: no such file: $*\" >&2; exit 97;; esac\n"
                                << "case \"$1\" in mkdir) exec \"$@\";; esac\n"
                                << "exec " << devices[2].launcher << " \"$@\"\n";
  std::filesystem::permissions(board_launcher, std::filesystem::perms::owner_all);
  std::filesystem::create_directories(dir_ + "/agent-tmp");
  for (const Device& d : devices) {
    if (d.triple.empty()) continue;  // the host agent above
    std::vector<std::string> argv = {kBin + "/tuneforge-agent", "--server", address, "--device-key", d.key,
                                     "--runner", kBin + "/tuneforge-runner-" + d.triple.substr(0, d.triple.find('-')),
                                     "--launcher", d.launcher, "--device-triple", d.triple};
    if (!d.flags.empty()) argv.insert(argv.end(), {"--device-flags", d.flags});
    if (d.key == "arm") {
      argv[8] = board_launcher;
      argv.insert(argv.end(), {"--temp-dir", dir_ + "/agent-tmp", "--push", "cp {local} {remote}", "--pull",
                               "cp {remote} {local}", "--device-dir", dir_ + "/board"});
    }
    agents.push_back(std::make_unique<Process>(argv, dir_ + "/" + d.key + ".out", dir_ + "/" + d.key + ".err"));
  }
  const std::vector<std::string> tasks = {"matmul M=16 N=24 K=20", "conv2d N=1 C=8 H=8 W=8 K=16 R=3 S=3 stride=1 pad=1"};
  std::map<std::string, std::string> best_config;  // "<task>|<target key>" -> config
  for (const Device& d : devices) {
    for (const std::string& task : tasks) {
      std::vector<std::string> argv = {kBin + "/tuneforge", "tune", "--server", address, "--device-key", d.key,
                                       "--task", task, "--trials", "6", "--batch", "3", "--json"};
      if (!d.target.empty()) argv.insert(argv.end(), {"--target", d.target});
      auto r = RunCommand(argv, dir_);
      ASSERT_EQ(r.exit_code, 0) << r.err << "\nserver:\n" << server_->Stderr();
      nlohmann::json j = nlohmann::json::parse(r.out);
      if (!d.triple.empty()) {
        EXPECT_EQ(j["target"]["triple"], d.triple) << r.out;
      }
      if (d.key == "avx2") {
        EXPECT_EQ(j["target"]["cpu"], "x86-64-v3") << r.out;
      }
      EXPECT_GT(j["best"]["seconds"].get<double>(), 0.0) << r.out;
      EXPECT_EQ(j["errors"], 0) << r.out;
    }
  }
  // The board's directory got the runner and the files of the last measurement.
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/board/tuneforge-runner-aarch64"));
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/board/kernel.so"));
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/board/output.bin"));
  // farm status: each agent with the triple it measures.
  auto farm = RunCommand({kBin + "/tuneforge", "farm", "status", "--server", address, "--json"}, dir_);
  ASSERT_EQ(farm.exit_code, 0) << farm.err;
  std::multiset<std::string> triples;
  const nlohmann::json farm_json = nlohmann::json::parse(farm.out);
  for (const auto& a : farm_json["agents"]) triples.insert(a["triple"].get<std::string>());
  EXPECT_EQ(triples.count("aarch64-unknown-linux-gnu"), 1u) << farm.out;
  EXPECT_EQ(triples.count("riscv64-unknown-linux-gnu"), 1u) << farm.out;
  EXPECT_EQ(triples.size(), 4u) << farm.out;
  // farm agents: each agent's target and how it reaches its device.
  auto farm_agents = RunCommand({kBin + "/tuneforge", "farm", "agents", "--server", address, "--json"}, dir_);
  ASSERT_EQ(farm_agents.exit_code, 0) << farm_agents.err;
  std::map<std::string, nlohmann::json> by_key;
  for (const auto& a : nlohmann::json::parse(farm_agents.out)) by_key[a["device_key"]] = a;
  ASSERT_EQ(by_key.size(), 4u) << farm_agents.out;
  EXPECT_EQ(by_key["host"]["launcher"], "") << farm_agents.out;
  EXPECT_NE(by_key["avx2"]["target"].get<std::string>().find("-mcpu=x86-64-v3"), std::string::npos)
      << farm_agents.out;
  EXPECT_NE(by_key["arm"]["target"].get<std::string>().find("aarch64"), std::string::npos) << farm_agents.out;
  EXPECT_EQ(by_key["arm"]["launcher"], board_launcher + " (files copied with: cp {local} {remote})")
      << farm_agents.out;
  EXPECT_EQ(by_key["rv"]["launcher"], devices[3].launcher) << farm_agents.out;
  auto agents_text = RunCommand({kBin + "/tuneforge", "farm", "agents", "--server", address}, dir_);
  ASSERT_EQ(agents_text.exit_code, 0) << agents_text.err;
  EXPECT_NE(agents_text.out.find("qemu-riscv64"), std::string::npos) << agents_text.out;
  server_->Kill(SIGTERM);
  auto database = OpenDb(db);
  ASSERT_TRUE(database.ok()) << database.status();
  for (const std::string& task : tasks) {
    auto records = (*database)->Records(ParseTask(task)->WorkloadKey(), "");
    ASSERT_TRUE(records.ok());
    std::map<std::string, int> ok_per_target;  // target key -> successful records
    std::map<std::string, std::string> triple_of;
    for (const TuningRecord& rec : *records) {
      EXPECT_NE(rec.result.error, MeasureErrorKind::kWrongAnswer) << rec.config_json << " " << rec.result.error_message;
      if (rec.result.error == MeasureErrorKind::kNone) ++ok_per_target[rec.target.key];
      triple_of[rec.target.key] = rec.target.triple;
    }
    // Four targets: the host's CPU, x86-64-v3, aarch64, riscv64.
    EXPECT_EQ(ok_per_target.size(), 4u) << task;
    for (const auto& [key, ok] : ok_per_target) {
      EXPECT_GE(ok, 4) << task << " " << key;
      // The best for a target is one of that target's own records.
      auto best = (*database)->Best(ParseTask(task)->WorkloadKey(), key);
      ASSERT_TRUE(best.ok()) << best.status();
      EXPECT_EQ(best->target.key, key);
      EXPECT_EQ(best->target.triple, triple_of[key]);
    }
  }
}

TEST_F(EndToEndTest, EmbeddedDefaultTunesWithALocalAgent) {
  const std::string db = dir_ + "/embedded.db";
  auto r = RunCommand({kBin + "/tuneforge", "tune", "--task", "matmul M=37 N=29 K=41", "--trials", "10",
                "--db", db, "--json"},
               dir_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["trials"], 10);
  EXPECT_EQ(j["target"]["device_key"], "local");
  EXPECT_GT(j["best"]["gflops"].get<double>(), 0.0);
  // Tuning beats the untuned loop nest by a wide margin (~20x on Zen 4: vectors,
  // register tiles), measured by the same agent under the same load.
  EXPECT_GE(j["speedup_over_baseline"].get<double>(), 3.0) << r.out;
  EXPECT_TRUE(std::filesystem::exists(db));

  // Human output mentions the best config, GFLOP/s and the speedup.
  auto text = RunCommand({kBin + "/tuneforge", "tune", "--task", "matmul M=16 N=16 K=16", "--trials", "4",
                   "--db", db},
                  dir_);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("best config:"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("GFLOP/s"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("speedup:"), std::string::npos) << text.out;
}

// The embedded server takes only its run's one-time tokens: another process on the
// machine cannot use it, though it listens on loopback.
TEST_F(EndToEndTest, EmbeddedServerRefusesCallersWithoutItsToken) {
  Process cli({kBin + "/tuneforge", "tune", "--task", "matmul M=64 N=64 K=64", "--trials", "400",
               "--db", dir_ + "/private.db"},
              dir_ + "/cli.out", dir_ + "/cli.err");
  std::string address;
  WaitFor(
      [&] {
        std::string err = cli.Stderr();
        size_t p = err.find("embedded default: server on ");
        size_t end = p == std::string::npos ? p : err.find(',', p + 28);
        if (end != std::string::npos) address = err.substr(p + 28, end - p - 28);
        return !address.empty();
      },
      std::chrono::seconds(20));
  ASSERT_FALSE(address.empty()) << cli.Stderr();
  auto other = RunCommand({kBin + "/tuneforge", "farm", "status", "--server", address}, dir_,
                          std::chrono::seconds(30));
  EXPECT_NE(other.exit_code, 0) << other.out;
  EXPECT_NE(other.err.find("missing token"), std::string::npos) << other.err;
  kill(cli.pid(), SIGINT);  // Ctrl-C: cancel the job
  cli.Wait(std::chrono::seconds(30));
}

// Kernels with layout transforms outside the timed region: the agent must call the
// prepack entry (dense's packed W; a convolution's blocked, padded input and filter)
// before the first run and the unpack entry (blocked output -> NCHW) before each
// check, or every candidate is a wrong_answer. (deploy_test deploys and checks them.)
TEST_F(EndToEndTest, AgentRunsPrepackAndUnpackEntries) {
  const std::string db = dir_ + "/layouts.db";
  for (const char* task : {"dense M=9 N=32 K=24 bias=1 relu=1",
                           "conv2d N=1 C=8 H=7 W=9 K=16 R=3 S=3 stride=1 pad=1",
                           "depthwise_conv2d N=1 C=16 H=9 W=9 R=3 S=3 stride=2 pad=1"}) {
    auto r = RunCommand({kBin + "/tuneforge", "tune", "--task", task, "--trials", "6", "--db", db,
                         "--json"},
                        dir_);
    ASSERT_EQ(r.exit_code, 0) << task << ": " << r.err;
    nlohmann::json j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["errors"], 0) << task << ": " << r.out;
    EXPECT_GT(j["best"]["gflops"].get<double>(), 0.0) << task;
    // 6 trials: the top 3 re-measured in 2 rounds whatever the noise (a short job).
    EXPECT_EQ(j["last_event"].get<std::string>().rfind("re-measured top 3 interleaved x2: winner", 0), 0u)
        << task << ": " << r.out;
  }
}

TEST_F(EndToEndTest, JobWaitsForAgentsOfItsKeyAndCanBeCancelled) {
  std::string address = StartServer(dir_ + "/wait.db");
  ASSERT_FALSE(address.empty());
  Process cli({kBin + "/tuneforge", "tune", "--server", address, "--device-key", "nobody",
               "--task", "matmul M=8 N=8 K=8", "--trials", "2"},
              dir_ + "/cli.out", dir_ + "/cli.err");
  EXPECT_TRUE(WaitFor(
      [&] { return cli.Stderr().find("waiting for an agent with device key 'nobody'") != std::string::npos; },
      std::chrono::seconds(10)))
      << cli.Stderr();
  kill(cli.pid(), SIGINT);  // Ctrl-C cancels the job
  int code = cli.Wait(std::chrono::seconds(20));
  EXPECT_NE(code, 0);
  EXPECT_NE(cli.Stderr().find("cancelled"), std::string::npos) << cli.Stderr();
}

// A job's target comes from its agents: a target the connected agents cannot run
// (more threads than they have cores) makes the job wait and say why.
TEST_F(EndToEndTest, JobWhoseTargetNoAgentMatchesWaitsAndSaysWhy) {
  std::string address = StartServer(dir_ + "/target.db");
  ASSERT_FALSE(address.empty());
  Process agent(AgentArgv(kBin, address, "small", QuietCheck::kOff),
                dir_ + "/agent.out", dir_ + "/agent.err");
  Process cli({kBin + "/tuneforge", "tune", "--server", address, "--device-key", "small",
               "--task", "matmul M=8 N=8 K=8", "--trials", "2", "--target", "llvm -threads=64"},
              dir_ + "/cli.out", dir_ + "/cli.err");
  const std::string why =
      "waiting for an agent with device key 'small' that can run target 'llvm -threads=64': "
      "the connected agents lack 64 threads";
  EXPECT_TRUE(WaitFor([&] { return cli.Stderr().find(why) != std::string::npos; }, std::chrono::seconds(20)))
      << cli.Stderr();
  auto status = RunCommand({kBin + "/tuneforge", "farm", "status", "--server", address, "--json"},
                           dir_, std::chrono::seconds(30));
  ASSERT_EQ(status.exit_code, 0) << status.err;
  nlohmann::json f = nlohmann::json::parse(status.out);
  ASSERT_EQ(f["jobs"].size(), 1u);
  EXPECT_NE(f["jobs"][0]["message"].get<std::string>().find(why), std::string::npos) << status.out;
  kill(cli.pid(), SIGINT);
  EXPECT_NE(cli.Wait(std::chrono::seconds(20)), 0);
  EXPECT_NE(cli.Stderr().find("cancelled"), std::string::npos) << cli.Stderr();
}

TEST_F(EndToEndTest, TokensAndRolesAreCheckedOnEveryCall) {
  auto write = [&](const std::string& name, const std::string& text) {
    return testing::WriteSecret(dir_ + "/" + name, text);
  };
  // A token file others can read is refused, naming the fix.
  std::ofstream(dir_ + "/open.token") << "alice-token-0123456789\n";
  std::filesystem::permissions(dir_ + "/open.token", std::filesystem::perms::others_read,
                               std::filesystem::perm_options::add);
  std::string tokens = write("tokens", "# role name token\n"
                                       "agent farm agent-token-0123456789\n"
                                       "user alice alice-token-0123456789\n"
                                       "user bob bob-token-0123456789abc\n"
                                       "admin ops admin-token-0123456789\n");
  std::string agent_token = write("agent.token", "agent-token-0123456789\n");
  std::string alice = write("alice.token", "alice-token-0123456789\n");
  std::string bob = write("bob.token", "bob-token-0123456789abc\n");
  std::string admin = write("admin.token", "admin-token-0123456789\n");
  std::string wrong = write("wrong.token", "not-a-token-at-all-xyz\n");
  std::string address = StartServer(dir_ + "/auth.db", {"--tokens", tokens});
  ASSERT_FALSE(address.empty());
  Process agent(AgentArgv(kBin, address, "k", QuietCheck::kOff, {"--token-file", agent_token}),
                dir_ + "/agent.out", dir_ + "/agent.err");

  const std::vector<std::string> tune = {kBin + "/tuneforge", "tune", "--server", address,
                                         "--device-key", "k", "--task", "matmul M=8 N=8 K=8",
                                         "--trials", "2", "--json"};
  auto with = [&](std::vector<std::string> argv, const std::vector<std::string>& more) {
    argv.insert(argv.end(), more.begin(), more.end());
    return RunCommand(argv, dir_);
  };
  auto none = with(tune, {});
  EXPECT_NE(none.exit_code, 0);
  EXPECT_NE(none.err.find("missing token"), std::string::npos) << none.err;
  auto bad = with(tune, {"--token-file", wrong});
  EXPECT_NE(bad.err.find("unknown token"), std::string::npos) << bad.err;
  auto open_token = with(tune, {"--token-file", dir_ + "/open.token"});
  EXPECT_EQ(open_token.exit_code, 1);
  EXPECT_NE(open_token.err.find("chmod 600"), std::string::npos) << open_token.err;
  auto as_agent = with(tune, {"--token-file", agent_token});
  EXPECT_NE(as_agent.err.find("may not call"), std::string::npos) << as_agent.err;

  auto ok = with(tune, {"--token-file", alice});
  ASSERT_EQ(ok.exit_code, 0) << ok.err << agent.Stderr();

  // Users see only their own jobs; admins see all.
  const std::vector<std::string> farm = {kBin + "/tuneforge", "farm", "status", "--server",
                                         address, "--json"};
  auto as_bob = with(farm, {"--token-file", bob});
  ASSERT_EQ(as_bob.exit_code, 0) << as_bob.err;
  EXPECT_EQ(nlohmann::json::parse(as_bob.out)["jobs"].size(), 0u);
  auto as_alice = with(farm, {"--token-file", alice});
  ASSERT_EQ(as_alice.exit_code, 0) << as_alice.err;
  nlohmann::json jobs = nlohmann::json::parse(as_alice.out)["jobs"];
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0]["owner"], "alice");  // from the token, not from the request
  auto as_admin = with(farm, {"--token-file", admin});
  EXPECT_EQ(nlohmann::json::parse(as_admin.out)["jobs"].size(), 1u);
}

TEST_F(EndToEndTest, KilledServerRestartsAndItsJobContinuesWithoutLoss) {
  const std::string db = dir_ + "/restart.db";
  std::string address = StartServer(db);
  ASSERT_FALSE(address.empty());
  Process agent(AgentArgv(kBin, address, "r", QuietCheck::kOff),
                dir_ + "/agent.out", dir_ + "/agent.err");
  const int kTrials = 40;
  Process cli({kBin + "/tuneforge", "tune", "--server", address, "--device-key", "r", "--task",
               "matmul M=24 N=20 K=16", "--trials", std::to_string(kTrials), "--batch", "4",
               "--policy", "random"},
              dir_ + "/cli.out", dir_ + "/cli.err");
  auto status = [&]() {
    auto r = RunCommand({kBin + "/tuneforge", "farm", "status", "--server", address, "--json"}, dir_,
                        std::chrono::seconds(30));
    return r.exit_code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json();
  };
  // Wait until part of the job is done, then kill -9 the server mid-job.
  const bool started = WaitFor(
      [&] {
        nlohmann::json f = status();
        return f.is_object() && f["jobs"].size() == 1 && f["jobs"][0]["trials_done"].get<int>() >= 8;
      },
      std::chrono::seconds(30), std::chrono::milliseconds(100));
  ASSERT_TRUE(started) << server_->Stderr();
  server_->Kill(SIGKILL);
  // The client waits for the server to come back (up to 60 s) instead of giving up.
  std::this_thread::sleep_for(std::chrono::seconds(2));
  ASSERT_TRUE(cli.Running()) << cli.Stderr();

  // Restart on the same db and port; the agent reconnects by itself.
  ASSERT_EQ(StartServer(db, {}, address, "server2"), address);
  nlohmann::json job;
  WaitFor(
      [&] {
        nlohmann::json f = status();
        if (f.is_object() && f["jobs"].size() == 1 && f["jobs"][0]["state"] == "SUCCEEDED") job = f["jobs"][0];
        return job.is_object();
      },
      std::chrono::seconds(180), std::chrono::milliseconds(200));
  ASSERT_TRUE(job.is_object()) << server_->Stderr() << agent.Stderr();
  EXPECT_EQ(job["trials_done"], kTrials);
  // The same client process re-attached to the job and reports its success.
  EXPECT_EQ(cli.Wait(std::chrono::seconds(60)), 0) << cli.Stderr();
  EXPECT_NE(cli.Stderr().find("lost the server at " + address), std::string::npos) << cli.Stderr();
  EXPECT_NE(cli.Stderr().find("re-attached to job"), std::string::npos) << cli.Stderr();
  EXPECT_NE(cli.Stdout().find("best"), std::string::npos) << cli.Stdout();
  server_->Kill(SIGTERM);

  // Every trial is in the db once: distinct configs apart from the final
  // re-measurements.
  auto database = OpenDb(db);
  ASSERT_TRUE(database.ok()) << database.status();
  TuningTask t = *ParseTask("matmul M=24 N=20 K=16");
  auto records = (*database)->Records(t.WorkloadKey(), "");
  ASSERT_TRUE(records.ok());
  // The untuned baseline is measured once (the resumed job reuses the stored record),
  // each finalist once as a trial and then in every re-measurement round - the top 3
  // in 2 rounds (3 records), or, when their figures disagreed (a loaded machine), the
  // top 5 in 6 (7 records; TuningOptions::noisy_spread) - every other config exactly
  // once.
  std::map<std::string, int> seen;
  for (const TuningRecord& r : *records) ++seen[r.config_json];
  std::map<int, int> configs_seen_n_times;
  for (const auto& [config, n] : seen) ++configs_seen_n_times[n];
  const bool widened = configs_seen_n_times.count(7) > 0;
  const int finalists = widened ? 5 : 3;
  EXPECT_EQ(configs_seen_n_times.size(), 2u) << "a config measured twice";
  EXPECT_EQ(configs_seen_n_times[widened ? 7 : 3], finalists);
  EXPECT_EQ(configs_seen_n_times[1] + finalists, kTrials + 1);  // + the baseline
}

TEST_F(EndToEndTest, TlsServerIsVerifiedByAgentAndClient) {
  const std::string cert = dir_ + "/cert.pem", key = dir_ + "/key.pem";
  auto gen = RunCommand({"openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key,
                         "-out", cert, "-days", "1", "-subj", "/CN=localhost", "-addext",
                         "subjectAltName=DNS:localhost,IP:127.0.0.1"},
                        dir_);
  ASSERT_EQ(gen.exit_code, 0) << gen.err;
  std::string address = StartServer(dir_ + "/tls.db", {"--tls-cert", cert, "--tls-key", key});
  ASSERT_FALSE(address.empty());
  Process agent(AgentArgv(kBin, address, "tls", QuietCheck::kOff, {"--tls-ca", cert}),
                dir_ + "/agent.out", dir_ + "/agent.err");
  const std::vector<std::string> tune = {kBin + "/tuneforge", "tune", "--server", address,
                                         "--device-key", "tls", "--task", "matmul M=8 N=8 K=8",
                                         "--trials", "2", "--json"};
  std::vector<std::string> with_ca = tune;
  with_ca.insert(with_ca.end(), {"--tls-ca", cert});
  auto ok = RunCommand(with_ca, dir_);
  ASSERT_EQ(ok.exit_code, 0) << ok.err << agent.Stderr();
  EXPECT_EQ(nlohmann::json::parse(ok.out)["trials"], 2);
  // A plaintext client cannot talk to the TLS server.
  auto plain = RunCommand(tune, dir_, std::chrono::seconds(60));
  EXPECT_NE(plain.exit_code, 0);
  EXPECT_NE(plain.err.find("cannot reach"), std::string::npos) << plain.err;
  // Nor can a client that trusts another certificate.
  const std::string other = dir_ + "/other.pem";
  ASSERT_EQ(RunCommand({"openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                        dir_ + "/other.key", "-out", other, "-days", "1", "-subj", "/CN=localhost"},
                       dir_)
                .exit_code,
            0);
  std::vector<std::string> wrong_ca = tune;
  wrong_ca.insert(wrong_ca.end(), {"--tls-ca", other});
  EXPECT_NE(RunCommand(wrong_ca, dir_, std::chrono::seconds(60)).exit_code, 0);
}

}  // namespace
}  // namespace tuneforge

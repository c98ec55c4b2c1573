// `tuneforge db ...` end to end on real files and a real server: export / import /
// merge idempotence, compact, stats, status, top, history, AutoTVM import, and the
// same queries through `--server` (DatabaseService).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "compiler/target/target.h"
#include "compiler/task/task.h"
#include "compiler/templates/template.h"
#include "db/database.h"
#include "nlohmann/json.hpp"
#include "server/server.h"
#include "tests/process_util.h"

namespace tuneforge {
namespace {

using testing::RunCommand;

const std::string kBin = TF_BIN_DIR;

// The key of the test's target, derived from its fields as the tuner does (imports
// refuse a key that is not).
std::string EpycKey() {
  Target t;
  t.triple = "x86_64";
  t.cpu = "znver4";
  t.num_threads = 4;
  t.device_key = "epyc";
  return t.Key();
}

class DbCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (std::filesystem::temp_directory_path() / ("tf_dbcli_" + std::to_string(getpid())))
               .string();
    std::filesystem::create_directories(dir_);
    // A small log: two tasks on one target, one config re-measured, one wrong answer.
    DatabaseOptions options;
    options.path = dir_ + "/a.db";
    auto db = Database::Open(options);
    ASSERT_TRUE(db.ok()) << db.status();
    std::vector<TuningRecord> records;
    int64_t t = 1700000000000000;
    for (const std::string task :
         {"matmul M=64 N=64 K=64 dtype=float32", "matmul M=32 N=32 K=32 dtype=float32"}) {
      const bool stale = task.find("M=32") != std::string::npos;
      for (int i = 0; i < 6; ++i) {
        TuningRecord r;
        auto parsed = ParseTask(task);
        ASSERT_TRUE(parsed.ok()) << parsed.status();
        r.workload = WorkloadInfo{parsed->WorkloadKey(), "matmul", parsed->CanonicalText(),
                                  parsed->ToJson(), parsed->Flops()};
        // The first task is tuned with the template this build uses, the second with
        // an older version of it (stale).
        auto tmpl = FindTemplate(*parsed);
        ASSERT_TRUE(tmpl.ok()) << tmpl.status();
        r.template_name = (*tmpl)->name();
        r.template_version = (*tmpl)->version() - (stale ? 1 : 0);
        r.target = TargetInfo{EpycKey(), "x86_64", "znver4", "", 4, "epyc"};
        r.config_json = "{\"i\":" + std::to_string(i % 5) + "}";
        r.result.costs = {1e-3 * (i + 1)};
        r.result.error = i == 2 ? MeasureErrorKind::kWrongAnswer : MeasureErrorKind::kNone;
        r.result.start_unix_us = t += 1000000;
        records.push_back(r);
      }
    }
    ASSERT_TRUE((*db)->Insert(records).ok());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  testing::CommandResult Db(std::vector<std::string> args) {
    args.insert(args.begin(), {kBin + "/tuneforge", "db"});
    return RunCommand(args, dir_, std::chrono::seconds(60));
  }

  std::string dir_;
};

TEST_F(DbCliTest, ExportImportMergeCompactStats) {
  const std::string a = dir_ + "/a.db", b = dir_ + "/b.db", log = dir_ + "/a.jsonl";
  auto r = Db({"export", "--db", a, "--out", log});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (int pass = 0; pass < 2; ++pass) {
    r = Db({"import", log, "--db", b, "--json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    nlohmann::json j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["inserted"], pass == 0 ? 12 : 0);
    EXPECT_EQ(j["duplicates"], pass == 0 ? 0 : 12);
  }
  r = Db({"merge", a, b, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["inserted"], 0);

  r = Db({"stats", "--db", b, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["records"], 12);

  r = Db({"top", "--db", b, "--task", "matmul M=64 N=64 K=64", "--k", "3", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json top = nlohmann::json::parse(r.out);
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0]["config"]["i"], 0);  // re-measured ({"i":0} at i=0 and i=5)
  EXPECT_TRUE(top[0]["remeasured"].get<bool>());

  r = Db({"history", "--db", b, "--task", "matmul M=64 N=64 K=64"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("6 records, 1 failed"), std::string::npos) << r.out;

  r = Db({"compact", "--db", b, "--keep", "1", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const int deleted = nlohmann::json::parse(r.out)["records_deleted"].get<int>();
  EXPECT_GT(deleted, 0);
  // The export taken before the compaction does not bring the deleted records back.
  r = Db({"import", log, "--db", b, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["inserted"], 0);
  EXPECT_EQ(nlohmann::json::parse(r.out)["compacted"], deleted);
  r = Db({"import", log, "--db", b});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find(std::to_string(deleted) + " skipped (deleted by an earlier compaction)"),
            std::string::npos)
      << r.out;
  r = Db({"stats", "--db", b, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["records"], 12 - deleted);
  EXPECT_EQ(nlohmann::json::parse(r.out)["tombstones"], deleted);

  std::ofstream(dir_ + "/tasks.txt")
      << "# nightly set\nmatmul M=64 N=64 K=64\nmatmul M=32 N=32 K=32\nmatmul M=8 N=8 K=8\n";
  r = Db({"status", "--db", b, "--tasks", dir_ + "/tasks.txt", "--device-key", "epyc", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json status = nlohmann::json::parse(r.out);
  ASSERT_EQ(status.size(), 3u);
  EXPECT_EQ(status[0]["state"], "tuned");
  EXPECT_EQ(status[1]["state"], "stale");
  EXPECT_EQ(status[2]["state"], "untuned");
}

TEST_F(DbCliTest, BadInputIsAOneLineError) {
  std::ofstream(dir_ + "/junk.jsonl") << "hello\n";
  auto r = Db({"import", dir_ + "/junk.jsonl", "--db", dir_ + "/a.db"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("not a tuneforge log header"), std::string::npos) << r.err;
  // A failed import into a new db leaves no file; nor does a merge from nowhere.
  r = Db({"import", dir_ + "/junk.jsonl", "--db", dir_ + "/new.db"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/new.db"));
  r = Db({"merge", dir_ + "/new.db", dir_ + "/nowhere.db"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/new.db"));
  // A line that names another task's workload key or a poisoned FLOP count is
  // rejected with the reason, whatever else the file holds.
  r = Db({"export", "--db", dir_ + "/a.db", "--out", dir_ + "/a.jsonl"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  {
    std::ifstream in(dir_ + "/a.jsonl");
    std::string header, line;
    std::getline(in, header);
    std::getline(in, line);
    nlohmann::json j = nlohmann::json::parse(line);
    j["workload"]["flops"] = 1e24;
    std::ofstream(dir_ + "/poisoned.jsonl") << header << "\n" << j.dump() << "\n";
  }
  r = Db({"import", dir_ + "/poisoned.jsonl", "--db", dir_ + "/new.db", "--json"});
  EXPECT_NE(r.out.find("workload flops 1e+24 are not the"), std::string::npos) << r.out << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/new.db"));
  r = Db({"compact", "--db", dir_ + "/a.db"});
  EXPECT_NE(r.err.find("--keep"), std::string::npos) << r.err;
  r = Db({"best", "--task", "matmul M=64 N=64 K=64"});
  EXPECT_NE(r.err.find("--db PATH or --server"), std::string::npos) << r.err;
  r = Db({"frobnicate", "--db", dir_ + "/a.db"});
  EXPECT_NE(r.err.find("unknown db subcommand"), std::string::npos) << r.err;

  // train-model: this log's configs are not the template's (they do not lower), so
  // there is nothing to train on, and it says so; other mistakes are one-line errors.
  r = Db({"train-model", "--db", dir_ + "/a.db"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("skipped matmul on " + EpycKey() + ": only 0 usable records"), std::string::npos)
      << r.out;
  r = Db({"train-model", "--db", dir_ + "/a.db", "--op", "conv2d"});
  EXPECT_NE(r.err.find("no records of op conv2d"), std::string::npos) << r.err;
  r = Db({"train-model", "--db", dir_ + "/a.db", "--max-records", "3"});
  EXPECT_NE(r.err.find("--max-records"), std::string::npos) << r.err;
  r = Db({"train-model", "--db", dir_ + "/missing.db"});
  EXPECT_NE(r.err.find("no such database file"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/missing.db"));
  r = Db({"train-model", "--server", "127.0.0.1:1"});
  EXPECT_NE(r.err.find("needs --db PATH"), std::string::npos) << r.err;
}

TEST_F(DbCliTest, AutoTvmImport) {
  std::ofstream(dir_ + "/tvm.log")
      << "# TopHub\n"
      << R"({"input": ["llvm -mcpu=skylake-avx512", "conv2d_NCHWc.x86", [["TENSOR", [1, 3, 224, 224], "float32"]], {}], "config": {"index": 1, "code_hash": null, "entity": []}, "result": [[1e-4], 0, 1.0, 1539972731.3], "version": 0.2, "tvm_version": "0.7.dev0"})"
      << "\nnot json\n";
  auto r = Db({"import", dir_ + "/tvm.log", "--format", "autotvm", "--db", dir_ + "/a.db"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("1 foreign records kept"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("line 3 rejected"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("no conv2d op"), std::string::npos) << r.out;
}

TEST_F(DbCliTest, QueriesThroughTheServer) {
  ServerOptions options;
  options.listen = "127.0.0.1:0";
  options.db_path = dir_ + "/a.db";
  options.builder_threads = 1;
  auto server = Server::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = "127.0.0.1:" + std::to_string((*server)->port());
  auto r = Db({"best", "--server", address, "--task", "matmul M=32 N=32 K=32", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["config"]["i"], 0);
  r = Db(
      {"export", "--server", address, "--target-key", EpycKey(), "--out", dir_ + "/remote.jsonl"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = Db({"import", dir_ + "/remote.jsonl", "--server", address, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["duplicates"], 12);
  (*server)->Shutdown();
}

// list, history, targets, status and compact through DatabaseService on a server with
// tokens: users query, only admins compact.
TEST_F(DbCliTest, MaintenanceThroughTheServerWithRoles) {
  auto write = [&](const std::string& name, const std::string& text) {
    return testing::WriteSecret(dir_ + "/" + name, text);
  };
  ServerOptions options;
  options.listen = "127.0.0.1:0";
  options.db_path = dir_ + "/a.db";
  options.builder_threads = 1;
  options.tokens_path = write("tokens", "user alice alice-token-0123456789\n"
                                        "admin ops admin-token-0123456789\n");
  const std::string alice = write("alice.token", "alice-token-0123456789\n");
  const std::string admin = write("admin.token", "admin-token-0123456789\n");
  auto server = Server::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = "127.0.0.1:" + std::to_string((*server)->port());
  auto remote = [&](std::vector<std::string> args, const std::string& token) {
    args.insert(args.end(), {"--server", address, "--token-file", token});
    return Db(args);
  };

  auto r = remote({"list", "--json"}, alice);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out).size(), 2u) << r.out;
  r = remote({"history", "--task", "matmul M=64 N=64 K=64"}, alice);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("6 records, 1 failed"), std::string::npos) << r.out;
  r = remote({"targets", "--json"}, alice);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find(EpycKey()), std::string::npos) << r.out;
  std::ofstream(dir_ + "/tasks.txt") << "matmul M=64 N=64 K=64\nmatmul M=8 N=8 K=8\n";
  r = remote({"status", "--tasks", dir_ + "/tasks.txt", "--device-key", "epyc", "--json"}, alice);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json status = nlohmann::json::parse(r.out);
  ASSERT_EQ(status.size(), 2u);
  EXPECT_EQ(status[0]["state"], "tuned");
  EXPECT_EQ(status[1]["state"], "untuned");

  // An export taken before the compaction, to re-upload afterwards.
  r = remote({"export", "--out", dir_ + "/before.jsonl"}, alice);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = remote({"compact", "--keep", "1"}, alice);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("alice may not call"), std::string::npos) << r.err;
  r = remote({"stats", "--json"}, alice);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["records"], 12);  // nothing deleted
  r = remote({"compact", "--keep", "1", "--json"}, admin);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const int deleted = nlohmann::json::parse(r.out)["records_deleted"].get<int>();
  EXPECT_GT(deleted, 0);
  r = remote({"import", dir_ + "/before.jsonl", "--json"}, alice);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["inserted"], 0);
  EXPECT_EQ(nlohmann::json::parse(r.out)["compacted"], deleted);
  (*server)->Shutdown();
}

}  // namespace
}  // namespace tuneforge

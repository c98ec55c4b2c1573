// DatabaseService over real gRPC on loopback, through RemoteDatabase: the CLI's
// `--server` path. A real SQLite file behind it.
#include "server/database_service.h"

#include <grpcpp/grpcpp.h>

#include <filesystem>
#include <sstream>

#include "db/tuning_log_format.h"
#include "gtest/gtest.h"
#include "server/database_client.h"
#include "tuner/tuning_loop.h"

namespace tuneforge {
namespace {

namespace fs = std::filesystem;

// Records as the farm writes them: keys and FLOPs derived from the task and target
// (uploads must be, CheckRecordIdentity).
const TuningTask kTask = *ParseTask("matmul M=128 N=128 K=128");
const std::string kWorkload = kTask.WorkloadKey();

TargetInfo TargetOf(const std::string& device) {
  Target t;
  t.triple = "x86_64-pc-linux-gnu";
  t.cpu = "znver4";
  t.num_threads = 4;
  t.device_key = device;
  return MakeTargetInfo(t);
}
const std::string kEpyc = TargetOf("epyc").key;

TuningRecord Record(const std::string& config, std::vector<double> costs, int64_t t,
                    const std::string& device = "epyc") {
  TuningRecord r;
  r.workload = MakeWorkloadInfo(kTask);
  r.target = TargetOf(device);
  r.template_name = "matmul_cpu";
  r.template_version = 1;
  r.config_json = config;
  r.result.costs = std::move(costs);
  r.result.start_unix_us = t;
  return r;
}

class DatabaseServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::path(::testing::TempDir()) / "tuneforge_dbsvc_XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    DatabaseOptions options;
    options.path = dir_ + "/server.db";
    auto db = Database::Open(options);
    ASSERT_TRUE(db.ok()) << db.status();
    db_ = std::move(*db);
  }
  void StartServer(DatabaseAuthorizer authorizer = nullptr) {
    service_ = std::make_unique<DatabaseServiceImpl>(db_.get(), std::move(authorizer));
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
  }
  void TearDown() override {
    if (server_) server_->Shutdown();
    fs::remove_all(dir_);
  }
  std::unique_ptr<Database> Remote(const std::string& token = "") {
    RemoteDatabaseOptions options;
    options.address = "127.0.0.1:" + std::to_string(port_);
    options.token = token;
    auto remote = ConnectRemoteDatabase(options);
    EXPECT_TRUE(remote.ok()) << remote.status();
    return std::move(*remote);
  }

  std::string dir_;
  std::unique_ptr<Database> db_;
  std::unique_ptr<DatabaseServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

TEST_F(DatabaseServiceTest, UploadQueryDownload) {
  StartServer();
  std::unique_ptr<Database> remote = Remote();
  std::vector<TuningRecord> batch = {Record("{1}", {2.0}, 1), Record("{2}", {1.0}, 2),
                                     Record("{2}", {1.2}, 3), Record("{3}", {0.5}, 4, "arm")};
  absl::StatusOr<CommitResult> up = remote->Insert(batch);
  ASSERT_TRUE(up.ok()) << up.status();
  EXPECT_EQ(up->inserted, 4);
  up = remote->Insert(batch);  // idempotent
  ASSERT_TRUE(up.ok()) << up.status();
  EXPECT_EQ(up->inserted, 0);
  EXPECT_EQ(up->duplicates, 4);
  EXPECT_EQ(db_->Records("", "")->size(), 4u);

  absl::StatusOr<std::vector<RankedConfig>> top = remote->TopK(kWorkload, kEpyc, 5);
  ASSERT_TRUE(top.ok()) << top.status();
  ASSERT_EQ(top->size(), 2u);
  EXPECT_EQ((*top)[0].config_json, "{2}");
  EXPECT_TRUE((*top)[0].remeasured);
  EXPECT_EQ((*top)[0].record.content_id, ContentId((*top)[0].record));
  absl::StatusOr<TuningRecord> best = remote->Best(kWorkload, kEpyc);
  ASSERT_TRUE(best.ok()) << best.status();
  EXPECT_EQ(best->config_json, "{2}");
  EXPECT_EQ(remote->TargetsOf(kWorkload)->size(), 2u);

  // Download one target, as deploy would.
  std::vector<TuningRecord> arm;
  RecordFilter only_arm;
  only_arm.target_key = TargetOf("arm").key;
  ASSERT_TRUE(remote
                  ->Scan(only_arm,
                         [&](const TuningRecord& r) {
                           arm.push_back(r);
                           return absl::OkStatus();
                         })
                  .ok());
  ASSERT_EQ(arm.size(), 1u);
  EXPECT_EQ(arm[0].config_json, "{3}");

  // Export over the wire equals export from the file.
  std::stringstream local, wire;
  ASSERT_TRUE(ExportLog(*db_, ExportOptions(), local).ok());
  ASSERT_TRUE(ExportLog(*remote, ExportOptions(), wire).ok());
  EXPECT_EQ(local.str(), wire.str());

  absl::StatusOr<DatabaseStats> stats = remote->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->records, 4);
  EXPECT_EQ(stats->schema_version, 6);

  // Bad records are refused with the reason; nothing of the batch is stored.
  TuningRecord bad = Record("{9}", {-1.0}, 9);
  absl::StatusOr<CommitResult> refused = remote->Insert({bad});
  EXPECT_FALSE(refused.ok());
  EXPECT_EQ(db_->Records("", "")->size(), 4u);
  EXPECT_TRUE(absl::IsUnimplemented(remote->PutJob(JobRow())));

  // The per-(task, target) queries over the wire equal the local ones.
  absl::StatusOr<std::vector<WorkloadSummary>> list = remote->List();
  ASSERT_TRUE(list.ok()) << list.status();
  absl::StatusOr<std::vector<WorkloadSummary>> local_list = db_->List();
  ASSERT_EQ(list->size(), local_list->size());
  for (size_t i = 0; i < list->size(); ++i) {
    EXPECT_EQ((*list)[i].workload.key, (*local_list)[i].workload.key);
    EXPECT_EQ((*list)[i].target.key, (*local_list)[i].target.key);
    EXPECT_EQ((*list)[i].records, (*local_list)[i].records);
    ASSERT_EQ((*list)[i].best.has_value(), (*local_list)[i].best.has_value());
    if ((*list)[i].best) {
      EXPECT_EQ((*list)[i].best->content_id, (*local_list)[i].best->content_id);
    }
  }
  const std::string wk = (*local_list)[0].workload.key, tk = (*local_list)[0].target.key;
  absl::StatusOr<std::vector<HistoryPoint>> history = remote->History(wk, tk);
  ASSERT_TRUE(history.ok()) << history.status();
  absl::StatusOr<std::vector<HistoryPoint>> local_history = db_->History(wk, tk);
  ASSERT_EQ(history->size(), local_history->size());
  for (size_t i = 0; i < history->size(); ++i) {
    EXPECT_EQ((*history)[i].record_id, (*local_history)[i].record_id);
    EXPECT_EQ((*history)[i].error, (*local_history)[i].error);
    EXPECT_EQ((*history)[i].median_cost, (*local_history)[i].median_cost);
    EXPECT_EQ((*history)[i].improved, (*local_history)[i].improved);
  }
  EXPECT_EQ(remote->TargetSummaries()->size(), db_->TargetSummaries()->size());
  absl::StatusOr<std::vector<TemplateVersionSummary>> versions = remote->TemplateVersions(wk, tk);
  ASSERT_TRUE(versions.ok()) << versions.status();
  EXPECT_EQ(versions->size(), db_->TemplateVersions(wk, tk)->size());

  // Compact runs on the server (no authorizer here: every call may).
  EXPECT_TRUE(absl::IsInvalidArgument(remote->Compact(0).status()));
  absl::StatusOr<CompactResult> compacted = remote->Compact(1);
  ASSERT_TRUE(compacted.ok()) << compacted.status();
  EXPECT_EQ(compacted->records_before, 4);
  EXPECT_EQ(compacted->records_deleted, 1);  // {1}: neither among the fastest 1 nor the best
  EXPECT_EQ(static_cast<int64_t>(db_->Records("", "")->size()), 4 - compacted->records_deleted);
}

// Uploaded records carry who uploaded them; a user's upload is never best (nor top-k)
// until the farm measures the config itself; an admin's is trusted.
TEST_F(DatabaseServiceTest, UploadedRecordsAreMarkedAndUsersUploadsAreNotRanked) {
  StartServer([](grpc::ServerContext* ctx, DatabaseAccess access, DatabaseCaller* caller) {
    auto it = ctx->client_metadata().find("authorization");
    std::string token = it == ctx->client_metadata().end() ? "" : std::string(it->second.data(), it->second.size());
    if (token == "Bearer user-token") {
      caller->name = "mallory";
      caller->admin = false;
    } else if (token == "Bearer admin-token") {
      caller->name = "root";
      caller->admin = true;
    } else {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "bad token");
    }
    if (access == DatabaseAccess::kDelete && !caller->admin) return grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "admin");
    return grpc::Status::OK;
  });
  // The farm measured config {1} at 1 ms.
  ASSERT_TRUE(db_->Insert({Record("{1}", {1e-3}, 1)}).ok());
  // A user uploads config {2} at 1 ns, claiming to be trusted and someone else.
  TuningRecord fake = Record("{2}", {1e-9}, 2);
  fake.uploaded_by = "root";
  fake.upload_trusted = true;
  absl::StatusOr<CommitResult> up = Remote("user-token")->Insert({fake});
  ASSERT_TRUE(up.ok()) << up.status();
  EXPECT_EQ(up->inserted, 1);
  absl::StatusOr<TuningRecord> best = db_->Best(kWorkload, kEpyc);
  ASSERT_TRUE(best.ok()) << best.status();
  EXPECT_EQ(best->config_json, "{1}");  // the 1 ns upload does not change best
  EXPECT_EQ(db_->TopK(kWorkload, kEpyc, 5)->size(), 1u);
  bool found = false;
  absl::StatusOr<std::vector<TuningRecord>> stored = db_->Records(kWorkload, kEpyc);
  ASSERT_TRUE(stored.ok()) << stored.status();
  for (const TuningRecord& r : *stored) {
    if (r.config_json != "{2}") continue;
    found = true;
    EXPECT_EQ(r.uploaded_by, "mallory");
    EXPECT_FALSE(r.upload_trusted);
    EXPECT_TRUE(r.UntrustedUpload());
  }
  EXPECT_TRUE(found);
  // The log keeps the provenance through export and import.
  std::stringstream log;
  ASSERT_TRUE(ExportLog(*db_, ExportOptions(), log).ok());
  EXPECT_NE(log.str().find("\"uploaded_by\":\"mallory\""), std::string::npos) << log.str();

  // An admin's upload is trusted and ranked.
  up = Remote("admin-token")->Insert({Record("{3}", {5e-4}, 3)});
  ASSERT_TRUE(up.ok()) << up.status();
  best = db_->Best(kWorkload, kEpyc);
  ASSERT_TRUE(best.ok());
  EXPECT_EQ(best->config_json, "{3}");
  EXPECT_EQ(best->uploaded_by, "root");
  EXPECT_TRUE(best->upload_trusted);
}

// An upload cannot claim a workload or target it does not describe, nor make a real
// record read as absurdly fast through a poisoned FLOP count; a cost of 0 is refused;
// and a trusted copy of a record a user uploaded first is ranked.
TEST_F(DatabaseServiceTest, UploadsCannotPoisonWorkloadsTargetsOrRanking) {
  StartServer([](grpc::ServerContext* ctx, DatabaseAccess, DatabaseCaller* caller) {
    auto it = ctx->client_metadata().find("authorization");
    const bool admin = it != ctx->client_metadata().end() &&
                       std::string(it->second.data(), it->second.size()) == "Bearer admin-token";
    caller->name = admin ? "root" : "mallory";
    caller->admin = admin;
    return grpc::Status::OK;
  });
  auto refused = [&](TuningRecord r) {
    absl::StatusOr<CommitResult> up = Remote("user-token")->Insert({r});
    return up.ok() ? std::string() : std::string(up.status().message());
  };
  const TuningTask other = *ParseTask("matmul M=64 N=64 K=64");
  TuningRecord claim = Record("{9}", {1e-3}, 9);
  claim.workload.key = other.WorkloadKey();  // another task's key with this task's text
  claim.content_id = "";
  EXPECT_NE(refused(claim).find("is not the key of 'matmul M=128 N=128 K=128"), std::string::npos)
      << refused(claim);
  TuningRecord flops = Record("{9}", {1e-3}, 9);
  flops.workload.flops = 1e24;
  EXPECT_NE(refused(flops).find("workload flops 1e+24 are not the 4194304"), std::string::npos)
      << refused(flops);
  TuningRecord renamed = Record("{9}", {1e-3}, 9);
  renamed.workload.task_text = "matmul M=128 N=128 K=128";  // not canonical
  EXPECT_NE(refused(renamed).find("not in canonical form"), std::string::npos) << refused(renamed);
  TuningRecord target = Record("{9}", {1e-3}, 9);
  target.target.key = TargetOf("arm").key;  // arm's key on epyc's fields
  EXPECT_NE(refused(target).find("is not the key of its fields"), std::string::npos) << refused(target);
  TuningRecord threads = Record("{9}", {1e-3}, 9);
  threads.target.num_threads = 2147483647;
  EXPECT_NE(refused(threads).find("num_threads 2147483647 is not 1..1024"), std::string::npos);
  TuningRecord zero = Record("{9}", {0.0}, 9);
  EXPECT_NE(refused(zero).find("cost of 0 s"), std::string::npos) << refused(zero);
  EXPECT_FALSE(db_->Insert({Record("{9}", {0.0}, 10)}).ok());  // every path, the farm's too
  EXPECT_EQ(db_->Records("", "")->size(), 0u);
  EXPECT_TRUE(db_->TargetsOf(other.WorkloadKey())->empty());

  // The user uploads first; the farm's own records of the task still store, and the
  // admin's copy of the user's record makes it ranked.
  TuningRecord genuine = Record("{5}", {2e-3}, 5);
  ASSERT_TRUE(Remote("user-token")->Insert({genuine}).ok());
  EXPECT_FALSE(db_->Best(kWorkload, kEpyc).ok());  // untrusted: not ranked
  ASSERT_TRUE(db_->Insert({Record("{6}", {3e-3}, 6)}).ok());
  absl::StatusOr<CommitResult> trusted = Remote("admin-token")->Insert({genuine});
  ASSERT_TRUE(trusted.ok()) << trusted.status();
  EXPECT_EQ(trusted->duplicates, 1);
  absl::StatusOr<TuningRecord> best = db_->Best(kWorkload, kEpyc);
  ASSERT_TRUE(best.ok()) << best.status();
  EXPECT_EQ(best->config_json, "{5}");
  EXPECT_EQ(best->uploaded_by, "root");
  EXPECT_TRUE(best->upload_trusted);
  EXPECT_EQ(db_->TopK(kWorkload, kEpyc, 5)->size(), 2u);
}

TEST_F(DatabaseServiceTest, AuthorizerHookRefusesCalls) {
  StartServer([](grpc::ServerContext* ctx, DatabaseAccess, DatabaseCaller*) {
    auto it = ctx->client_metadata().find("authorization");
    if (it != ctx->client_metadata().end() && it->second == "Bearer s3cret") {
      return grpc::Status::OK;
    }
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "bad token");
  });
  absl::StatusOr<DatabaseStats> denied = Remote("wrong")->Stats();
  EXPECT_TRUE(absl::IsUnauthenticated(denied.status())) << denied.status();
  EXPECT_TRUE(Remote("s3cret")->Stats().ok());
}

TEST_F(DatabaseServiceTest, UnreachableServerIsAClearError) {
  RemoteDatabaseOptions options;
  options.address = "127.0.0.1:1";
  options.timeout_ms = 2000;
  auto remote = ConnectRemoteDatabase(options);
  ASSERT_TRUE(remote.ok());
  absl::StatusOr<DatabaseStats> s = (*remote)->Stats();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(std::string(s.status().message()).find("127.0.0.1:1"), std::string::npos);
  options.address = "nonsense";
  EXPECT_TRUE(absl::IsInvalidArgument(ConnectRemoteDatabase(options).status()));
}

}  // namespace
}  // namespace tuneforge

// DatabaseService over real gRPC on loopback, through RemoteDatabase: the CLI's
// `--server` path. A real SQLite file behind it.
#include "server/database_service.h"

#include <grpcpp/grpcpp.h>

#include <filesystem>
#include <sstream>

#include "db/log_io.h"
#include "gtest/gtest.h"
#include "server/database_client.h"

namespace tuneforge {
namespace {

namespace fs = std::filesystem;

TuningRecord Record(const std::string& config, std::vector<double> costs, int64_t t,
                    const std::string& device = "epyc") {
  TuningRecord r;
  r.workload = WorkloadInfo{"wl-a", "matmul", "matmul a", "{}", 1e9};
  r.target = TargetInfo{"tk-" + device, "x86_64", "znver4", "", 4, device};
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

  absl::StatusOr<std::vector<RankedConfig>> top = remote->TopK("wl-a", "tk-epyc", 5);
  ASSERT_TRUE(top.ok()) << top.status();
  ASSERT_EQ(top->size(), 2u);
  EXPECT_EQ((*top)[0].config_json, "{2}");
  EXPECT_TRUE((*top)[0].remeasured);
  EXPECT_EQ((*top)[0].record.content_id, ContentId((*top)[0].record));
  absl::StatusOr<TuningRecord> best = remote->Best("wl-a", "tk-epyc");
  ASSERT_TRUE(best.ok()) << best.status();
  EXPECT_EQ(best->config_json, "{2}");
  EXPECT_EQ(remote->TargetsOf("wl-a")->size(), 2u);

  // Download one target, as deploy would.
  std::vector<TuningRecord> arm;
  RecordFilter only_arm;
  only_arm.target_key = "tk-arm";
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
  StartServer([](grpc::ServerContext* ctx, bool admin_only, DatabaseCaller* caller) {
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
    if (admin_only && !caller->admin) return grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "admin");
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
  absl::StatusOr<TuningRecord> best = db_->Best("wl-a", "tk-epyc");
  ASSERT_TRUE(best.ok()) << best.status();
  EXPECT_EQ(best->config_json, "{1}");  // the 1 ns upload does not change best
  EXPECT_EQ(db_->TopK("wl-a", "tk-epyc", 5)->size(), 1u);
  bool found = false;
  absl::StatusOr<std::vector<TuningRecord>> stored = db_->Records("wl-a", "tk-epyc");
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
  best = db_->Best("wl-a", "tk-epyc");
  ASSERT_TRUE(best.ok());
  EXPECT_EQ(best->config_json, "{3}");
  EXPECT_EQ(best->uploaded_by, "root");
  EXPECT_TRUE(best->upload_trusted);
}

TEST_F(DatabaseServiceTest, AuthorizerHookRefusesCalls) {
  StartServer([](grpc::ServerContext* ctx, bool, DatabaseCaller*) {
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

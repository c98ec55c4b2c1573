// DatabaseService: the shared tuning log over gRPC (proto/tuneforge/v1/database.proto).
// Thin: translate proto <-> domain, call the Database, translate back.
#pragma once

#include <functional>

#include "db/database.h"
#include "tuneforge/v1/database.grpc.pb.h"

namespace tuneforge {

// Who calls: the principal's name and whether it has the admin role (whose uploads
// the db trusts; see db/tuning_log_format.h Uploader).
struct DatabaseCaller {
  std::string name;
  bool admin = true;  // without an authorizer every caller is (an open server)
};

// What a call does to the log: reads (queries, download), writes (upload) or deletes
// (Compact). The server lets viewers read, users also write and admins also delete
// (server/auth.h).
enum class DatabaseAccess { kRead, kWrite, kDelete };

// Decides whether a call of `access` may proceed. Return a non-OK status (e.g.
// UNAUTHENTICATED, PERMISSION_DENIED) to refuse; on OK, fill `caller`. Without an
// authorizer every call passes, as an admin.
using DatabaseAuthorizer =
    std::function<grpc::Status(grpc::ServerContext*, DatabaseAccess access, DatabaseCaller* caller)>;

// Thread-safe (the Database is).
class DatabaseServiceImpl final : public v1::DatabaseService::Service {
 public:
  explicit DatabaseServiceImpl(Database* db, DatabaseAuthorizer authorizer = nullptr)
      : db_(db), authorizer_(std::move(authorizer)) {}

  grpc::Status TopK(grpc::ServerContext*, const v1::TopKRequest*, v1::TopKResponse*) override;
  grpc::Status TargetsOf(grpc::ServerContext*, const v1::TargetsOfRequest*,
                         v1::TargetsOfResponse*) override;
  grpc::Status Upload(grpc::ServerContext*, const v1::UploadRequest*, v1::UploadResponse*) override;
  grpc::Status Download(grpc::ServerContext*, const v1::DownloadRequest*,
                        grpc::ServerWriter<v1::DownloadChunk>*) override;
  grpc::Status Stats(grpc::ServerContext*, const v1::StatsRequest*, v1::StatsResponse*) override;
  grpc::Status List(grpc::ServerContext*, const v1::ListRequest*,
                    grpc::ServerWriter<v1::ListResponse>*) override;
  grpc::Status History(grpc::ServerContext*, const v1::HistoryRequest*,
                       v1::HistoryResponse*) override;
  grpc::Status TargetSummaries(grpc::ServerContext*, const v1::TargetSummariesRequest*,
                               v1::TargetSummariesResponse*) override;
  grpc::Status TemplateVersions(grpc::ServerContext*, const v1::TemplateVersionsRequest*,
                                v1::TemplateVersionsResponse*) override;
  grpc::Status Compact(grpc::ServerContext*, const v1::CompactRequest*,
                       v1::CompactResponse*) override;

  // Lines per DownloadChunk (and rows per ListResponse); an Upload may carry at most
  // kMaxUploadLines.
  static constexpr int kChunkLines = 1000;
  static constexpr int kMaxUploadLines = 100000;

 private:
  grpc::Status Authorize(grpc::ServerContext* ctx, DatabaseAccess access = DatabaseAccess::kRead,
                         DatabaseCaller* caller = nullptr) const {
    DatabaseCaller ignored;
    return authorizer_ ? authorizer_(ctx, access, caller ? caller : &ignored) : grpc::Status::OK;
  }

  Database* db_;
  DatabaseAuthorizer authorizer_;
};

}  // namespace tuneforge

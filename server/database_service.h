// DatabaseService: the shared tuning log over gRPC (proto/tuneforge/v1/database.proto).
// Thin: translate proto <-> domain, call the Database, translate back.
#pragma once

#include <functional>

#include "db/database.h"
#include "tuneforge/v1/database.grpc.pb.h"

namespace tuneforge {

// Decides whether a call may proceed. The hook for authentication: until the farm
// issue adds tokens/TLS to every service, the server installs none and all calls pass.
// Return a non-OK status (e.g. UNAUTHENTICATED) to refuse.
using DatabaseAuthorizer = std::function<grpc::Status(grpc::ServerContext*)>;

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

  // Lines per DownloadChunk; an Upload may carry at most kMaxUploadLines.
  static constexpr int kChunkLines = 1000;
  static constexpr int kMaxUploadLines = 100000;

 private:
  grpc::Status Authorize(grpc::ServerContext* ctx) const {
    return authorizer_ ? authorizer_(ctx) : grpc::Status::OK;
  }

  Database* db_;
  DatabaseAuthorizer authorizer_;
};

}  // namespace tuneforge

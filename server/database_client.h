// RemoteDatabase: the Database interface over a server's DatabaseService, so the CLI's
// `tuneforge db ... --server HOST:PORT` runs the same code as with a local file. A
// second backend behind the same interface, as docs/db.md describes.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "db/database.h"

namespace tuneforge {

struct RemoteDatabaseOptions {
  std::string address;     // HOST:PORT of a tuneforge server
  int timeout_ms = 30000;  // per unary call; downloads, List and Compact have no deadline
  // Sent as "authorization: Bearer <token>" metadata when not empty (server/auth.h:
  // user or admin role; Compact needs admin).
  std::string token;
  std::string tls_ca;  // PEM file; empty: plaintext (loopback only unless `insecure`)
  bool insecure = false;  // allow plaintext off loopback (--insecure)
};

// Connects lazily (the first call reports an unreachable server). Supported remotely:
// TopK, Best, TargetsOf, Insert, Scan, InsertForeign, ScanForeign, Stats, List,
// History, TargetSummaries, TemplateVersions, Compact. Records, jobs and cost models
// return Unimplemented with a message that says to use --db on the server's machine.
// Insert returns no ids (ids are the server's).
absl::StatusOr<std::unique_ptr<Database>> ConnectRemoteDatabase(
    const RemoteDatabaseOptions& options);

}  // namespace tuneforge

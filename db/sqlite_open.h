// Opens, checks and migrates a tuneforge SQLite file for db/sqlite_database.cc.
#pragma once

#include "absl/status/statusor.h"
#include "db/database.h"
#include "db/sqlite_util.h"

namespace tuneforge::db_internal {

struct OpenedFile {
  Connection db;  // foreign keys on; WAL and synchronous=NORMAL unless read-only
  int schema_version = 0;
};

// Everything Database::Open promises about errors happens here: an empty path, a
// missing directory (never created), a missing file when it may not be created, a file
// that is not SQLite, a SQLite file that is not ours, a schema newer than this build
// (or, read-only, older). Every message is one line starting with the path; a refused
// file is not modified.
absl::StatusOr<OpenedFile> OpenFile(const DatabaseOptions& options);

}  // namespace tuneforge::db_internal

// The tuning log's on-disk schema as an ordered list of migrations. Open applies the
// ones a file has not seen yet, each in the same transaction as its row in
// schema_migrations. Append new migrations; never edit one that has shipped, since
// files in the field already contain its result.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"

struct sqlite3;

namespace tuneforge::db_internal {

// Stored in the SQLite header (PRAGMA application_id) so a tuneforge file can be told
// apart from any other SQLite file before we touch it. ASCII "TFRG".
inline constexpr int32_t kApplicationId = 0x54465247;

struct Migration {
  int version;              // 1, 2, ... without gaps
  const char* description;  // one line, stored in schema_migrations
  // One or more statements without parameters. They run inside the migration's
  // transaction, so no BEGIN/COMMIT, VACUUM or PRAGMA journal_mode.
  const char* sql;
  // Optional: runs after `sql` in the same transaction, for the data changes SQL alone
  // cannot make (v2 computes content ids in C++). Null for most migrations.
  absl::Status (*after)(sqlite3* db) = nullptr;
};

// In increasing version order; the last one is the version this build writes.
const std::vector<Migration>& Migrations();
int LatestSchemaVersion();

}  // namespace tuneforge::db_internal

// Pieces shared by the `tuneforge db` subcommands (cli/db_command.cc for
// queries and maintenance, cli/db_transfer.cc for export/import/merge).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "db/database.h"
#include "nlohmann/json.hpp"
#include "cli/flags.h"

namespace tuneforge::cli {

// The db a subcommand works on: the SQLite file of --db, or with --server HOST:PORT
// the server's DatabaseService (a RemoteDatabase). Exactly one must be given. A
// missing local file is an error, never created (except for import/merge targets,
// `create_if_missing`).
absl::StatusOr<std::unique_ptr<Database>> OpenDb(const Flags& flags, bool create_if_missing = false,
                                                 bool read_only = false);

// The record as `db best --json` prints it.
nlohmann::json RecordJson(const TuningRecord& r);

// Parses --since/--until: YYYY-MM-DD (UTC midnight) or seconds since the epoch.
absl::StatusOr<int64_t> ParseDateFlag(const Flags& flags, const std::string& name);

absl::StatusOr<int> DbExport(const Flags& flags);
absl::StatusOr<int> DbImport(const Flags& flags);
absl::StatusOr<int> DbMerge(const Flags& flags);

}  // namespace tuneforge::cli

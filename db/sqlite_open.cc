// Opening a tuneforge file. The order matters: check the path and the file's first
// bytes ourselves, then read (never write) the application id, the tables and the
// schema version, and only when the file is ours and not newer than this build switch
// it to WAL and apply the missing migrations. A file we refuse is left byte-for-byte
// as it was.

#include "db/sqlite_open.h"

#include <sqlite3.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "compiler/support/log.h"
#include "compiler/support/status.h"
#include "db/schema.h"

namespace tuneforge::db_internal {

namespace {

absl::Status NotSqlite(const std::string& path, absl::string_view why) {
  return absl::FailedPreconditionError(
      absl::StrCat(path, " is not a tuneforge database (", why, ")"));
}

// Looks at the file's first bytes ourselves, so a file that is not SQLite at all (a
// config file given by mistake) is refused with a plain message before SQLite opens
// it; SQLite would only say "file is not a database", and only at the first query.
// An empty file is how SQLite itself starts a new database, so it is accepted.
absl::Status CheckSqliteHeader(const std::string& path) {
  static constexpr char kMagic[] = "SQLite format 3";  // 16 bytes with the NUL
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::PermissionDeniedError(absl::StrCat(path, ": cannot read the file"));
  char header[sizeof(kMagic)] = {};
  in.read(header, sizeof(header));
  std::streamsize got = in.gcount();
  if (got == 0) return absl::OkStatus();
  if (got < static_cast<std::streamsize>(sizeof(header)) ||
      std::char_traits<char>::compare(header, kMagic, sizeof(kMagic)) != 0) {
    return NotSqlite(path, "file is not a SQLite database");
  }
  return absl::OkStatus();
}

// Everything Open must know before it decides to write: refuses the file if it is
// someone else's database or a newer tuneforge's. Reads only, in one read transaction:
// another process may be creating the schema right now, and reading its application id
// before that commit but its tables after would make our own file look foreign.
absl::StatusOr<int> InspectExisting(const std::string& path, sqlite3* db) {
  ASSIGN_OR_RETURN(Transaction snapshot, Transaction::Begin(db, Transaction::Mode::kRead));
  absl::StatusOr<int64_t> app_id = QueryInt64(db, "PRAGMA application_id");
  if (!app_id.ok()) {
    if (absl::IsDataLoss(app_id.status())) {
      return NotSqlite(path, absl::StrCat("file is not a SQLite database or is corrupt: ",
                                          app_id.status().message()));
    }
    return app_id.status();
  }
  ASSIGN_OR_RETURN(int64_t objects, QueryInt64(db, "SELECT count(*) FROM sqlite_master"));
  if (*app_id != kApplicationId) {
    // application_id 0 with no tables is a brand-new (or empty) file: ours to claim.
    if (*app_id == 0 && objects == 0) {
      RETURN_IF_ERROR(snapshot.Commit());
      return 0;
    }
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s is a SQLite database but not a tuneforge database (application_id 0x%08x, "
        "%d schema object(s)); refusing to modify it",
        path, static_cast<uint32_t>(*app_id), objects));
  }
  absl::StatusOr<int64_t> version =
      QueryInt64(db, "SELECT coalesce(max(version), 0) FROM schema_migrations");
  if (!version.ok()) {
    return absl::DataLossError(absl::StrCat(path,
                                            " has tuneforge's application id but no readable "
                                            "schema_migrations table: ",
                                            version.status().message()));
  }
  RETURN_IF_ERROR(snapshot.Commit());
  return static_cast<int>(*version);
}

absl::Status NewerSchemaError(const std::string& path, int64_t version) {
  return absl::FailedPreconditionError(absl::StrCat(
      path, " was written by a newer tuneforge (schema ", version, ", this build knows ",
      LatestSchemaVersion(), "); upgrade tuneforge to open it"));
}

// WAL: readers (the CLI, a second server) do not block the writer. Together with
// synchronous=NORMAL it is durable across application crashes; a power loss may lose
// the last commits but never corrupts the file. The mode is stored in the file, so
// only the first open of a new file switches it.
absl::Status UseWal(const std::string& path, sqlite3* db, int busy_timeout_ms) {
  ASSIGN_OR_RETURN(std::string mode, QueryText(db, "PRAGMA journal_mode"));
  if (mode == "wal") return absl::OkStatus();
  // The switch needs an exclusive lock, and SQLite reports contention for it as busy
  // at once rather than through the busy handler (waiting could deadlock). Another
  // connection opening the same new file is the usual cause, so retry for as long as
  // the busy timeout allows.
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(busy_timeout_ms);
  while (true) {
    absl::StatusOr<std::string> switched = QueryText(db, "PRAGMA journal_mode = WAL");
    if (switched.ok()) {
      if (*switched != "wal") {
        // Some file systems (e.g. certain network mounts) cannot do WAL; SQLite keeps
        // the rollback journal, which is correct, only less concurrent.
        TF_LOG(Warning) << path << ": WAL journal not available (journal_mode is " << *switched
                        << "); readers will block writers";
      }
      return absl::OkStatus();
    }
    if (!absl::IsUnavailable(switched.status()) || std::chrono::steady_clock::now() >= deadline) {
      return switched.status();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// Applies the migrations the file lacks, all in one write transaction, and returns
// the resulting version. The version is read again inside the transaction because
// another process may have migrated the file since InspectExisting.
absl::StatusOr<int> Migrate(const std::string& path, sqlite3* db) {
  ASSIGN_OR_RETURN(Transaction txn, Transaction::Begin(db, Transaction::Mode::kWrite));
  RETURN_IF_ERROR(Exec(db,
                       "CREATE TABLE IF NOT EXISTS schema_migrations ("
                       "version INTEGER PRIMARY KEY, applied_unix_us INTEGER NOT NULL, "
                       "description TEXT NOT NULL)"));
  ASSIGN_OR_RETURN(int64_t version,
                   QueryInt64(db, "SELECT coalesce(max(version), 0) FROM schema_migrations"));
  if (version > LatestSchemaVersion()) return NewerSchemaError(path, version);
  if (version == LatestSchemaVersion()) return static_cast<int>(version);

  ASSIGN_OR_RETURN(Statement note,
                   Statement::Prepare(db,
                                      "INSERT INTO schema_migrations "
                                      "(version, applied_unix_us, description) VALUES (?, ?, ?)"));
  for (const Migration& m : Migrations()) {
    if (m.version <= version) continue;
    RETURN_IF_ERROR(Exec(db, m.sql));
    if (m.after != nullptr) RETURN_IF_ERROR(m.after(db));
    note.Reset();
    note.BindInt64(1, m.version);
    note.BindInt64(2, UnixMicrosNow());
    note.BindText(3, m.description);
    RETURN_IF_ERROR(note.Run());
    TF_LOG(Info) << path << ": applied schema migration " << m.version << " (" << m.description
                 << ")";
  }
  // PRAGMA takes no parameters; the value is our compile-time constant, not input.
  // Inside the transaction, so a file is never marked as ours without its tables.
  RETURN_IF_ERROR(Exec(db, absl::StrCat("PRAGMA application_id = ", kApplicationId).c_str()));
  RETURN_IF_ERROR(txn.Commit());
  return LatestSchemaVersion();
}

}  // namespace

absl::StatusOr<OpenedFile> OpenFile(const DatabaseOptions& options) {
  namespace fs = std::filesystem;
  const std::string& path = options.path;
  if (path.empty()) return absl::InvalidArgumentError("database path is empty");
  if (options.busy_timeout_ms < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": busy_timeout_ms must be >= 0, got ", options.busy_timeout_ms));
  }

  // Path checks first, with messages that name what is wrong; SQLite would only say
  // "unable to open database file". The directory is never created: a typo in a path
  // should not grow a new tree.
  std::error_code ec;
  fs::path dir = fs::path(path).parent_path();
  if (dir.empty()) dir = ".";
  if (!fs::is_directory(dir, ec)) {
    return absl::NotFoundError(
        absl::StrCat(path, ": directory ", dir.string(),
                     fs::exists(dir, ec) ? " is not a directory" : " does not exist"));
  }
  fs::file_status st = fs::status(path, ec);
  const bool exists = fs::exists(st);
  if (exists && fs::is_directory(st)) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is a directory, not a database file"));
  }
  if (!exists && (options.read_only || !options.create_if_missing)) {
    return absl::NotFoundError(
        absl::StrCat(path, ": no such database file",
                     options.read_only ? " (opened read-only)" : " (create_if_missing is off)"));
  }
  if (exists) RETURN_IF_ERROR(CheckSqliteHeader(path));

  // SQLite's memory statistics take a process-wide mutex on every allocation, and
  // nothing here reads them. sqlite3_config only works before SQLite initialises; db/
  // is the only SQLite user in the process, so the first open is early enough (a
  // later call would fail harmlessly with SQLITE_MISUSE).
  static const bool memstatus_off = [] {
    sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
    return true;
  }();
  (void)memstatus_off;
  // NOMUTEX: SqliteDatabase serialises all use of the connection with its own mutex.
  int flags =
      SQLITE_OPEN_NOMUTEX |
      (options.read_only ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  sqlite3* raw = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &raw, flags, nullptr);
  Connection db(raw);  // closes on every return below, also when the open failed
  if (rc != SQLITE_OK) return WithPath(path, SqliteError(raw, rc, "cannot open"));
  sqlite3_busy_timeout(db.get(), options.busy_timeout_ms);
  // Connection settings only; they write nothing to the file.
  RETURN_IF_ERROR(WithPath(path, Exec(db.get(), "PRAGMA foreign_keys = ON")));

  // Decide before writing anything, so a foreign or newer file is left untouched.
  ASSIGN_OR_RETURN(int version, WithPath(path, InspectExisting(path, db.get())));
  const int latest = LatestSchemaVersion();
  if (version > latest) return NewerSchemaError(path, version);
  // (Only now: on a file that is not ours it would be the first read.)
  // A page cache big enough for the indexes of a large log (SQLite's default is 2 MiB):
  // inserts touch the content-id index at random, and every miss is a read. Memory is
  // only taken as pages are used. Negative = KiB.
  RETURN_IF_ERROR(WithPath(path, Exec(db.get(), "PRAGMA cache_size = -65536")));
  if (options.read_only) {
    if (version < latest) {
      return absl::FailedPreconditionError(absl::StrCat(path, " has schema ", version,
                                                        " but this build needs ", latest,
                                                        "; open it once read-write to migrate it"));
    }
  } else {
    RETURN_IF_ERROR(WithPath(path, UseWal(path, db.get(), options.busy_timeout_ms)));
    RETURN_IF_ERROR(WithPath(path, Exec(db.get(), "PRAGMA synchronous = NORMAL")));
    // Checkpoint every 64 MiB of WAL instead of every 4 MiB: one batched insert
    // dirties thousands of pages, and pages that several commits touch (index
    // interiors, the configs rows) are then copied into the file once, not per commit.
    // journal_size_limit: after a checkpoint the WAL file shrinks back to 64 MiB.
    RETURN_IF_ERROR(WithPath(path, Exec(db.get(), "PRAGMA wal_autocheckpoint = 16384")));
    RETURN_IF_ERROR(WithPath(path, Exec(db.get(), "PRAGMA journal_size_limit = 67108864")));
    if (options.max_file_bytes > 0) {
      // A quota: SQLite then fails a growing write with SQLITE_FULL, exactly as a full
      // disk does. PRAGMA takes no parameters; the value is a validated integer.
      ASSIGN_OR_RETURN(int64_t page_size, WithPath(path, QueryInt64(db.get(), "PRAGMA page_size")));
      int64_t pages = std::max<int64_t>(1, options.max_file_bytes / page_size);
      RETURN_IF_ERROR(
          WithPath(path, Exec(db.get(), absl::StrCat("PRAGMA max_page_count = ", pages).c_str())));
    }
    if (version < latest) {
      ASSIGN_OR_RETURN(version, WithPath(path, Migrate(path, db.get())));
    }
  }
  return OpenedFile{std::move(db), version};
}

}  // namespace tuneforge::db_internal

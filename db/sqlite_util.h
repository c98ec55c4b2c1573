// Thin RAII helpers over the SQLite C API for the SQLite backend (db/sqlite_*.cc): a prepared
// Statement, a Transaction guard, and the conversion of SQLite result codes into
// absl::Status (the db component's error edge: docs/architecture.md). The SQLite types are only
// forward-declared so this header does not pull sqlite3.h into anyone's includes.
//
// None of these are thread-safe; they are used under the owning connection's lock.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

struct sqlite3;
struct sqlite3_stmt;

namespace tuneforge::db_internal {

// Owns a connection; closes it (sqlite3_close_v2) on destruction.
struct SqliteCloser {
  void operator()(sqlite3* db) const;
};
using Connection = std::unique_ptr<sqlite3, SqliteCloser>;

// Error messages of the db component start with the database path: "<path>: ...".
// A message that already starts with the path (e.g. "<path> is not a tuneforge
// database") is left alone.
absl::Status WithPath(const std::string& path, const absl::Status& status);
template <typename T>
absl::StatusOr<T> WithPath(const std::string& path, absl::StatusOr<T> result) {
  if (result.ok()) return result;
  return WithPath(path, result.status());
}

// Wall-clock time for the *_unix_us columns the db fills in itself.
int64_t UnixMicrosNow();

// "<what>: <sqlite3_errmsg>" with a status code chosen from the result code:
// Unavailable exactly for busy/locked (so callers may retry those and nothing else),
// InvalidArgument for constraint violations, DataLoss for corrupt or non-database
// files, Internal for I/O errors and anything unexpected. `db` may be null when there
// is no connection to ask for the detailed message.
absl::Status SqliteError(sqlite3* db, int rc, absl::string_view what);

// Runs one or more statements that take no parameters (schema scripts, BEGIN,
// COMMIT, PRAGMA setters). Result rows, if any, are discarded.
absl::Status Exec(sqlite3* db, const char* sql);

// A prepared statement; finalized on destruction. SQL text is always a constant of
// the caller; values go in only through the Bind* calls.
class Statement {
 public:
  static absl::StatusOr<Statement> Prepare(sqlite3* db, const char* sql);

  Statement() = default;  // empty until assigned from Prepare

  Statement(Statement&& other) noexcept;
  Statement& operator=(Statement&& other) noexcept;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  ~Statement();

  // Parameters are 1-based as in SQLite. A failing bind (e.g. a string over SQLite's
  // size limit) is remembered and returned by the next Step/Run, so call sites can
  // bind a whole row without checking each call.
  void BindText(int index, absl::string_view value);
  void BindTextOrNull(int index, absl::string_view value);  // empty -> NULL
  void BindInt64(int index, int64_t value);
  void BindDouble(int index, double value);
  void BindNull(int index);
  void BindBlob(int index, absl::string_view bytes);  // bytes as they are, never NULL

  // True when a row is ready to be read, false when the statement is done.
  absl::StatusOr<bool> Step();
  // Steps to completion, ignoring rows: for INSERT/UPDATE.
  absl::Status Run();
  // Makes the statement reusable with new bindings.
  void Reset();

  // Columns are 0-based. NULL reads as 0 / 0.0 / "".
  int64_t ColumnInt64(int col) const;
  double ColumnDouble(int col) const;
  std::string ColumnText(int col) const;
  std::string ColumnBlob(int col) const;
  bool ColumnIsNull(int col) const;
  int ColumnCount() const;

 private:
  Statement(sqlite3* db, sqlite3_stmt* stmt) : db_(db), stmt_(stmt) {}
  void NoteBind(int rc, int index);

  sqlite3* db_ = nullptr;
  sqlite3_stmt* stmt_ = nullptr;
  absl::Status bind_status_;
};

// Rows changed by the connection's last INSERT/UPDATE/DELETE, and its last rowid.
int64_t Changes(sqlite3* db);
int64_t LastInsertRowid(sqlite3* db);
// True when the connection is not inside a transaction (SQLite may have rolled one
// back on its own, e.g. after SQLITE_FULL).
bool InAutocommit(sqlite3* db);

// Run SQL that yields at least one row and return its first column (count(*),
// PRAGMA application_id, PRAGMA journal_mode).
absl::StatusOr<int64_t> QueryInt64(sqlite3* db, const char* sql);
absl::StatusOr<std::string> QueryText(sqlite3* db, const char* sql);

// BEGIN IMMEDIATE (or a deferred BEGIN for read snapshots) on construction through
// Begin(); rolls back on destruction unless Commit() succeeded, so every early
// return of an error leaves the database as it was.
class Transaction {
 public:
  enum class Mode { kRead, kWrite };
  static absl::StatusOr<Transaction> Begin(sqlite3* db, Mode mode);

  Transaction(Transaction&& other) noexcept : db_(other.db_) { other.db_ = nullptr; }
  Transaction& operator=(Transaction&&) = delete;
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  ~Transaction();

  absl::Status Commit();

 private:
  explicit Transaction(sqlite3* db) : db_(db) {}
  sqlite3* db_;  // null once committed or moved from
};

}  // namespace tuneforge::db_internal

// RAII helpers over SQLite's C API: statements, transactions, errors.
#include "db/sqlite_util.h"

#include <sqlite3.h>

#include <chrono>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "compiler/support/log.h"
#include "compiler/support/status.h"

namespace tuneforge::db_internal {

namespace {
// The start of a statement for error messages: the SQL is ours, so naming it tells a
// reader which step failed (values are never part of it).
std::string SqlHead(absl::string_view sql) {
  size_t start = sql.find_first_not_of(" \n");
  sql = sql.substr(start == absl::string_view::npos ? sql.size() : start);
  sql = sql.substr(0, sql.find('\n'));
  constexpr size_t kMax = 60;
  if (sql.size() <= kMax) return std::string(sql);
  return absl::StrCat(sql.substr(0, kMax), "...");
}
}  // namespace

void SqliteCloser::operator()(sqlite3* db) const { sqlite3_close_v2(db); }

absl::Status WithPath(const std::string& path, const absl::Status& status) {
  if (status.ok() || absl::StartsWith(status.message(), absl::StrCat(path, " ")) ||
      absl::StartsWith(status.message(), absl::StrCat(path, ":"))) {
    return status;
  }
  return absl::Status(status.code(), absl::StrCat(path, ": ", status.message()));
}

int64_t UnixMicrosNow() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

absl::Status SqliteError(sqlite3* db, int rc, absl::string_view what) {
  // sqlite3_errmsg describes the connection's most recent failure, which is this one
  // because callers hold the connection's lock; fall back to the generic text.
  const char* detail = (db != nullptr && (sqlite3_errcode(db) & 0xff) == (rc & 0xff))
                           ? sqlite3_errmsg(db)
                           : sqlite3_errstr(rc);
  std::string message = absl::StrCat(what, ": ", detail);
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return absl::UnavailableError(absl::StrCat(message, " (database is in use; retry)"));
    case SQLITE_CONSTRAINT:
    case SQLITE_TOOBIG:
    case SQLITE_MISMATCH:
    case SQLITE_RANGE:
      return absl::InvalidArgumentError(message);
    case SQLITE_READONLY:
      return absl::FailedPreconditionError(message);
    case SQLITE_PERM:
    case SQLITE_AUTH:
      return absl::PermissionDeniedError(message);
    case SQLITE_NOMEM:
    case SQLITE_FULL:
      return absl::ResourceExhaustedError(message);
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return absl::DataLossError(message);
    case SQLITE_CANTOPEN:
      return absl::FailedPreconditionError(message);
    default:
      return absl::InternalError(message);
  }
}

absl::Status Exec(sqlite3* db, const char* sql) {
  char* error = nullptr;
  int rc = sqlite3_exec(db, sql, nullptr, nullptr, &error);
  if (rc == SQLITE_OK) return absl::OkStatus();
  absl::Status status = SqliteError(db, rc, absl::StrCat("'", SqlHead(sql), "'"));
  sqlite3_free(error);
  return status;
}

absl::StatusOr<Statement> Statement::Prepare(sqlite3* db, const char* sql) {
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v2(db, sql, -1, &stmt, nullptr);
  if (rc != SQLITE_OK) {
    sqlite3_finalize(stmt);
    return SqliteError(db, rc, "preparing a statement");
  }
  // A null statement means the SQL was only whitespace or comments: a bug of ours.
  TF_CHECK(stmt != nullptr, "empty SQL: ", sql);
  return Statement(db, stmt);
}

Statement::Statement(Statement&& other) noexcept
    : db_(other.db_), stmt_(other.stmt_), bind_status_(std::move(other.bind_status_)) {
  other.stmt_ = nullptr;
}

Statement& Statement::operator=(Statement&& other) noexcept {
  if (this != &other) {
    sqlite3_finalize(stmt_);
    db_ = other.db_;
    stmt_ = other.stmt_;
    bind_status_ = std::move(other.bind_status_);
    other.stmt_ = nullptr;
  }
  return *this;
}

Statement::~Statement() { sqlite3_finalize(stmt_); }

void Statement::NoteBind(int rc, int index) {
  // SQLITE_RANGE means our SQL and our bind calls disagree: a bug, not bad input.
  TF_CHECK(rc != SQLITE_RANGE, "bind index ", index, " out of range for: ", sqlite3_sql(stmt_));
  if (rc != SQLITE_OK && bind_status_.ok()) {
    bind_status_ = SqliteError(db_, rc, absl::StrCat("binding parameter ", index));
  }
}

void Statement::BindText(int index, absl::string_view value) {
  // SQLITE_TRANSIENT: SQLite copies the bytes, so callers may pass temporaries.
  NoteBind(
      sqlite3_bind_text64(stmt_, index, value.data(), value.size(), SQLITE_TRANSIENT, SQLITE_UTF8),
      index);
}

void Statement::BindBlob(int index, absl::string_view bytes) {
  // An empty blob must stay a zero-length blob, not NULL: pass a non-null pointer.
  static const char kEmpty = 0;
  NoteBind(sqlite3_bind_blob64(stmt_, index, bytes.empty() ? &kEmpty : bytes.data(), bytes.size(),
                               SQLITE_TRANSIENT),
           index);
}

void Statement::BindTextOrNull(int index, absl::string_view value) {
  if (value.empty()) {
    BindNull(index);
  } else {
    BindText(index, value);
  }
}

void Statement::BindInt64(int index, int64_t value) {
  NoteBind(sqlite3_bind_int64(stmt_, index, value), index);
}

void Statement::BindDouble(int index, double value) {
  NoteBind(sqlite3_bind_double(stmt_, index, value), index);
}

void Statement::BindNull(int index) { NoteBind(sqlite3_bind_null(stmt_, index), index); }

absl::StatusOr<bool> Statement::Step() {
  RETURN_IF_ERROR(bind_status_);
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  absl::Status status = SqliteError(db_, rc, absl::StrCat("'", SqlHead(sqlite3_sql(stmt_)), "'"));
  sqlite3_reset(stmt_);
  return status;
}

absl::Status Statement::Run() {
  while (true) {
    ASSIGN_OR_RETURN(bool row, Step());
    if (!row) return absl::OkStatus();
  }
}

void Statement::Reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
  bind_status_ = absl::OkStatus();
}

int64_t Statement::ColumnInt64(int col) const { return sqlite3_column_int64(stmt_, col); }

double Statement::ColumnDouble(int col) const { return sqlite3_column_double(stmt_, col); }

int Statement::ColumnCount() const { return sqlite3_column_count(stmt_); }

std::string Statement::ColumnText(int col) const {
  // Read the pointer before the length, as the SQLite docs require.
  const unsigned char* text = sqlite3_column_text(stmt_, col);
  if (text == nullptr) return std::string();
  int size = sqlite3_column_bytes(stmt_, col);
  return std::string(reinterpret_cast<const char*>(text), static_cast<size_t>(size));
}

std::string Statement::ColumnBlob(int col) const {
  // Pointer before length, as for text.
  const void* bytes = sqlite3_column_blob(stmt_, col);
  if (bytes == nullptr) return std::string();
  int size = sqlite3_column_bytes(stmt_, col);
  return std::string(static_cast<const char*>(bytes), static_cast<size_t>(size));
}

bool Statement::ColumnIsNull(int col) const {
  return sqlite3_column_type(stmt_, col) == SQLITE_NULL;
}

int64_t Changes(sqlite3* db) { return sqlite3_changes64(db); }
int64_t LastInsertRowid(sqlite3* db) { return sqlite3_last_insert_rowid(db); }
bool InAutocommit(sqlite3* db) { return sqlite3_get_autocommit(db) != 0; }

absl::StatusOr<int64_t> QueryInt64(sqlite3* db, const char* sql) {
  ASSIGN_OR_RETURN(Statement stmt, Statement::Prepare(db, sql));
  ASSIGN_OR_RETURN(bool row, stmt.Step());
  TF_CHECK(row, "query returned no row: ", sql);
  return stmt.ColumnInt64(0);
}

absl::StatusOr<std::string> QueryText(sqlite3* db, const char* sql) {
  ASSIGN_OR_RETURN(Statement stmt, Statement::Prepare(db, sql));
  ASSIGN_OR_RETURN(bool row, stmt.Step());
  TF_CHECK(row, "query returned no row: ", sql);
  return stmt.ColumnText(0);
}

absl::StatusOr<Transaction> Transaction::Begin(sqlite3* db, Mode mode) {
  // IMMEDIATE takes the write lock up front (waiting up to the busy timeout), so a
  // writer never fails half-way with SQLITE_BUSY when another connection also writes.
  RETURN_IF_ERROR(Exec(db, mode == Mode::kWrite ? "BEGIN IMMEDIATE" : "BEGIN"));
  return Transaction(db);
}

absl::Status Transaction::Commit() {
  TF_CHECK(db_ != nullptr, "Commit on a finished transaction");
  absl::Status status = Exec(db_, "COMMIT");
  if (status.ok()) db_ = nullptr;  // else the destructor rolls back
  return status;
}

Transaction::~Transaction() {
  // After some errors (e.g. SQLITE_FULL) SQLite has already rolled back on its own;
  // autocommit mode tells us there is nothing left to undo.
  if (db_ == nullptr || sqlite3_get_autocommit(db_)) return;
  absl::Status status = Exec(db_, "ROLLBACK");
  if (!status.ok()) {
    TF_LOG(Error) << "rollback failed: " << status.message();
  }
}

}  // namespace tuneforge::db_internal

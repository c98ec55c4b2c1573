// Error handling shared by every component: absl::Status / absl::StatusOr plus the
// two macros that keep call sites short. Expected failures (bad user input, a kernel
// that does not build) travel as Status; internal bugs abort through TF_CHECK.
#pragma once

#include <cstdio>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

#define TF_CONCAT_INNER_(a, b) a##b
#define TF_CONCAT_(a, b) TF_CONCAT_INNER_(a, b)

// Returns from the enclosing function if `expr` (an absl::Status) is not OK.
#define RETURN_IF_ERROR(expr)                    \
  do {                                           \
    ::absl::Status tf_status_ = (expr);          \
    if (!tf_status_.ok()) return tf_status_;     \
  } while (0)

// `ASSIGN_OR_RETURN(auto x, MakeX());` — unwraps a StatusOr or returns its error.
#define ASSIGN_OR_RETURN(lhs, rexpr) \
  TF_ASSIGN_OR_RETURN_IMPL_(TF_CONCAT_(tf_statusor_, __LINE__), lhs, rexpr)
#define TF_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                              \
  if (!statusor.ok()) return statusor.status();         \
  lhs = std::move(statusor).value()

namespace tuneforge::internal {
[[noreturn]] inline void CheckFailed(const char* file, int line, const char* cond,
                                     const std::string& msg) {
  std::fprintf(stderr, "%s:%d: internal error: check failed: %s %s\n", file, line, cond,
               msg.c_str());
  std::abort();
}
}  // namespace tuneforge::internal

// Internal invariant: a failure is a bug in tuneforge, never a user error.
// Always on, also in release builds.
#define TF_CHECK(cond, ...)                                                        \
  do {                                                                             \
    if (!(cond))                                                                   \
      ::tuneforge::internal::CheckFailed(__FILE__, __LINE__, #cond,                \
                                         ::absl::StrCat("" __VA_OPT__(, ) __VA_ARGS__)); \
  } while (0)

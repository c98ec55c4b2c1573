// The one logging header. Library code logs through TF_LOG, never std::cout.
// Levels: 0 error, 1 warning, 2 info (default), 3 debug. The level is process-wide
// and set by the executables from their --verbose / --quiet flags.
#pragma once

#include <chrono>
#include <cstdint>
#include <sstream>
#include <string>

namespace tuneforge {

enum class LogLevel { kError = 0, kWarning = 1, kInfo = 2, kDebug = 3 };

void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
// Prefix added to every line (e.g. "agent" or "server"), so interleaved output of the
// embedded default's processes stays readable. In JSON lines it is the "component".
void SetLogPrefix(const std::string& prefix);

// kText: "I 12:34:56 server] message". kJson: one JSON object per line,
// {"ts":"2026-11-22T12:34:56.789Z","level":"info","component":"server","msg":"..."}
// (UTC, milliseconds), for log collectors. Process-wide, like the level.
enum class LogFormat { kText, kJson };
void SetLogFormat(LogFormat format);

// One JSON log line without the newline; exposed for tests.
std::string JsonLogLine(int64_t unix_ms, LogLevel level, const std::string& component,
                        const std::string& msg);

namespace internal {
class LogMessage {
 public:
  LogMessage(LogLevel level, const char* file, int line);
  ~LogMessage();
  std::ostringstream& stream() { return stream_; }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};
// Turns `stream << ...` into a void expression for TF_LOG's conditional.
struct LogVoidify {
  void operator&(std::ostream&) {}
};
}  // namespace internal

// Times a scope and logs its duration at debug level; Seconds() reads it early.
class ScopedTimer {
 public:
  explicit ScopedTimer(std::string what);
  ~ScopedTimer();
  double Seconds() const;

 private:
  std::string what_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace tuneforge

// Usable as a single statement anywhere (no dangling-else): the stream is only
// evaluated when the level is enabled.
#define TF_LOG(level)                                                            \
  !(::tuneforge::LogLevel::k##level <= ::tuneforge::GetLogLevel())               \
      ? (void)0                                                                  \
      : ::tuneforge::internal::LogVoidify() &                                    \
            ::tuneforge::internal::LogMessage(::tuneforge::LogLevel::k##level,   \
                                              __FILE__, __LINE__)                \
                .stream()

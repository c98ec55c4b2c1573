#include "compiler/support/log.h"

#include <atomic>
#include <cstdio>
#include <ctime>
#include <mutex>

namespace tuneforge {
namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
std::mutex g_mutex;
std::string& Prefix() {
  static std::string prefix;
  return prefix;
}
const char* LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kError: return "E";
    case LogLevel::kWarning: return "W";
    case LogLevel::kInfo: return "I";
    case LogLevel::kDebug: return "D";
  }
  return "?";
}
}  // namespace

void SetLogLevel(LogLevel level) { g_level = static_cast<int>(level); }
LogLevel GetLogLevel() { return static_cast<LogLevel>(g_level.load()); }
void SetLogPrefix(const std::string& prefix) {
  std::lock_guard<std::mutex> lock(g_mutex);
  Prefix() = prefix;
}

namespace internal {
LogMessage::LogMessage(LogLevel level, const char* file, int line) : level_(level) {
  if (level_ == LogLevel::kDebug) {
    const char* base = file;
    for (const char* p = file; *p; ++p)
      if (*p == '/') base = p + 1;
    stream_ << base << ":" << line << ": ";
  }
}

LogMessage::~LogMessage() {
  std::time_t now = std::time(nullptr);
  char stamp[16];
  std::strftime(stamp, sizeof(stamp), "%H:%M:%S", std::localtime(&now));
  std::lock_guard<std::mutex> lock(g_mutex);
  const std::string& prefix = Prefix();
  std::fprintf(stderr, "%s %s%s%s] %s\n", LevelName(level_), stamp, prefix.empty() ? "" : " ",
               prefix.c_str(), stream_.str().c_str());
}
}  // namespace internal

ScopedTimer::ScopedTimer(std::string what)
    : what_(std::move(what)), start_(std::chrono::steady_clock::now()) {}
ScopedTimer::~ScopedTimer() { TF_LOG(Debug) << what_ << " took " << Seconds() * 1e3 << " ms"; }
double ScopedTimer::Seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

}  // namespace tuneforge

// TF_LOG: the log sink, levels and the line format.
#include "compiler/support/log.h"

#include <atomic>
#include <cstdio>
#include <ctime>
#include <mutex>

namespace tuneforge {
namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
std::atomic<bool> g_json{false};
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
const char* JsonLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kError: return "error";
    case LogLevel::kWarning: return "warning";
    case LogLevel::kInfo: return "info";
    case LogLevel::kDebug: return "debug";
  }
  return "unknown";
}

void AppendJsonString(const std::string& s, std::string* out) {
  out->push_back('"');
  for (unsigned char c : s) {
    switch (c) {
      case '"': *out += "\\\""; break;
      case '\\': *out += "\\\\"; break;
      case '\n': *out += "\\n"; break;
      case '\r': *out += "\\r"; break;
      case '\t': *out += "\\t"; break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          *out += buf;
        } else {
          out->push_back(static_cast<char>(c));  // UTF-8 passes through
        }
    }
  }
  out->push_back('"');
}
}  // namespace

std::string JsonLogLine(int64_t unix_ms, LogLevel level, const std::string& component,
                        const std::string& msg) {
  std::time_t secs = static_cast<std::time_t>(unix_ms / 1000);
  std::tm utc;
  gmtime_r(&secs, &utc);
  char stamp[40];
  size_t n = std::strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &utc);
  std::snprintf(stamp + n, sizeof(stamp) - n, ".%03dZ", static_cast<int>(unix_ms % 1000));
  std::string out = "{\"ts\":\"";
  out += stamp;
  out += "\",\"level\":\"";
  out += JsonLevelName(level);
  out += "\",\"component\":";
  AppendJsonString(component, &out);
  out += ",\"msg\":";
  AppendJsonString(msg, &out);
  out += "}";
  return out;
}

void SetLogFormat(LogFormat format) { g_json = format == LogFormat::kJson; }

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
  if (g_json) {
    int64_t ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                     std::chrono::system_clock::now().time_since_epoch())
                     .count();
    std::lock_guard<std::mutex> lock(g_mutex);
    std::string line = JsonLogLine(ms, level_, Prefix(), stream_.str());
    std::fprintf(stderr, "%s\n", line.c_str());
    return;
  }
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

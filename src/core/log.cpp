#include "core/log.hpp"

#include <unistd.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>

#include "antdt/error.hpp"

namespace antdt::log {

namespace {
Level level_from_env_or(Level fallback) {
  const char* text = std::getenv("ANTDT_LOG_LEVEL");
  if (!text || !*text) return fallback;
  try {
    return parse_level(text);
  } catch (const Error&) {
    std::fprintf(stderr, "antdt: ignoring ANTDT_LOG_LEVEL=%s (use error, warn, info, debug or trace)\n", text);
    return fallback;
  }
}

std::atomic<int>& level_storage() {
  static std::atomic<int> value{static_cast<int>(level_from_env_or(Level::info))};
  return value;
}
std::atomic<int> g_rank{-1};
std::atomic<int> g_size{0};
}  // namespace

Level parse_level(std::string_view text) {
  std::string lower;
  for (char c : text) lower.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  if (lower == "error" || lower == "0") return Level::error;
  if (lower == "warn" || lower == "warning" || lower == "1") return Level::warn;
  if (lower == "info" || lower == "2") return Level::info;
  if (lower == "debug" || lower == "3") return Level::debug;
  if (lower == "trace" || lower == "4") return Level::trace;
  throw UsageError("invalid log level '" + std::string(text) + "': use error, warn, info, debug or trace");
}

std::string_view level_name(Level level) noexcept {
  switch (level) {
    case Level::error:
      return "error";
    case Level::warn:
      return "warn";
    case Level::info:
      return "info";
    case Level::debug:
      return "debug";
    case Level::trace:
      return "trace";
  }
  return "?";
}

Level level() noexcept { return static_cast<Level>(level_storage().load(std::memory_order_relaxed)); }
void set_level(Level l) noexcept { level_storage().store(static_cast<int>(l), std::memory_order_relaxed); }
void init_from_env() { set_level(level_from_env_or(level())); }
void set_rank(int rank, int size) noexcept {
  g_rank = rank;
  g_size = size;
}

int rank() noexcept { return g_rank.load(); }

namespace detail {
Line::~Line() {
  try {
    const auto now = std::chrono::system_clock::now();
    const std::time_t secs = std::chrono::system_clock::to_time_t(now);
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
    std::tm tm{};
    localtime_r(&secs, &tm);
    char stamp[32];
    std::snprintf(stamp, sizeof stamp, "%02d:%02d:%02d.%03d", tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms));
    std::string out = "[antdt ";
    out += stamp;
    if (g_rank >= 0) out += " r" + std::to_string(g_rank.load()) + "/" + std::to_string(g_size.load());
    out += " ";
    out += level_name(level_);
    out += "] ";
    out += stream_.str();
    out += '\n';
    // One write per line so that ranks sharing a terminal do not interleave mid-line.
    [[maybe_unused]] auto n = ::write(STDERR_FILENO, out.data(), out.size());
  } catch (...) {
  }
}
}  // namespace detail

}  // namespace antdt::log

// Rank-tagged, levelled logging to stderr. The level comes from ANTDT_LOG_LEVEL
// (error, warn, info, debug, trace; default info) and can be changed at run time.
// Each line is written with one call, so lines of different ranks do not interleave:
//   [antdt 12:00:01.234 r2/4 warn] message
//
//   ANTDT_LOG(info) << "plan changed at step " << step;
#pragma once

#include <sstream>
#include <string>
#include <string_view>

namespace antdt::log {

enum class Level { error = 0, warn = 1, info = 2, debug = 3, trace = 4 };

// Parses "error|warn|info|debug|trace" (case-insensitive) or a digit 0-4.
// Throws UsageError on anything else.
[[nodiscard]] Level parse_level(std::string_view text);
[[nodiscard]] std::string_view level_name(Level level) noexcept;

[[nodiscard]] Level level() noexcept;
void set_level(Level level) noexcept;
// Re-reads ANTDT_LOG_LEVEL; an invalid value keeps the current level and warns once.
void init_from_env();
// Tags later lines with this rank (set by antdt::Session; -1 means untagged).
void set_rank(int rank, int size) noexcept;
// The rank set above (-1 when untagged).
[[nodiscard]] int rank() noexcept;
[[nodiscard]] inline bool enabled(Level l) noexcept { return static_cast<int>(l) <= static_cast<int>(level()); }

namespace detail {
class Line {
 public:
  explicit Line(Level level) : level_(level) {}
  Line(const Line&) = delete;
  Line& operator=(const Line&) = delete;
  ~Line();  // writes the line; never throws
  template <class T>
  Line& operator<<(const T& value) {
    stream_ << value;
    return *this;
  }

 private:
  Level level_;
  std::ostringstream stream_;
};
}  // namespace detail

}  // namespace antdt::log

#define ANTDT_LOG(lvl)                                    \
  if (!::antdt::log::enabled(::antdt::log::Level::lvl)) { \
  } else                                                  \
    ::antdt::log::detail::Line(::antdt::log::Level::lvl)

// Small text helpers shared by the option and launcher parsers (no MPI).
#pragma once

#include <string_view>
#include <vector>

namespace antdt::detail {

// `s` without leading and trailing spaces and tabs.
[[nodiscard]] inline std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// The comma-separated parts of `text`, each trimmed; "" gives one empty part, "a," two.
[[nodiscard]] inline std::vector<std::string_view> split_commas(std::string_view text) {
  std::vector<std::string_view> parts;
  for (;;) {
    const auto comma = text.find(',');
    parts.push_back(trim(text.substr(0, comma)));
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return parts;
}

}  // namespace antdt::detail

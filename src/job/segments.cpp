#include "job/segments.hpp"

#include <filesystem>
#include <fstream>
#include <system_error>

#include "antdt/error.hpp"
#include "core/option_names.hpp"
#include "job/paths.hpp"

namespace antdt::detail {

namespace fs = std::filesystem;

int begin_segment(const std::string& dir, bool resumed) {
  const std::string file = (fs::path(dir) / kSegmentsFile).string();
  int segment = 1;
  if (resumed) {
    int recorded = 0;
    if (std::ifstream in(file); !(in >> recorded) || recorded < 1) recorded = 1;
    segment = recorded + 1;
  }
  cli::write_file_atomically({option_name("checkpoint-dir"), file}, std::to_string(segment) + "\n");
  return segment;
}

namespace {

// `path` with `mark` before its extension ("summary-4.json" -> "summary-4<mark>.json"), or after
// the name when it has none ("metrics", ".hidden").
std::string marked(const std::string& path, const std::string& mark) {
  const fs::path p(path);
  if (!p.has_extension() || p.stem().empty()) return path + mark;
  return (p.parent_path() / (p.stem().string() + mark + p.extension().string())).string();
}

}  // namespace

std::string segment_path(const std::string& path, int segment) {
  return marked(path, ".seg" + std::to_string(segment));
}

std::string keep_earlier_output(const std::string& path, int earlier) {
  std::error_code ec;
  if (path.empty() || !fs::is_regular_file(fs::symlink_status(path, ec))) return {};
  const std::string mark = ".seg" + std::to_string(earlier);
  std::string kept = marked(path, mark);
  for (int n = 2; fs::exists(fs::symlink_status(kept, ec)); ++n) kept = marked(path, mark + "." + std::to_string(n));
  fs::rename(path, kept, ec);
  if (ec) throw WriteError("cannot keep the earlier segment's " + path + " as " + kept + ": " + ec.message());
  return kept;
}

}  // namespace antdt::detail

#include "job/restart_records.hpp"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <vector>

#include "antdt/error.hpp"
#include "core/log.hpp"

namespace antdt::detail {

namespace {

double wall_clock() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string in(const std::string& dir, const char* file) { return (std::filesystem::path(dir) / file).string(); }

// Appends each of `lines` the exclude file does not hold yet; false when that fails.
bool add_to_exclude(const std::string& exclude, const std::vector<std::string>& lines) {
  std::set<std::string> known;
  if (std::ifstream e(exclude); e) {
    for (std::string line; std::getline(e, line);)
      if (!line.empty()) known.insert(line);
  }
  std::ofstream e(exclude, std::ios::app);
  for (const auto& line : lines)
    if (known.insert(line).second) e << line << "\n";
  e.close();
  return static_cast<bool>(e);
}

}  // namespace

double note_relaunch(const std::string& dir) {
  const std::string pending = in(dir, kRestartPendingFile), history = in(dir, kRestartHistoryFile);
  if (std::ifstream p(pending); p) {
    double exited = 0.0;
    if (p >> exited && exited > 0.0) {
      std::ofstream h(history, std::ios::app);
      h << "relaunch " << std::max(0.0, wall_clock() - exited) << "\n";
      if (!h) throw FileError("cannot write " + history);
    }
    p.close();
    std::error_code ec;
    std::filesystem::remove(pending, ec);
  }
  std::vector<double> seconds;
  std::ifstream h(history);
  std::string word;
  for (double s = 0.0; h >> word >> s;) {
    if (word == "relaunch" && s >= 0.0) seconds.push_back(s);
  }
  if (seconds.empty()) return 0.0;
  std::nth_element(seconds.begin(), seconds.begin() + static_cast<std::ptrdiff_t>(seconds.size() / 2), seconds.end());
  return seconds[seconds.size() / 2];
}

void record_restart_exit(const std::string& dir, const RestartDecision& decision) {
  const std::string exclude = in(dir, kRestartExcludeFile), pending = in(dir, kRestartPendingFile);
  std::vector<std::string> lines = decision.nodes;
  if (lines.empty()) {
    for (const int r : decision.ranks) lines.push_back("rank " + std::to_string(r));
  }
  const bool excluded = add_to_exclude(exclude, lines);
  std::ofstream p(pending, std::ios::trunc);
  p.precision(17);
  p << wall_clock() << "\n";
  p.close();
  if (!excluded || !p)
    throw FileError("cannot write the restart records in " + dir + " (" + exclude + ", " + pending + ")");
}

void record_stalled_nodes(const std::string& dir, const StallError& stall) {
  if (dir.empty() || !stall.first_hand() || stall.nodes().empty()) return;
  const std::string exclude = in(dir, kRestartExcludeFile);
  if (!add_to_exclude(exclude, stall.nodes())) {
    ANTDT_LOG(warn) << "cannot write " << exclude << ": the stalled nodes are not left out of a resubmission";
  }
}

namespace {
std::mutex stall_dir_mutex;
std::string stall_dir;  // guarded by stall_dir_mutex
}  // namespace

void set_stall_record_dir(const std::string& dir) {
  const std::lock_guard lock(stall_dir_mutex);
  stall_dir = dir;
}

std::string stall_record_dir() {
  const std::lock_guard lock(stall_dir_mutex);
  return stall_dir;
}

}  // namespace antdt::detail

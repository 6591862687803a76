#include "antdt/report.hpp"
#include "session/report_writers.hpp"

#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <numeric>
#include <sstream>
#include <vector>

#include "antdt/error.hpp"
#include "checkpoint/fnv1a.hpp"
#include "core/log.hpp"
#include "core/step_record.hpp"
#include "job/paths.hpp"

namespace antdt {

namespace {

// Minimal JSON emission: numbers (non-finite ones as null), strings, arrays.
std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  std::ostringstream os;
  os << std::setprecision(10) << v;
  return os.str();
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

template <class T>
std::string json_array(const std::vector<T>& v) {
  std::string out = "[";
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i) out += ", ";
    if constexpr (std::is_floating_point_v<T>) {
      out += json_number(v[i]);
    } else {
      out += std::to_string(v[i]);
    }
  }
  return out + "]";
}

std::ofstream open_out(const std::string& path) {
  std::ofstream out(path, std::ios::trunc);
  if (!out) throw FileError("cannot write " + path + ": check that the directory exists and is writable");
  return out;
}

}  // namespace

void summarize_session(const Session& session, RunSummary& s) {
  if (session.rank() != 0) return;
  const RunTotals t = session.totals();
  s.ranks = session.size();
  s.nodes = session.node_names();
  s.steps = t.steps;
  s.segment_samples = t.samples;
  s.run_steps = session.step();
  s.samples = session.samples_committed();
  s.emulated = session.emulated();
  s.emulation = session.options().emulation.describe();
  s.emulated_speeds = session.options().emulation.speeds;
  if (s.emulated_speeds.size() == 1) s.emulated_speeds.assign(static_cast<std::size_t>(s.ranks), s.emulated_speeds[0]);
  s.policy = session.options().controller.policy;
  s.rank_throughput = session.rank_throughput();
  if (t.steps > 0) {
    const auto steps = static_cast<double>(t.steps);
    s.idle_fraction = t.idle_fraction_sum / steps;
    s.data_wait_fraction = t.data_wait_fraction_sum / (steps * s.ranks);
    s.reduce_fraction = t.reduce_fraction_sum / (steps * s.ranks);
    s.predicted_step_seconds = t.last_predicted_seconds;
  }
  s.measured_step_seconds = t.median_wall_seconds;
  if (s.wall_seconds > 0) s.throughput = static_cast<double>(t.samples) / s.wall_seconds;
  // Numerator and denominator from the same compute times (docs/controller.md, "Efficiency").
  s.ideal_throughput = t.ideal_seconds > 0 ? static_cast<double>(t.samples) / t.ideal_seconds : 0.0;
  s.efficiency = s.wall_seconds > 0 ? t.ideal_seconds / s.wall_seconds : 0.0;
  s.model_error_median = t.model_error_median;
  s.plans = session.plan_history();
  s.plan_changes = std::max<std::int64_t>(0, static_cast<std::int64_t>(s.plans.size()) - 1);
  s.sit_outs = session.sit_outs();
  s.rejoins = session.rejoins();
  s.final_split = session.plan().batch;
  s.assessments = session.assessments();
  s.coverage = session.coverage();
  s.restart = session.restart_decision();
  s.stopped = session.stopped();
  s.duplicated_samples = s.missing_samples = 0;
  for (const auto& c : s.coverage) {
    s.duplicated_samples += c.duplicated;
    s.missing_samples += c.missing;
  }
}

std::string summary_json(const RunSummary& s) {
  std::ostringstream o;
  o << "{\n";
  o << "  \"ranks\": " << s.ranks << ",\n";
  o << "  \"policy\": " << json_string(s.policy) << ",\n";
  o << "  \"backend\": " << json_string(s.backend) << ",\n";
  o << "  \"device\": " << json_string(s.device) << ",\n";
  o << "  \"reducer\": " << json_string(s.reducer) << ",\n";
  o << "  \"pinned_batches\": " << (s.pinned_batches ? "true" : "false") << ",\n";
  o << "  \"read_ahead\": " << (s.read_ahead ? "true" : "false") << ",\n";
  o << "  \"read_ahead_fraction\": " << json_number(s.read_ahead_fraction) << ",\n";
  o << "  \"reduce_overlap\": " << (s.reduce_overlap ? "true" : "false") << ",\n";
  o << "  \"job_id\": " << json_string(s.job_id) << ",\n";
  o << "  \"nodes\": [";
  for (std::size_t i = 0; i < s.nodes.size(); ++i) o << (i ? ", " : "") << json_string(s.nodes[i]);
  o << "],\n";
  o << "  \"model_layers\": " << json_array(s.model_layers) << ",\n";
  o << "  \"emulated\": " << (s.emulated ? "true" : "false") << ",\n";
  o << "  \"emulation\": " << json_string(s.emulation) << ",\n";
  o << "  \"emulated_speeds\": " << json_array(s.emulated_speeds) << ",\n";
  o << "  \"steps\": " << s.steps << ",\n";
  o << "  \"samples\": " << s.samples << ",\n";
  o << "  \"epochs_completed\": " << s.epochs_completed << ",\n";
  o << "  \"segment\": {\"index\": " << s.segment << ", \"first_step\": " << s.segment_first_step
    << ", \"steps\": " << s.steps << ", \"samples\": " << s.segment_samples
    << ", \"wall_seconds\": " << json_number(s.wall_seconds) << "},\n";
  o << "  \"run\": {\"steps\": " << s.run_steps << ", \"samples\": " << s.samples
    << ", \"epochs_completed\": " << s.epochs_completed << "},\n";
  o << "  \"wall_seconds\": " << json_number(s.wall_seconds) << ",\n";
  o << "  \"throughput\": " << json_number(s.throughput) << ",\n";
  o << "  \"rank_throughput\": " << json_array(s.rank_throughput) << ",\n";
  o << "  \"ideal_throughput\": " << json_number(s.ideal_throughput) << ",\n";
  o << "  \"efficiency\": " << json_number(s.efficiency) << ",\n";
  o << "  \"model_error_median\": " << json_number(s.model_error_median) << ",\n";
  o << "  \"idle_fraction\": " << json_number(s.idle_fraction) << ",\n";
  o << "  \"data_wait_fraction\": " << json_number(s.data_wait_fraction) << ",\n";
  o << "  \"reduce_fraction\": " << json_number(s.reduce_fraction) << ",\n";
  o << "  \"predicted_step_seconds\": " << json_number(s.predicted_step_seconds) << ",\n";
  o << "  \"measured_step_seconds\": " << json_number(s.measured_step_seconds) << ",\n";
  o << "  \"plan_changes\": " << s.plan_changes << ",\n";
  o << "  \"sit_outs\": " << s.sit_outs << ",\n";
  o << "  \"rejoins\": " << s.rejoins << ",\n";
  o << "  \"final_split\": " << json_array(s.final_split) << ",\n";
  o << "  \"duplicated_samples\": " << s.duplicated_samples << ",\n";
  o << "  \"missing_samples\": " << s.missing_samples << ",\n";
  o << "  \"non_finite_dropped\": " << s.non_finite_dropped << ",\n";
  o << "  \"eval_non_finite_dropped\": " << s.eval_non_finite_dropped << ",\n";
  o << "  \"final_loss\": " << json_number(s.final_loss) << ",\n";
  if (s.eval_loss) o << "  \"eval_loss\": " << json_number(*s.eval_loss) << ",\n";
  if (s.eval_accuracy) o << "  \"eval_accuracy\": " << json_number(*s.eval_accuracy) << ",\n";
  o << "  \"parameter_checksum\": " << json_string(s.parameter_checksum) << ",\n";
  o << "  \"stragglers\": [";
  bool first = true;
  for (std::size_t r = 0; r < s.assessments.size(); ++r) {
    const auto& a = s.assessments[r];
    if (a.kind == RankClass::normal || a.kind == RankClass::leader) continue;
    o << (first ? "" : ", ") << "{\"rank\": " << r << ", \"class\": " << json_string(rank_class_name(a.kind))
      << ", \"reason\": " << json_string(a.reason) << "}";
    first = false;
  }
  o << "],\n";
  o << "  \"plans\": [";
  for (std::size_t i = 0; i < s.plans.size(); ++i) {
    const auto& p = s.plans[i];
    o << (i ? ", " : "") << "{\"version\": " << p.version << ", \"effective_step\": " << p.effective_step
      << ", \"batch\": " << json_array(p.batch) << ", \"accumulation\": " << json_array(p.accumulation)
      << ", \"sitting\": " << json_array(p.sitting) << ", \"reason\": " << json_string(p.reason) << "}";
  }
  o << "],\n";
  o << "  \"stopped\": " << (s.stopped ? "true" : "false") << ", \"stopped_by\": " << json_string(s.stopped_by)
    << ",\n";
  if (s.restart) {
    const auto& r = *s.restart;
    std::vector<std::string> nodes = r.nodes;
    o << "  \"restart\": {\"step\": " << r.step << ", \"ranks\": " << json_array(r.ranks) << ", \"nodes\": [";
    for (std::size_t i = 0; i < nodes.size(); ++i) o << (i ? ", " : "") << json_string(nodes[i]);
    o << "], \"throughput_now\": " << json_number(r.x_now) << ", \"throughput_after\": " << json_number(r.x_after)
      << ", \"remaining_samples\": " << r.remaining_samples << ", \"gain_seconds\": " << json_number(r.gain_seconds)
      << ", \"cost_seconds\": " << json_number(r.cost_seconds) << ", \"reason\": " << json_string(r.reason) << "},\n";
  }
  o << "  \"epochs\": [";
  for (std::size_t i = 0; i < s.coverage.size(); ++i) {
    const auto& c = s.coverage[i];
    o << (i ? ", " : "") << "{\"epoch\": " << c.epoch << ", \"committed\": " << c.committed
      << ", \"missing\": " << c.missing << ", \"duplicated\": " << c.duplicated << "}";
  }
  o << "]\n}\n";
  return o.str();
}

std::string summary_text(const RunSummary& s) {
  std::ostringstream o;
  o << std::fixed;
  o << "=== antdt run report" << (s.job_id.empty() ? "" : " (job " + s.job_id + ")") << " ===\n";
  o << "ranks " << s.ranks << ", policy " << s.policy << ", backend " << s.backend
    << (s.device.empty() ? "" : " [" + s.device + "]") << (s.reducer.empty() ? "" : ", reduction via " + s.reducer)
    << (s.reduce_overlap ? " overlapped with backward" : "") << (s.pinned_batches ? ", batches page-locked" : "")
    << (s.read_ahead ? ", read ahead (" + std::to_string(static_cast<int>(std::lround(100 * s.read_ahead_fraction))) +
                           " % of rows ready)"
                     : "")
    << "\n";
  if (s.emulated) o << "EMULATED stragglers: " << s.emulation << "\n";
  if (s.segment > 1) {
    o << std::setprecision(2) << "segment " << s.segment << " of the run, resumed at step " << s.segment_first_step
      << ": steps " << s.steps << ", samples " << s.segment_samples << ", wall " << s.wall_seconds << " s\n";
    o << "the run, every segment: steps " << s.run_steps << ", samples " << s.samples << ", epochs completed "
      << s.epochs_completed << "\n";
  } else {
    o << std::setprecision(2) << "steps " << s.steps << ", samples " << s.samples << ", epochs completed "
      << s.epochs_completed << ", wall " << s.wall_seconds << " s\n";
  }
  o << std::setprecision(1) << "throughput " << s.throughput << " samples/s; ideal (sum x_i, step by step) "
    << s.ideal_throughput << std::setprecision(3) << "; efficiency " << s.efficiency << "; idle fraction "
    << s.idle_fraction << "\n";
  o << "per-rank standalone throughput x_i (samples/s):";
  for (std::size_t r = 0; r < s.rank_throughput.size(); ++r)
    o << " r" << r << "=" << std::setprecision(1) << s.rank_throughput[r];
  o << "\n";
  o << std::setprecision(4) << "step time: predicted " << s.predicted_step_seconds * 1e3 << " ms, measured median "
    << s.measured_step_seconds * 1e3 << " ms; cost model median error per step " << std::setprecision(3)
    << s.model_error_median << "\n";
  for (std::size_t r = 0; r < s.assessments.size(); ++r) {
    const auto& a = s.assessments[r];
    if (a.kind == RankClass::normal) continue;
    o << "rank " << r << ": " << rank_class_name(a.kind) << " (" << a.reason << ")\n";
  }
  o << "plans applied: " << s.plans.size() << "\n";
  if (s.sit_outs > 0 || s.rejoins > 0)
    o << "backup workers: " << s.sit_outs << " sit-outs, " << s.rejoins << " rejoins\n";
  for (const auto& p : s.plans) {
    o << "  v" << p.version << " from step " << p.effective_step << ": [";
    for (std::size_t i = 0; i < p.batch.size(); ++i) o << (i ? "," : "") << p.batch[i];
    o << "] " << p.reason << "\n";
  }
  if (s.restart) o << "STOPPED for a kill-restart: " << s.restart->reason << "\n";
  if (s.stopped) {
    o << "STOPPED by " << (s.stopped_by.empty() ? "another rank" : s.stopped_by)
      << " before the end of the run: continue it with --resume\n";
  }
  o << "samples duplicated " << s.duplicated_samples << ", missing " << s.missing_samples << " (over "
    << s.coverage.size() << " completed epochs)\n";
  if (s.non_finite_dropped > 0 || s.eval_non_finite_dropped > 0) {
    o << "samples left out for a NaN or infinite feature (--skip-non-finite): " << s.non_finite_dropped
      << " of the training set, " << s.eval_non_finite_dropped << " of the evaluation set\n";
  }
  o << std::setprecision(5) << "final training loss " << s.final_loss;
  if (s.eval_loss) o << ", eval loss " << *s.eval_loss;
  if (s.eval_accuracy) o << ", eval accuracy " << *s.eval_accuracy;
  o << "\n";
  return o.str();
}

MetricsFormat metrics_format_for(const std::string& path) {
  return path.size() >= 4 && path.compare(path.size() - 4, 4, ".csv") == 0 ? MetricsFormat::csv : MetricsFormat::jsonl;
}

namespace {

// Streams to a file, pushing what it has to the disk at least every kFlushSeconds.
class StreamedFile {
 public:
  static constexpr double kFlushSeconds = 2.0;
  explicit StreamedFile(const std::string& path) : path_(path), out_(open_out(path)) {}
  std::ofstream& out() { return out_; }
  // Called between whole rows (or events) only: each call marks a place where the file may end.
  void maybe_flush() {
    if (!out_) check();  // the buffer overflowed into a failed write
    if (const std::streamoff at = out_.tellp(); at >= 0) ends_.push_back(at);  // no flush: libstdc++ adds the buffer
    const auto now = std::chrono::steady_clock::now();
    if (std::chrono::duration<double>(now - last_flush_).count() < kFlushSeconds) return;
    flush();
    last_flush_ = now;
  }
  void flush() {
    out_.flush();
    check();
    whole_ = out_.tellp();
    ends_.clear();
  }
  void check() {
    if (out_) return;
    // A stream keeps no reason; errno holds one only where the failed call was the last to set it.
    const int reason = errno;
    const bool known = reason == ENOSPC || reason == EDQUOT || reason == EIO || reason == EFBIG || reason == EROFS;
    out_.close();
    // A full disk took part of the buffer: cut the file back to the last whole row it holds, so
    // that no torn line is left for a reader to trip on.
    std::error_code ec;
    const auto size = static_cast<std::streamoff>(std::filesystem::file_size(path_, ec));
    std::streamoff cut = whole_;
    for (const std::streamoff end : ends_) cut = !ec && end <= size ? std::max(cut, end) : cut;
    if (::truncate(path_.c_str(), static_cast<off_t>(cut)) != 0) {
      ANTDT_LOG(warn) << path_ << ": cannot cut the file back to its last whole line: " << std::strerror(errno);
    }
    cli::remove_if_empty(path_);
    throw WriteError("cannot write " + path_ + ": " + (known ? std::strerror(reason) : "is the disk full?"));
  }
  void close() {
    flush();
    out_.close();
    check();
  }

 private:
  std::string path_;
  std::ofstream out_;
  std::chrono::steady_clock::time_point last_flush_ = std::chrono::steady_clock::now();
  std::streamoff whole_ = 0;          // the file's size after its last good flush: whole rows
  std::vector<std::streamoff> ends_;  // where rows ended since then
};

}  // namespace

struct MetricsWriter::State {
  StreamedFile file;
  MetricsFormat format;
};

MetricsWriter::MetricsWriter(const std::string& path, MetricsFormat format)
    : state_(std::make_unique<State>(State{StreamedFile(path), format})) {
  auto& out = state_->file.out();
  out << std::setprecision(9);
  if (format == MetricsFormat::csv) {
    out << "step,rank,samples,micro_steps,compute_s,data_wait_s,reduce_s,idle_s,step_wall_s,plan_version,batch,"
           "predicted_step_s\n";
    state_->file.maybe_flush();
  }
}

MetricsWriter::~MetricsWriter() = default;

void MetricsWriter::write(const StepRecord& rec) {
  auto& out = state_->file.out();
  for (std::size_t r = 0; r < rec.ranks.size(); ++r) {
    const auto& st = rec.ranks[r];
    const auto b = r < rec.batch.size() ? rec.batch[r] : 0;
    if (state_->format == MetricsFormat::csv) {
      out << rec.step << ',' << r << ',' << st.samples << ',' << st.micro_steps << ',' << st.compute_seconds << ','
          << st.data_wait_seconds << ',' << st.reduce_seconds << ',' << st.idle_seconds << ',' << rec.wall_seconds
          << ',' << rec.plan_version << ',' << b << ',' << rec.predicted_seconds << '\n';
    } else {
      out << "{\"step\": " << rec.step << ", \"rank\": " << r << ", \"samples\": " << st.samples
          << ", \"micro_steps\": " << st.micro_steps << ", \"compute_s\": " << json_number(st.compute_seconds)
          << ", \"data_wait_s\": " << json_number(st.data_wait_seconds)
          << ", \"reduce_s\": " << json_number(st.reduce_seconds) << ", \"idle_s\": " << json_number(st.idle_seconds)
          << ", \"step_wall_s\": " << json_number(rec.wall_seconds) << ", \"plan_version\": " << rec.plan_version
          << ", \"batch\": " << b << ", \"predicted_step_s\": " << json_number(rec.predicted_seconds) << "}\n";
    }
  }
  state_->file.maybe_flush();
}

void MetricsWriter::close() { state_->file.close(); }

// Chrome trace event format, JSON array form: complete events ("X") with microsecond
// timestamps, one thread id per rank. Spans are laid out from rank 0's step start: data wait,
// compute, idle (waiting for the slowest rank), then the reduction.
struct TimelineWriter::State {
  StreamedFile file;
  bool first = true;
  std::size_t tracks = 0;  // ranks named so far
  std::int64_t plan_version = -1;

  void event(const std::string& text) {
    file.out() << (first ? "[\n" : ",\n") << text;
    first = false;
  }
};

TimelineWriter::TimelineWriter(const std::string& path)
    : state_(std::make_unique<State>(State{StreamedFile(path), true, 0, -1})) {}

TimelineWriter::~TimelineWriter() = default;

void TimelineWriter::write(const StepRecord& rec, const Plan& in_force) {
  State& st = *state_;
  for (; st.tracks < rec.ranks.size(); ++st.tracks) {
    st.event("{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": " + std::to_string(st.tracks) +
             ", \"args\": {\"name\": \"rank " + std::to_string(st.tracks) + "\"}}");
  }
  if (in_force.version != st.plan_version) {
    st.plan_version = in_force.version;
    std::string batch;
    for (auto b : in_force.batch) batch += (batch.empty() ? "" : ",") + std::to_string(b);
    st.event("{\"name\": \"plan v" + std::to_string(in_force.version) +
             "\", \"cat\": \"plan\", \"ph\": \"i\", \"s\": \"g\", \"pid\": 0, \"tid\": 0, \"ts\": " +
             json_number(rec.start_seconds * 1e6) +
             ", \"args\": {\"effective_step\": " + std::to_string(in_force.effective_step) + ", \"batch\": \"" + batch +
             "\", \"reason\": " + json_string(in_force.reason) + "}}");
  }
  for (std::size_t r = 0; r < rec.ranks.size(); ++r) {
    const auto& s = rec.ranks[r];
    const std::string args = "\"step\": " + std::to_string(rec.step) + ", \"samples\": " + std::to_string(s.samples);
    double t = rec.start_seconds;
    const auto span = [&](const char* name, double dur) {
      if (dur > 0) {
        st.event(std::string("{\"name\": \"") + name + "\", \"cat\": \"" + name +
                 "\", \"ph\": \"X\", \"pid\": 0, \"tid\": " + std::to_string(r) + ", \"ts\": " + json_number(t * 1e6) +
                 ", \"dur\": " + json_number(dur * 1e6) + ", \"args\": {" + args + "}}");
      }
      t += dur;
    };
    span("data", s.data_wait_seconds);
    span("compute", s.compute_seconds);
    span("idle", s.idle_seconds);
    span("reduce", s.reduce_seconds);
  }
  st.file.maybe_flush();
}

void TimelineWriter::close() {
  if (state_->first) state_->file.out() << "[";
  state_->file.out() << "\n]\n";
  state_->file.close();
}

std::string fnv1a_hex(const void* data, std::size_t bytes) {
  const std::uint64_t h = checkpoint::fnv1a64(std::span(static_cast<const std::byte*>(data), bytes));
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

}  // namespace antdt

#include "antdt/report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <numeric>
#include <sstream>

#include "antdt/error.hpp"
#include "checkpoint/fnv1a.hpp"

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

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  const auto mid = v.begin() + static_cast<long>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  return *mid;
}

}  // namespace

void summarize_session(const Session& session, RunSummary& s) {
  if (session.rank() != 0) return;
  const auto& records = session.records();
  s.ranks = session.size();
  s.steps = static_cast<std::int64_t>(records.size());
  s.samples = session.samples_committed();
  s.emulated = session.emulated();
  s.emulation = session.options().emulation.describe();
  s.emulated_speeds = session.options().emulation.speeds;
  if (s.emulated_speeds.size() == 1) s.emulated_speeds.assign(static_cast<std::size_t>(s.ranks), s.emulated_speeds[0]);
  s.policy = session.options().controller.policy;
  s.rank_throughput = session.rank_throughput();
  s.ideal_throughput = std::accumulate(s.rank_throughput.begin(), s.rank_throughput.end(), 0.0);
  std::int64_t step_samples = 0;
  double idle_sum = 0, data_frac_sum = 0, reduce_frac_sum = 0;
  std::vector<double> walls;
  for (const auto& r : records) {
    double max_t = 0, sum_t = 0;
    for (const auto& st : r.ranks) {
      step_samples += st.samples;
      max_t = std::max(max_t, st.compute_seconds);
      sum_t += st.compute_seconds;
      if (r.wall_seconds > 0) {
        data_frac_sum += st.data_wait_seconds / r.wall_seconds;
        reduce_frac_sum += st.reduce_seconds / r.wall_seconds;
      }
    }
    if (max_t > 0) idle_sum += 1.0 - (sum_t / static_cast<double>(r.ranks.size())) / max_t;
    walls.push_back(r.wall_seconds);
  }
  if (!records.empty()) {
    s.idle_fraction = idle_sum / static_cast<double>(records.size());
    s.data_wait_fraction = data_frac_sum / static_cast<double>(records.size() * static_cast<std::size_t>(s.ranks));
    s.reduce_fraction = reduce_frac_sum / static_cast<double>(records.size() * static_cast<std::size_t>(s.ranks));
    s.predicted_step_seconds = records.back().predicted_seconds;
  }
  s.measured_step_seconds = median(walls);
  if (s.wall_seconds > 0) s.throughput = static_cast<double>(step_samples) / s.wall_seconds;
  s.efficiency = s.ideal_throughput > 0 ? s.throughput / s.ideal_throughput : 0.0;
  s.plans = session.plan_history();
  s.plan_changes = std::max<std::int64_t>(0, static_cast<std::int64_t>(s.plans.size()) - 1);
  s.final_split = session.plan().batch;
  s.assessments = session.assessments();
  s.coverage = session.coverage();
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
  o << "  \"emulated\": " << (s.emulated ? "true" : "false") << ",\n";
  o << "  \"emulation\": " << json_string(s.emulation) << ",\n";
  o << "  \"emulated_speeds\": " << json_array(s.emulated_speeds) << ",\n";
  o << "  \"steps\": " << s.steps << ",\n";
  o << "  \"samples\": " << s.samples << ",\n";
  o << "  \"epochs_completed\": " << s.epochs_completed << ",\n";
  o << "  \"wall_seconds\": " << json_number(s.wall_seconds) << ",\n";
  o << "  \"throughput\": " << json_number(s.throughput) << ",\n";
  o << "  \"rank_throughput\": " << json_array(s.rank_throughput) << ",\n";
  o << "  \"ideal_throughput\": " << json_number(s.ideal_throughput) << ",\n";
  o << "  \"efficiency\": " << json_number(s.efficiency) << ",\n";
  o << "  \"idle_fraction\": " << json_number(s.idle_fraction) << ",\n";
  o << "  \"data_wait_fraction\": " << json_number(s.data_wait_fraction) << ",\n";
  o << "  \"reduce_fraction\": " << json_number(s.reduce_fraction) << ",\n";
  o << "  \"predicted_step_seconds\": " << json_number(s.predicted_step_seconds) << ",\n";
  o << "  \"measured_step_seconds\": " << json_number(s.measured_step_seconds) << ",\n";
  o << "  \"plan_changes\": " << s.plan_changes << ",\n";
  o << "  \"final_split\": " << json_array(s.final_split) << ",\n";
  o << "  \"duplicated_samples\": " << s.duplicated_samples << ",\n";
  o << "  \"missing_samples\": " << s.missing_samples << ",\n";
  o << "  \"final_loss\": " << json_number(s.final_loss) << ",\n";
  if (s.eval_loss) o << "  \"eval_loss\": " << json_number(*s.eval_loss) << ",\n";
  if (s.eval_accuracy) o << "  \"eval_accuracy\": " << json_number(*s.eval_accuracy) << ",\n";
  o << "  \"parameter_checksum\": " << json_string(s.parameter_checksum) << ",\n";
  o << "  \"stragglers\": [";
  bool first = true;
  for (std::size_t r = 0; r < s.assessments.size(); ++r) {
    const auto& a = s.assessments[r];
    if (a.kind != RankClass::transient_straggler && a.kind != RankClass::persistent_straggler) continue;
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
      << ", \"reason\": " << json_string(p.reason) << "}";
  }
  o << "],\n";
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
  o << std::setprecision(2) << "steps " << s.steps << ", samples " << s.samples << ", epochs completed "
    << s.epochs_completed << ", wall " << s.wall_seconds << " s\n";
  o << std::setprecision(1) << "throughput " << s.throughput << " samples/s; ideal (sum x_i) " << s.ideal_throughput
    << std::setprecision(3) << "; efficiency " << s.efficiency << "; idle fraction " << s.idle_fraction << "\n";
  o << "per-rank standalone throughput x_i (samples/s):";
  for (std::size_t r = 0; r < s.rank_throughput.size(); ++r)
    o << " r" << r << "=" << std::setprecision(1) << s.rank_throughput[r];
  o << "\n";
  o << std::setprecision(4) << "step time: predicted " << s.predicted_step_seconds * 1e3 << " ms, measured median "
    << s.measured_step_seconds * 1e3 << " ms\n";
  for (std::size_t r = 0; r < s.assessments.size(); ++r) {
    const auto& a = s.assessments[r];
    if (a.kind == RankClass::normal) continue;
    o << "rank " << r << ": " << rank_class_name(a.kind) << " (" << a.reason << ")\n";
  }
  o << "plans applied: " << s.plans.size() << "\n";
  for (const auto& p : s.plans) {
    o << "  v" << p.version << " from step " << p.effective_step << ": [";
    for (std::size_t i = 0; i < p.batch.size(); ++i) o << (i ? "," : "") << p.batch[i];
    o << "] " << p.reason << "\n";
  }
  o << "samples duplicated " << s.duplicated_samples << ", missing " << s.missing_samples << " (over "
    << s.coverage.size() << " completed epochs)\n";
  o << std::setprecision(5) << "final training loss " << s.final_loss;
  if (s.eval_accuracy) o << ", eval loss " << *s.eval_loss << ", eval accuracy " << *s.eval_accuracy;
  o << "\n";
  return o.str();
}

MetricsFormat metrics_format_for(const std::string& path) {
  return path.size() >= 4 && path.compare(path.size() - 4, 4, ".csv") == 0 ? MetricsFormat::csv : MetricsFormat::jsonl;
}

void write_metrics(const std::string& path, const std::vector<StepRecord>& records, MetricsFormat format) {
  auto out = open_out(path);
  out << std::setprecision(9);
  if (format == MetricsFormat::csv) {
    out << "step,rank,samples,micro_steps,compute_s,data_wait_s,reduce_s,idle_s,step_wall_s,plan_version,batch,"
           "predicted_step_s\n";
  }
  for (const auto& rec : records) {
    for (std::size_t r = 0; r < rec.ranks.size(); ++r) {
      const auto& st = rec.ranks[r];
      const auto b = r < rec.batch.size() ? rec.batch[r] : 0;
      if (format == MetricsFormat::csv) {
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
  }
  if (!out) throw FileError("error while writing " + path);
}

void write_timeline(const std::string& path, const std::vector<StepRecord>& records, const std::vector<Plan>& plans) {
  auto out = open_out(path);
  // Chrome trace event format: complete events ("X") with microsecond timestamps, one
  // thread id per rank. Spans are laid out from rank 0's step start: data wait, compute,
  // idle (waiting for the slowest rank), then the reduction.
  out << "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  bool first = true;
  auto event = [&](const std::string& name, const char* cat, std::size_t rank, double ts, double dur,
                   const std::string& args) {
    if (dur <= 0) return;
    out << (first ? "" : ",\n") << "{\"name\": " << json_string(name) << ", \"cat\": \"" << cat
        << "\", \"ph\": \"X\", \"pid\": 0, \"tid\": " << rank << ", \"ts\": " << json_number(ts * 1e6)
        << ", \"dur\": " << json_number(dur * 1e6) << ", \"args\": {" << args << "}}";
    first = false;
  };
  std::size_t world = 0;
  for (const auto& rec : records) {
    world = std::max(world, rec.ranks.size());
    for (std::size_t r = 0; r < rec.ranks.size(); ++r) {
      const auto& st = rec.ranks[r];
      const std::string args = "\"step\": " + std::to_string(rec.step) + ", \"samples\": " + std::to_string(st.samples);
      double t = rec.start_seconds;
      event("data", "data", r, t, st.data_wait_seconds, args);
      t += st.data_wait_seconds;
      event("compute", "compute", r, t, st.compute_seconds, args);
      t += st.compute_seconds;
      event("idle", "idle", r, t, st.idle_seconds, args);
      t += st.idle_seconds;
      event("reduce", "reduce", r, t, st.reduce_seconds, args);
    }
  }
  for (std::size_t r = 0; r < world; ++r) {
    out << (first ? "" : ",\n") << "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": " << r
        << ", \"args\": {\"name\": \"rank " << r << "\"}}";
    first = false;
  }
  for (const auto& p : plans) {
    double ts = 0;
    for (const auto& rec : records) {
      if (rec.step == p.effective_step) ts = rec.start_seconds;
    }
    std::string batch;
    for (auto b : p.batch) batch += (batch.empty() ? "" : ",") + std::to_string(b);
    out << (first ? "" : ",\n") << "{\"name\": \"plan v" << p.version
        << "\", \"cat\": \"plan\", \"ph\": \"i\", \"s\": \"g\", "
        << "\"pid\": 0, \"tid\": 0, \"ts\": " << json_number(ts * 1e6)
        << ", \"args\": {\"effective_step\": " << p.effective_step << ", \"batch\": \"" << batch
        << "\", \"reason\": " << json_string(p.reason) << "}}";
    first = false;
  }
  out << "\n]}\n";
  if (!out) throw FileError("error while writing " + path);
}

std::string fnv1a_hex(const void* data, std::size_t bytes) {
  const std::uint64_t h = checkpoint::fnv1a64(std::span(static_cast<const std::byte*>(data), bytes));
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

std::string expand_job_id(const std::string& path, const std::string& job_id) {
  std::string out;
  for (std::size_t i = 0; i < path.size(); ++i) {
    if (path[i] == '%' && i + 1 < path.size() && path[i + 1] == 'j') {
      out += job_id.empty() ? "local" : job_id;
      ++i;
    } else {
      out += path[i];
    }
  }
  return out;
}

}  // namespace antdt

// Writes the seed corpora of the fuzz targets: the serialize() of real objects after a few
// operations, and valid control messages and option strings, each with the parameter bytes
// its target reads first. Usage: antdt_fuzz_make_seeds OUT_DIR (creates OUT_DIR/<target>/).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "antdt/data.hpp"
#include "controller/controller.hpp"
#include "core/bytes.hpp"
#include "core/plan_codec.hpp"
#include "core/plan_rules.hpp"
#include "core/step_record.hpp"
#include "dds/dds.hpp"
#include "dds/wire.hpp"
#include "monitor/monitor.hpp"
#include "protocol/step_messages.hpp"

namespace {

namespace fs = std::filesystem;
using antdt::dds::Coordinator;
using antdt::dds::LedgerOptions;

fs::path g_out;

void write(const std::string& target, const std::string& name, const std::vector<std::byte>& prefix,
           const std::vector<std::byte>& body) {
  fs::create_directories(g_out / target);
  std::ofstream f(g_out / target / ("seed-" + name), std::ios::binary);
  f.write(reinterpret_cast<const char*>(prefix.data()), static_cast<std::streamsize>(prefix.size()));
  f.write(reinterpret_cast<const char*>(body.data()), static_cast<std::streamsize>(body.size()));
}

std::vector<std::byte> bytes_of(std::initializer_list<unsigned> values) {
  std::vector<std::byte> out;
  for (const unsigned v : values) out.push_back(static_cast<std::byte>(v));
  return out;
}

LedgerOptions ledger_options(std::int64_t n, std::int64_t shard, bool shuffle, bool within, std::int64_t max_epochs) {
  return LedgerOptions{.dataset_size = n,
                       .shard_size = shard,
                       .seed = 7,
                       .shuffle_shards = shuffle,
                       .shuffle_within_shard = within,
                       .max_epochs = max_epochs};
}

// A coordinator after `steps` steps of `batch`; the middle one leaves offsets [1, 3) undone when
// `carry` is set (carried into the next steps).
Coordinator run_coordinator(const LedgerOptions& o, int steps, std::int64_t batch, bool carry) {
  Coordinator c(o);
  for (int s = 0; s < steps && !c.ledger().exhausted(); ++s) {
    const bool leave = carry && s == steps / 2 && c.next_batch(batch).size() >= 3;
    (void)c.commit_step(batch,
                        leave ? std::vector<antdt::dds::BatchRange>{{1, 3}} : std::vector<antdt::dds::BatchRange>{});
  }
  return c;
}

void dds_seeds() {
  struct Case {
    const char* name;
    LedgerOptions options;
    int steps;
    std::int64_t batch;
    bool carry;
  };
  const std::vector<Case> cases = {
      {"fresh", ledger_options(10, 3, false, false, 0), 0, 2, false},
      {"small", ledger_options(37, 5, true, false, 0), 3, 8, false},
      {"within", ledger_options(100, 7, true, true, 3), 6, 15, true},
      {"epochs", ledger_options(20, 4, true, false, 0), 12, 6, false},
      // The last step left undone: its positions are still carried, two epochs open.
      {"carried", ledger_options(64, 8, false, false, 2), 1, 70, true},
      {"exhausted", ledger_options(9, 3, false, false, 1), 8, 3, false},
      // Shards of 256: the coordinator saves its coverage as runs (smaller than the bitmap).
      {"runs", ledger_options(4096, 256, true, false, 0), 3, 200, false},
  };
  for (const auto& k : cases) {
    const Coordinator c = run_coordinator(k.options, k.steps, k.batch, k.carry);
    write("dds_coordinator", k.name, bytes_of({15, 4}), c.serialize());
    write("dds_ledger", k.name, bytes_of({15, 4}), c.ledger().serialize());
  }
}

std::vector<antdt::RankStepStats> stats(int world, std::int64_t step) {
  std::vector<antdt::RankStepStats> s(static_cast<std::size_t>(world));
  for (int r = 0; r < world; ++r) {
    auto& x = s[static_cast<std::size_t>(r)];
    x.samples = 8;
    x.micro_steps = 2;
    x.compute_seconds = (r == world - 1 ? 0.3 : 0.1) + 0.001 * static_cast<double>(step % 3);
    x.data_wait_seconds = 0.002;
    x.reduce_seconds = 0.01;
  }
  return s;
}

void controller_seeds() {
  struct Case {
    const char* name;
    const char* policy;
    int world, window, steps;
    std::int64_t batch, cap;
  };
  const std::vector<Case> cases = {
      {"fresh", "dd", 2, 20, 0, 16, 8},  {"dd", "dd", 3, 4, 12, 24, 4},          {"static", "static", 2, 3, 5, 10, 3},
      {"one-rank", "dd", 1, 2, 4, 5, 5}, {"many-steps", "dd", 4, 3, 30, 64, 16},
  };
  for (const auto& k : cases) {
    antdt::ControllerOptions o;
    o.policy = k.policy;
    o.window = k.window;
    o.warmup_steps = 0;
    o.min_interval = 1;
    o.persistence = 2;
    const std::vector<std::int64_t> caps(static_cast<std::size_t>(k.world), k.cap);
    antdt::Controller c(o, antdt::equal_plan(k.batch, caps));
    antdt::Monitor m(k.world, k.window);
    for (int s = 0; s < k.steps; ++s) {
      (void)c.on_step(s, stats(k.world, s));
      m.record(s, stats(k.world, s));
    }
    const unsigned policy = std::string(k.policy) == "dd" ? 0 : 3;
    const auto window = static_cast<unsigned>(k.window - 1);
    // mode 0: everything from the checkpoint; 1: restored onto 3 ranks, cap 2; 2: B = 31.
    write("controller", k.name, bytes_of({policy, 0, window}), c.serialize());
    write("controller", std::string(k.name) + "-elastic", bytes_of({policy + 1, 2 + 8, window}), c.serialize());
    write("controller", std::string(k.name) + "-batch", bytes_of({policy + 2, 10, window}), c.serialize());
    write("monitor", k.name, {}, m.serialize());
  }
}

void wire_seeds() {
  antdt::detail::ByteWriter g;
  antdt::dds::encode_ranges(std::vector<antdt::dds::BatchRange>{{0, 3}, {5, 9}}, g);
  write("wire", "ranges", bytes_of({0}), g.take());
  antdt::detail::ByteWriter empty;
  antdt::dds::encode_ranges(std::vector<antdt::dds::BatchRange>{}, empty);
  write("wire", "ranges-empty", bytes_of({0}), empty.take());
  antdt::detail::ByteWriter p;
  auto plan = antdt::equal_plan(10, {4, 4, 3});
  plan.reason = "equal split";
  antdt::encode_plan(plan, p);
  write("wire", "plan", bytes_of({1}), p.take());

  antdt::protocol::StepReport report;
  report.step = 41;
  report.plan_version = 2;
  report.consumed = 12;
  report.compute_seconds = 0.01;
  report.stop = true;
  report.checkpoint = true;
  antdt::detail::ByteWriter r;
  antdt::protocol::encode(report, r);
  write("wire", "step-report", bytes_of({2}), r.take());
  antdt::protocol::StepReply reply;
  reply.ends_step = true;
  reply.samples = 16;
  reply.committed_total = 160;
  reply.next_position = 16;
  reply.undone = {{2, 5}};
  antdt::detail::ByteWriter y;
  antdt::protocol::encode(reply, y);
  write("wire", "step-reply", bytes_of({3}), y.take());
  antdt::protocol::StepReply refused;
  refused.status = antdt::protocol::ReplyStatus::usage_error;
  refused.error = "rank 1 is at step 3";
  antdt::detail::ByteWriter e;
  antdt::protocol::encode(refused, e);
  write("wire", "step-reply-error", bytes_of({3}), e.take());
  antdt::protocol::ResumeState resume;
  resume.step = 20;
  resume.shard_size = 10;
  resume.finished = true;
  resume.cursor = 210;
  resume.carried = {{3, 7}, {100, 101}};
  antdt::detail::ByteWriter s;
  antdt::protocol::encode(resume, s);
  write("wire", "resume-state", bytes_of({4}), s.take());
}

void text_seeds() {
  const std::vector<std::pair<unsigned, std::string>> texts = {
      {0, "1,1,1,0.33"}, {0, "2"},   {1, "0.1,3,5"}, {1, "1,1,1"}, {2, "32,64,10"}, {2, "4,2"},
      {3, "adam"},       {3, "sgd"}, {4, "auto"},    {4, "gpu"},   {5, "debug"},    {5, "3"},
  };
  int i = 0;
  for (const auto& [parser, text] : texts) {
    std::vector<std::byte> body(text.size());
    for (std::size_t k = 0; k < text.size(); ++k) body[k] = static_cast<std::byte>(text[k]);
    write("text", std::to_string(i++), bytes_of({parser}), body);
  }
}

// Small HDF5 data files as antdt-datagen writes them (write_hdf5), one with non-finite
// features, one with other data set names, one cut short, and a file that is not HDF5.
void hdf5_seeds() {
  namespace data = antdt::data;
  const fs::path dir = g_out / "hdf5_data";
  fs::create_directories(dir);
  auto set = [](std::int64_t n, std::int64_t dim, std::int32_t classes, bool non_finite) {
    std::vector<float> features(static_cast<std::size_t>(n * dim));
    std::vector<std::int32_t> labels(static_cast<std::size_t>(n));
    for (std::size_t i = 0; i < features.size(); ++i) features[i] = 0.25f * static_cast<float>(i % 9) - 1.0f;
    for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int32_t>(i % classes);
    if (non_finite) {
      features[1] = std::numeric_limits<float>::quiet_NaN();
      features.back() = std::numeric_limits<float>::infinity();
    }
    return data::InMemoryDataset(std::move(features), std::move(labels), dim, classes);
  };
  data::write_hdf5((dir / "seed-small").string(), set(5, 2, 2, false));
  data::write_hdf5((dir / "seed-one").string(), set(1, 1, 1, false));
  data::write_hdf5((dir / "seed-wide").string(), set(3, 40, 3, false));
  data::write_hdf5((dir / "seed-non-finite").string(), set(4, 2, 2, true));
  data::write_hdf5((dir / "seed-other-names").string(), set(4, 2, 2, false), data::Hdf5Names{"x", "y"});
  fs::copy_file(dir / "seed-small", dir / "seed-truncated", fs::copy_options::overwrite_existing);
  fs::resize_file(dir / "seed-truncated", fs::file_size(dir / "seed-small") / 2);
  std::ofstream(dir / "seed-not-hdf5", std::ios::binary) << "features,labels\n1.0,0\n";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  g_out = argv[1];
  dds_seeds();
  controller_seeds();
  wire_seeds();
  text_seeds();
  hdf5_seeds();
  return 0;
}

#include "agent/agent.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <numeric>

#ifdef __linux__
#include <fcntl.h>
#include <unistd.h>
#endif

#include "antdt/error.hpp"
#include "core/log.hpp"
#include "core/plan_rules.hpp"

namespace antdt::agent {

double SteadyClock::now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double SteadyClock::cpu() {
  timespec t{};
  if (::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t) != 0) return -1.0;
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

double thread_run_delay_seconds() {
#ifdef __linux__
  // Fields: time on the CPU, time waiting to run, timeslices (nanoseconds, nanoseconds, count).
  struct File {
    int fd = ::open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
    ~File() {
      if (fd >= 0) ::close(fd);
    }
  };
  thread_local File file;
  if (file.fd < 0) return 0.0;
  char text[96];
  const ssize_t n = ::pread(file.fd, text, sizeof text - 1, 0);
  if (n <= 0) return 0.0;
  text[n] = '\0';
  const char* p = text;
  while (*p != '\0' && *p != ' ') ++p;  // past the first field
  char* end = nullptr;
  const unsigned long long ns = std::strtoull(p, &end, 10);
  return end == p ? 0.0 : static_cast<double>(ns) * 1e-9;
#else
  return 0.0;
#endif
}

Agent::Agent(int rank, int world_size, const dds::LedgerOptions& ledger, const EmulationOptions& emulation,
             Clock& clock, const std::string& node, PoolOptions pool)
    : rank_(rank),
      world_(world_size),
      pool_(pool),
      clock_(&clock),
      map_(ledger),
      stream_(ledger.dataset_size, ledger.max_epochs),
      emulator_(emulation, rank, world_size, node) {
  if (pool.pooled) {
    if (const std::string why = backup_workers_problem(pool.backup_workers, world_size); !why.empty())
      throw UsageError(why);
    if (const std::string why = pool_chunking_problem(pool); !why.empty()) throw UsageError("pooled steps: " + why);
  }
}

void Agent::reset_plan(std::shared_ptr<const Plan> current, std::shared_ptr<const Plan> pending) {
  plans_.reset(std::move(current), std::move(pending));
}

void Agent::resume(const protocol::ResumeState& state, const dds::LedgerOptions& saved_order) {
  step_ = state.step;
  completed_epochs_ = state.completed_epochs;
  committed_total_ = state.committed_total;
  finished_ = state.finished;
  stopped_ = state.stopped;
  restart_ = state.restart;
  passed_step_ = -1;
  map_ = dds::ShardMap(saved_order);
  stream_ = dds::StepStream(saved_order.dataset_size, saved_order.max_epochs, state.cursor, state.carried);
  // Its timing starts afresh: a rank that rejoins after sitting out has not reported for
  // thousands of steps, so the CPU it used while it sat out is no interval of a step, and the
  // time a quota held it back before is no mean of its last reports (charged to each trial
  // step, it read a rank whose quota went as 30 times slower than it was).
  cpu_at_report_ = -1.0;
  held_at_report_ = -1.0;
  held_in_windows_ = 0.0;
  recent_held_.fill(0.0);
  held_count_ = 0;
  recent_rates_.clear();
}

StepWork Agent::begin() {
  if (in_step_) throw UsageError("Session::begin_step called twice without end_step");
  if (finished_) throw UsageError("Session::begin_step called after the session finished (check finished())");
  if (plans_.advance_to(step_)) {
    ANTDT_LOG(debug) << "step " << step_ << ": applying plan v" << plan().version;
  }
  const Plan& p = plan();
  StepWork w;
  w.step = step_;
  w.epoch = stream_.cursor() / stream_.dataset_size();  // where the data order stands: this step's epoch
  w.plan_version = p.version;
  if (p.pooled && !pool_.pooled) throw UsageError("a plan pools its steps, but this job has no pool (PoolOptions)");
  step_pooled_ = w.pooled = p.pooled;
  batch_ = stream_.next(p.global_batch);
  if (share_plan_ != plans_.current_ptr()) {  // a new plan: where this rank's slice begins (O(ranks), once)
    share_plan_ = plans_.current_ptr();
    share_begin_ = std::accumulate(p.batch.begin(), p.batch.begin() + rank_, std::int64_t{0});
  }
  share_ = dds::slice_at(share_begin_, p.batch[static_cast<std::size_t>(rank_)], batch_.size());
  if (step_pooled_) {
    samples_ = 0;
    micro_steps_ = 0;
    claimed_seen_ = 0;
    pool_empty_ = false;
    chunk_ = 0;
  } else {
    w.samples = map_.indices(batch_, share_.begin, share_.end);
    samples_ = static_cast<std::int64_t>(w.samples.size());
    w.micro_batches = p.micro_batches(rank_, samples_);
    micro_steps_ = static_cast<std::int32_t>(w.micro_batches.size());
  }
  in_step_ = true;
  compute_marked_ = false;
  data_wait_seconds_ = compute_seconds_ = reduce_seconds_ = 0.0;
  t_begin_ = t_data_ready_ = clock_->now();
  step_capped_ = capped_;
  step_quota_cores_ = quota_cores_;
  if (step_capped_) held_window_start_ = clock_->held();
  return w;
}

void Agent::mark_data_ready() {
  t_data_ready_ = clock_->now();
  data_wait_seconds_ = t_data_ready_ - t_begin_;
  if (step_capped_) held_window_start_ = clock_->held();
}

void Agent::mark_compute_done(double measured) {
  if (compute_marked_) return;
  if (step_pooled_) {
    chunk_done();  // a chunk the caller did not close
    // The chunks' compute was counted one by one; the rest of the step was data.
    data_wait_seconds_ = std::max(0.0, clock_->now() - t_begin_ - compute_seconds_);
    compute_marked_ = true;
    return;
  }
  const double took = measured >= 0.0 ? measured : clock_->now() - t_data_ready_;
  if (step_capped_) held_in_windows_ += clock_->held() - held_window_start_;
  const double target = emulator_.target_compute_seconds(took, samples_, step_);
  if (target > took) clock_->wait(target - took);
  compute_seconds_ = std::max(took, target);
  compute_marked_ = true;
}

double Agent::usual_rate() const {
  if (recent_rates_.empty()) return 0.0;
  std::vector<double> r = recent_rates_;
  std::nth_element(r.begin(), r.begin() + static_cast<std::ptrdiff_t>(r.size() / 2), r.end());
  return r[r.size() / 2];
}

// The chunk (guided self-scheduling): about b_i / chunks_per_share, at most m_i and what the
// rank still holds. As the pool drains it shrinks to this rank's part of what is left now
// (b_i / B of it, read from the pool just before: one more atomic), and further by how much
// slower than usual the rank runs this step: then a rank that is slowed now claims what it can
// finish by the time the others drain the pool, and the step's last chunks, which everyone
// waits for, stay short. The step's first chunk is at least first_chunk * b_i when that is
// set: one large GEMM for the bulk of the share, and only the tail in small claimed chunks.
std::vector<std::int64_t> Agent::next_chunk(StepPool* pool) {
  if (!in_step_ || !step_pooled_) throw UsageError("Session::next_chunk outside a pooled step (StepWork::pooled)");
  if (chunk_ > 0) chunk_done();
  const Plan& p = plan();
  const auto r = static_cast<std::size_t>(rank_);
  const std::int64_t share = std::max<std::int64_t>(1, p.batch[r]);
  // A counter pool: any part of the step's batch, as long as the pool lasts (a claim is an offset
  // into the batch, so any rank can train any of it). A deadline: its own slice of the batch,
  // whose rest is carried to the next step if it does not reach it.
  const std::int64_t may = (pool ? batch_.size() : share_.size()) - samples_;
  if (pool_empty_ || may <= 0) return {};
  const std::int64_t total = batch_.size();  // B, fewer only at the end of the data
  // A rank under a CPU quota claims its own share and no more from a counter pool, in chunks as
  // large as its cap allows, as under dd. Claiming greedily would keep it busy until the pool
  // drains, which uses up its quota, and the kernel then stops it for the rest of the period
  // while it holds a claimed chunk that every rank waits for (docs/nd.md, "A rank under a CPU
  // quota").
  if (pool && step_capped_) {
    const std::int64_t want = std::min({share - samples_, p.micro_batch_cap[r], may});
    if (want <= 0) {
      pool_empty_ = true;
      return {};
    }
    return claim_chunk(*pool, want, total);
  }
  const double usual = usual_rate();
  double pace = 1.0;  // this step's throughput over the usual one, at most 1
  if (usual > 0.0 && compute_seconds_ > 0.0)
    pace = std::min(1.0, static_cast<double>(samples_) / compute_seconds_ / usual);
  std::int64_t want = std::max<std::int64_t>(1, ceil_div(share, pool_.chunks_per_share));
  if (samples_ == 0) want = std::max(want, static_cast<std::int64_t>(pool_.first_chunk * static_cast<double>(share)));
  if (!pool) return next_chunk_by_deadline(std::min({want, p.micro_batch_cap[r], may}), usual);
  // Only worth a look when the rank may be slow, or the pool may be nearly drained.
  if (pace < 1.0 || claimed_seen_ > total / 2) claimed_seen_ = pool->claimed();
  const double left = static_cast<double>(std::max<std::int64_t>(1, total - claimed_seen_));
  const double mine_of_left = left * static_cast<double>(share) / static_cast<double>(p.global_batch) * pace;
  want = std::min(
      {want, std::max<std::int64_t>(1, static_cast<std::int64_t>(std::ceil(mine_of_left))), p.micro_batch_cap[r], may});
  return claim_chunk(*pool, want, total);
}

// Claims `want` samples of the step's `total` from the counter pool; none once it is drained.
std::vector<std::int64_t> Agent::claim_chunk(StepPool& pool, std::int64_t want, std::int64_t total) {
  std::int64_t before = 0;
  const std::int64_t got = pool.claim(want, total, before);
  claimed_seen_ = before + want;
  if (got == 0) {
    pool_empty_ = true;
    return {};
  }
  // The claim's count is an offset into the step's batch: the chunk is those positions.
  std::vector<std::int64_t> indices = map_.indices(batch_, before, before + got);
  chunk_ = got;
  samples_ += got;
  ++micro_steps_;
  t_chunk_ = clock_->now();
  if (step_capped_) held_window_start_ = clock_->held();
  return indices;
}

// The chunk is cut to what, at this rank's usual speed, still ends within the step's compute
// deadline (1 % of slack for rounding); none when not even one sample does.
std::vector<std::int64_t> Agent::next_chunk_by_deadline(std::int64_t want, double usual) {
  if (deadline_ > 0.0 && usual > 0.0) {
    const double fits = std::floor((1.01 * deadline_ - compute_seconds_) * usual);
    want = std::min(want, static_cast<std::int64_t>(std::max(0.0, fits)));
  }
  if (want < 1) {
    pool_empty_ = true;
    return {};
  }
  // The next positions of this rank's slice, in order: what it does not reach is the slice's tail.
  const std::int64_t from = share_.begin + samples_;
  std::vector<std::int64_t> indices = map_.indices(batch_, from, from + want);
  chunk_ = static_cast<std::int64_t>(indices.size());
  samples_ += chunk_;
  ++micro_steps_;
  t_chunk_ = clock_->now();
  if (step_capped_) held_window_start_ = clock_->held();
  return indices;
}

void Agent::chunk_done(double measured) {
  if (chunk_ == 0) return;
  const double took = measured >= 0.0 ? measured : clock_->now() - t_chunk_;
  if (step_capped_) held_in_windows_ += clock_->held() - held_window_start_;
  const double target = emulator_.target_compute_seconds(took, chunk_, step_);
  if (target > took) clock_->wait(target - took);
  compute_seconds_ += std::max(took, target);
  chunk_ = 0;
}

protocol::StepReport Agent::report(double loss_sum, std::int64_t correct) {
  if (!in_step_) throw UsageError("Session::end_step called without begin_step");
  mark_compute_done();
  if (step_pooled_ && samples_ > 0 && compute_seconds_ > 0.0) {
    recent_rates_.push_back(static_cast<double>(samples_) / compute_seconds_);
    if (recent_rates_.size() > kRateWindow) recent_rates_.erase(recent_rates_.begin());
  }
  // A capped rank: the time the kernel held it back since its last report, outside the compute
  // windows that count it already. A quota stops a rank in some steps and not in others: the
  // mean of the last few reports, not the step's own, gives the Monitor a steady rate, not a
  // noisy one. Uncapped steps add 0 (bit for bit: x + 0.0 is x).
  double outside = 0.0;
  const double cpu = step_capped_ && step_quota_cores_ > 0.0 && step_quota_cores_ < 1.0 ? clock_->cpu() : -1.0;
  const double held = step_capped_ && cpu < 0.0 ? clock_->held() : -1.0;
  if (cpu >= 0.0) {
    // Under a quota of less than a core, the rank's own time is modelled from its CPU use: the
    // CPU it used since its last report takes cpu / cores of wall time at its share, of which
    // the part spent outside its compute windows is its data, update and reduction, not its
    // compute. That is what it measures in steps where the kernel stops it; in steps where it
    // runs within its quota (the kernel grants the quota per period, so it is stopped in some
    // and not in others) its measured time looks fast, and samples given for that push it over
    // its quota. The CPU it uses is steady where the times it is held are not
    // (docs/controller.md, "A rank the kernel holds back").
    if (cpu_at_report_ >= 0.0) outside = (cpu - cpu_at_report_) * (1.0 / step_quota_cores_ - 1.0);
    compute_seconds_ = std::max(0.0, compute_seconds_ - held_in_windows_);
  } else if (held >= 0.0 && held_at_report_ >= 0.0) {
    outside = std::max(0.0, held - held_at_report_ - held_in_windows_);
  }
  cpu_at_report_ = cpu;  // < 0: the next report has no interval to start from
  held_at_report_ = held;
  held_in_windows_ = 0.0;
  recent_held_[held_count_++ % kHeldWindow] = outside;
  const std::size_t k = std::min<std::size_t>(held_count_, kHeldWindow);
  compute_seconds_ +=
      std::accumulate(recent_held_.begin(), recent_held_.begin() + static_cast<std::ptrdiff_t>(k), 0.0) /
      static_cast<double>(k);
  protocol::StepReport r;
  r.step = step_;
  r.plan_version = plan().version;
  r.consumed = samples_;
  r.correct = correct;
  r.compute_seconds = compute_seconds_;
  r.data_wait_seconds = data_wait_seconds_;
  r.reduce_seconds = reduce_seconds_;
  r.loss_sum = loss_sum;
  r.micro_steps = micro_steps_;
  r.stop = stop_asked_ != 0;
  r.checkpoint = checkpoint_asked_;
  checkpoint_asked_ = false;
  return r;
}

StepSummary Agent::apply(const protocol::StepReply& reply, std::shared_ptr<const Plan> plan) {
  switch (reply.status) {
    case protocol::ReplyStatus::ok:
      break;
    case protocol::ReplyStatus::usage_error:
      throw UsageError(reply.error);
    case protocol::ReplyStatus::error:
      throw Error(reply.error);
  }
  // A pipelined reply: for the step this rank passed (pass()), which it ran as a whole batch.
  const bool late = reply.ends_step && passed_step_ >= 0 && reply.step == passed_step_;
  if (reply.ends_step && !late && !(in_step_ && reply.step == step_)) {
    throw Error("step reply: it ends step " + std::to_string(reply.step) + " but rank " + std::to_string(rank_) +
                " is at step " + std::to_string(step_) + (in_step_ ? "" : " between steps") +
                " (every rank must run the same antdt)");
  }
  StepSummary s;
  if (reply.plan_follows) {
    if (!plan) throw Error("step reply: a plan was announced but none came with it");
    plans_.issue(std::move(plan));
    s.plan_changed = true;
  }
  if (late && !reply.undone.empty()) throw Error("step reply: a pipelined step left part of its batch undone");
  if (reply.ends_step && !late) stream_.advance(batch_, reply.undone);
  const std::int64_t cursor = late ? passed_cursor_ : stream_.cursor();
  if (cursor != reply.next_position) {
    throw Error("step reply: rank " + std::to_string(rank_) + " has the data order at position " +
                std::to_string(cursor) + " but rank 0 has it at " + std::to_string(reply.next_position) +
                " (every rank must run the same antdt with the same data options)");
  }
  completed_epochs_ = reply.completed_epochs;
  committed_total_ = reply.committed_total;
  if (!late) finished_ = reply.finished;
  restart_ = restart_ || reply.restart;
  stopped_ = stopped_ || reply.stopped;
  deadline_ = reply.deadline_seconds;
  started_ = true;
  s.step = reply.ends_step ? reply.step : step_;
  s.totals_step = reply.ends_step ? reply.step : -1;
  s.samples = reply.samples;
  s.loss_sum = reply.loss_sum;
  s.correct = reply.correct;
  s.max_compute_seconds = reply.max_compute_seconds;
  s.checkpoint_requested = reply.checkpoint;
  s.finished = finished_;
  s.stopped = stopped_;
  s.restart = restart_;
  s.completed_epochs = completed_epochs_;
  if (late) {
    passed_step_ = -1;
  } else if (reply.ends_step) {
    in_step_ = false;
    ++step_;
  }
  return s;
}

void Agent::pass() {
  if (!in_step_) throw UsageError("Session::end_step called without begin_step");
  if (step_pooled_) throw Error("step " + std::to_string(step_) + " is pooled: it cannot end before rank 0's reply");
  if (passed_step_ >= 0) {
    throw Error("rank 0's reply to step " + std::to_string(passed_step_) + " did not come one step late, as due");
  }
  stream_.advance(batch_);
  passed_step_ = step_;
  passed_cursor_ = stream_.cursor();
  in_step_ = false;
  ++step_;
}

double Agent::probe(const std::function<void(std::int64_t)>& micro_step, std::int64_t n, int repetitions) {
  micro_step(n);  // warm-up: first-touch allocations, cuBLAS handles
  std::vector<double> times;
  double total = 0.0;
  for (int i = 0; i < repetitions || (total < kProbeMinSeconds && i < kProbeMaxRepetitions); ++i) {
    const double t0 = clock_->now();
    micro_step(n);
    const double measured = clock_->now() - t0;
    // Emulated speeds apply to the probe as to every step (without transients: step -1).
    const double target = emulator_.target_compute_seconds(measured, n, -1);
    if (target > measured) clock_->wait(target - measured);
    times.push_back(std::max(target, measured));
    total += times.back();
  }
  std::nth_element(times.begin(), times.begin() + static_cast<long>(times.size() / 2), times.end());
  return static_cast<double>(n) / std::max(1e-12, times[times.size() / 2]);
}

std::vector<std::int64_t> Agent::next_samples() const {
  if (finished_ || !plans_.has_plan()) return {};
  const Plan& p = plans_.at(in_step_ ? step_ + 1 : step_);
  if (p.pooled) return {};  // a pooled step's samples are claimed as it goes
  dds::StepStream after = stream_;
  if (in_step_ && batch_.size() > 0) after.advance(batch_);  // as if the open step trains all of its batch
  if (after.exhausted()) return {};
  const dds::StepBatch next = after.next(p.global_batch);
  const dds::BatchRange mine = dds::share_of(p.batch, rank_, next.size());
  return map_.indices(next, mine.begin, mine.end);
}

}  // namespace antdt::agent

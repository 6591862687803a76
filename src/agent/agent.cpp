#include "agent/agent.hpp"

#include <algorithm>
#include <chrono>

#include "antdt/error.hpp"
#include "antdt/log.hpp"

namespace antdt::agent {

double SteadyClock::now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

Agent::Agent(int rank, int world_size, const dds::LedgerOptions& ledger, const EmulationOptions& emulation,
             Clock& clock, const std::string& node)
    : rank_(rank), clock_(&clock), client_(ledger), emulator_(emulation, rank, world_size, node) {}

void Agent::reset_plan(std::shared_ptr<const Plan> current, std::shared_ptr<const Plan> pending) {
  plans_.reset(std::move(current), std::move(pending));
}

void Agent::resume(const protocol::ResumeState& state, const dds::LedgerOptions& saved_order) {
  step_ = state.step;
  completed_epochs_ = state.completed_epochs;
  committed_total_ = state.committed_total;
  finished_ = state.finished;
  client_ = dds::Client(saved_order);
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
  w.epoch = completed_epochs_;
  w.plan_version = p.version;
  w.samples = client_.take(p.batch[static_cast<std::size_t>(rank_)]);
  samples_ = static_cast<std::int64_t>(w.samples.size());
  w.micro_batches = p.micro_batches(rank_, samples_);
  micro_steps_ = static_cast<std::int32_t>(w.micro_batches.size());
  in_step_ = true;
  compute_marked_ = false;
  data_wait_seconds_ = compute_seconds_ = reduce_seconds_ = 0.0;
  t_begin_ = t_data_ready_ = clock_->now();
  return w;
}

void Agent::mark_data_ready() {
  t_data_ready_ = clock_->now();
  data_wait_seconds_ = t_data_ready_ - t_begin_;
}

void Agent::mark_compute_done(double measured) {
  if (compute_marked_) return;
  const double took = measured >= 0.0 ? measured : clock_->now() - t_data_ready_;
  const double target = emulator_.target_compute_seconds(took, samples_, step_);
  if (target > took) clock_->wait(target - took);
  compute_seconds_ = std::max(took, target);
  compute_marked_ = true;
}

protocol::StepReport Agent::report(double loss_sum, std::int64_t correct) {
  if (!in_step_) throw UsageError("Session::end_step called without begin_step");
  mark_compute_done();
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
  StepSummary s;
  if (reply.plan_follows) {
    if (!plan) throw Error("step reply: a plan was announced but none came with it");
    plans_.issue(std::move(plan));
    s.plan_changed = true;
  }
  client_.add(reply.grants, rank_);
  completed_epochs_ = reply.completed_epochs;
  committed_total_ = reply.committed_total;
  finished_ = reply.finished;
  started_ = true;
  s.step = step_;
  s.samples = reply.samples;
  s.loss_sum = reply.loss_sum;
  s.correct = reply.correct;
  s.max_compute_seconds = reply.max_compute_seconds;
  s.completed_epochs = completed_epochs_;
  if (reply.ends_step) {
    in_step_ = false;
    ++step_;
  }
  return s;
}

double Agent::probe(const std::function<void(std::int64_t)>& micro_step, std::int64_t n, int repetitions) {
  micro_step(n);  // warm-up: first-touch allocations, cuBLAS handles
  std::vector<double> times;
  for (int i = 0; i < repetitions; ++i) {
    const double t0 = clock_->now();
    micro_step(n);
    const double measured = clock_->now() - t0;
    // Emulated speeds apply to the probe as to every step (without transients: step -1).
    const double target = emulator_.target_compute_seconds(measured, n, -1);
    if (target > measured) clock_->wait(target - measured);
    times.push_back(std::max(target, measured));
  }
  std::nth_element(times.begin(), times.begin() + static_cast<long>(times.size() / 2), times.end());
  return static_cast<double>(n) / std::max(1e-12, times[times.size() / 2]);
}

std::vector<std::int64_t> Agent::next_samples() const {
  if (finished_ || !plans_.has_plan()) return {};
  const Plan& p = plans_.at(in_step_ ? step_ + 1 : step_);
  const auto r = static_cast<std::size_t>(rank_);
  return r < p.batch.size() ? client_.peek(p.batch[r]) : std::vector<std::int64_t>{};
}

}  // namespace antdt::agent

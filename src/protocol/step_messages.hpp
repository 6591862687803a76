// Private: the two messages of the step protocol (docs/protocol.md) and their one codec.
//
//   StepReport  every rank -> rank 0, once per step: what it consumed and measured.
//   StepReply   rank 0 -> each rank, once per step: the step's totals, where the data order
//               stands, and the part of the step left undone (rare). A new plan, when there is
//               one, goes to every rank beside the replies (it is rare too).
//
// Each message lists its fields once, in wire order (`fields`); encode and decode both walk
// that list, so the two cannot drift. Every message starts with a version byte. Decoders
// throw antdt::Error on a short, malformed or foreign message and never read past the input.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/bytes.hpp"
#include "dds/dds.hpp"

namespace antdt::protocol {

struct StepReport {
  static constexpr std::uint8_t kVersion = 2;  // 2: stop, checkpoint

  std::int64_t step = 0;          // the step it reports; must be rank 0's
  std::int64_t plan_version = 0;  // the plan it ran under; must be rank 0's plan in force
  std::int64_t consumed = 0;      // samples trained on (and reduced) this step
  std::int64_t correct = 0;
  double compute_seconds = 0.0;  // timed before any synchronisation (invariant 6)
  double data_wait_seconds = 0.0;
  double reduce_seconds = 0.0;
  double loss_sum = 0.0;
  std::int32_t micro_steps = 0;
  bool stop = false;        // this rank was asked to stop (a signal): the run should end after this step
  bool checkpoint = false;  // this rank asks every rank to checkpoint after this step (a timer, say)

  template <class Self, class F>
  static void fields(Self& m, F&& f) {
    f(m.step), f(m.plan_version), f(m.consumed), f(m.correct), f(m.compute_seconds), f(m.data_wait_seconds),
        f(m.reduce_seconds), f(m.loss_sum), f(m.micro_steps), f(m.stop), f(m.checkpoint);
  }
};

// Why rank 0 rejected a step (or a start); the rank then throws the matching antdt error.
enum class ReplyStatus : std::uint8_t { ok = 0, usage_error = 1, error = 2 };

struct StepReply {
  static constexpr std::uint8_t kVersion = 6;  // 2: restart; 3: deadline; 4: stopped; 5: the stream; 6: the lag

  ReplyStatus status = ReplyStatus::ok;
  std::string error;       // one line, when status != ok
  bool ends_step = false;  // false: the reply to the first exchange (no step ended)
  std::int64_t step = 0;   // the step it ends (ends_step), or the first step (the first exchange)
  // Reply lag 1 (docs/protocol.md): rank 0 settles the next step, i.e. answers it in the same
  // round as its report, because the run ends after it (a limit, a kill-restart decision).
  bool settle_next = false;
  bool finished = false;      // no step follows (max_steps reached or every epoch committed)
  bool plan_follows = false;  // a new plan comes with this reply (effective at its effective_step)
  bool restart = false;       // kill-restart: no step follows; checkpoint, then exit for resubmission
  bool stopped = false;       // some rank asked to stop: no step follows; checkpoint, then exit
  bool checkpoint = false;    // some rank asked for a checkpoint: every rank takes one after this step
  // Pooled steps by deadline (PoolMechanism::deadline): the compute-seconds each rank may spend
  // on the next step's chunks; 0: none yet (each rank does its share).
  double deadline_seconds = 0.0;
  std::int64_t completed_epochs = 0;
  std::int64_t committed_total = 0;
  // The step's totals over all ranks: the same in every rank's reply.
  std::int64_t samples = 0;
  std::int64_t correct = 0;
  double loss_sum = 0.0;
  double max_compute_seconds = 0.0;
  // The stream position the next step's batch starts from (after any carried ranges), as
  // rank 0's ledger has it: every rank's own StepStream must agree.
  std::int64_t next_position = 0;
  // The offsets of this step's batch that were not trained (a deadline pool's slowed ranks),
  // ascending: every rank carries them to the next steps, as the ledger does. Usually empty.
  std::vector<dds::BatchRange> undone;

  template <class Self, class F>
  static void fields(Self& m, F&& f) {
    f(m.status), f(m.error), f(m.ends_step), f(m.step), f(m.settle_next), f(m.finished), f(m.plan_follows),
        f(m.restart), f(m.stopped), f(m.checkpoint), f(m.deadline_seconds), f(m.completed_epochs), f(m.committed_total),
        f(m.samples), f(m.correct), f(m.loss_sum), f(m.max_compute_seconds), f(m.next_position), f(m.undone);
  }
};

// Rank 0 -> every rank, once, after Session::restore: where the run resumes. The plans in
// force and pending follow it (plan codec; an empty message for no pending plan).
struct ResumeState {
  static constexpr std::uint8_t kVersion = 3;  // 2: the stream; 3: stopped, restart (a rejoin)

  ReplyStatus status = ReplyStatus::ok;
  std::string error;  // why rank 0 could not restore (every rank throws CheckpointError)
  std::int64_t step = 0;
  std::int64_t completed_epochs = 0;
  std::int64_t committed_total = 0;
  // The checkpoint's sample order, which wins over this run's options.
  std::int64_t shard_size = 0;
  bool shuffle_shards = true;
  bool shuffle_within_shard = true;
  bool finished = false;  // a run resumed past its limits has nothing to do
  // Where the stream stands: the next batch starts with the carried ranges, then the cursor.
  std::int64_t cursor = 0;
  std::vector<dds::StreamRange> carried;
  // A rank that rejoins at the end of a run (it sat out, docs/nd.md) learns how it ended.
  bool stopped = false;
  bool restart = false;

  template <class Self, class F>
  static void fields(Self& m, F&& f) {
    f(m.status), f(m.error), f(m.step), f(m.completed_epochs), f(m.committed_total), f(m.shard_size),
        f(m.shuffle_shards), f(m.shuffle_within_shard), f(m.finished), f(m.cursor), f(m.carried), f(m.stopped),
        f(m.restart);
  }
};

void encode(const StepReport& message, detail::ByteWriter& out);
void encode(const StepReply& message, detail::ByteWriter& out);
void encode(const ResumeState& message, detail::ByteWriter& out);
[[nodiscard]] StepReport decode_report(detail::ByteReader& in);
[[nodiscard]] StepReply decode_reply(detail::ByteReader& in);
[[nodiscard]] ResumeState decode_resume(detail::ByteReader& in);

// Bytes of the encoded message, without encoding it (the simulator counts control traffic so).
[[nodiscard]] std::size_t encoded_size(const StepReport& message);
[[nodiscard]] std::size_t encoded_size(const StepReply& message);

}  // namespace antdt::protocol

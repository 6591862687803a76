// Private: every wait of a job guarded, in every phase (docs/errors.md, "A stalled rank").
//
// A blocking MPI call waits for its slowest peer for good: if that peer has stopped (SIGSTOP,
// a hung file system, swapping), the others hang, spinning a core each. So antdt makes every
// collective non-blocking and waits for it here:
//  - between tests the waiting rank sleeps (after a short spin), so a long wait costs it a few
//    hundred wake-ups a second, not a core, and a rank under a CPU quota keeps its share for
//    its compute;
//  - while it waits, it serves rank 0's words on the Guard's own communicator: it answers
//    "where are you?" with its phase and step, and a "stop" ends the wait with the error it
//    carries, the same on every rank;
//  - rank 0 is the judge: once any of its waits has lasted the step timeout, it asks every rank
//    where it is. A rank that does not answer within the grace has stalled, and is named with
//    its node (never a healthy one: a healthy rank answers from whatever wait it is in). If
//    every rank answers but they are in different phases or steps, the program made different
//    calls on different ranks: a usage error, named as such. Rank 0 then tells every rank to
//    stop, and every live rank throws the same error (StallError: exit 5; UsageError: exit 2).
//  - a rank whose wait has lasted the timeout plus the grace asks rank 0 whether it is alive;
//    an answer extends its patience (rank 0 judges, at its own deadline); silence for another
//    grace means rank 0 itself stalled, and the rank names it.
// So a stalled rank ends the job within the timeout plus the grace (rank 0 stalled: plus two
// graces), with one exit code, whatever phase it stalled in.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "core/error_kind.hpp"

namespace antdt::detail {

// What a rank is doing while it waits, for the messages and for rank 0's diagnosis.
enum class Phase : std::uint8_t {
  startup = 0,
  probe = 1,
  step = 2,       // between its antdt calls: computing
  reduction = 3,  // the gradient reduction
  control = 4,    // the step's control exchange (reports and replies)
  evaluation = 5,
  checkpoint = 6,
  resume = 7,
  end = 8,  // the end of the run (final checkpoint, report)
  // Waiting to rejoin (a backup worker that sits out, docs/nd.md): not in the others' steps, so
  // rank 0's judge leaves it out of its comparison of where the ranks are.
  sitting_out = 9,
  regroup = 10,  // the ranks that take part in the steps change (a rank sits out or rejoins)
};
[[nodiscard]] const char* phase_name(Phase phase) noexcept;

// Seconds on the steady clock (any fixed origin).
[[nodiscard]] double steady_seconds();

// How long a rank waits beyond the timeout for rank 0's word, and how long rank 0 waits for
// the answers to its question: rank 0 should judge first, since only it can name the ranks
// that are missing.
[[nodiscard]] double grace_seconds(double timeout);

// For the tests of every phase (tests/apps/test_phases.py): ANTDT_TEST_STALL=PHASE:RANK[:STEP]
// makes RANK stop itself (SIGSTOP) as it enters PHASE (a phase_name key: startup, probe, step,
// reduction, control, evaluation, checkpoint, resume, end) at or after STEP, once. The Guard
// calls it where phases begin and inside its waits; the Job where rank 0 writes a checkpoint.
void stall_point(Phase phase, std::int64_t step, int rank);

class Guard {
 public:
  // Collective over `comm`: the Guard's own communicator is made with a non-blocking
  // MPI_Comm_idup, waited for with the timeout (a rank that never arrives is named through
  // the user's communicator, point to point, the only time antdt touches it); then rank 0
  // learns every rank's node, and every rank rank 0's, for the messages. `node` is this
  // rank's (LaunchInfo::node_name). timeout 0: waits are unguarded (they block, as MPI's own
  // calls do). `spin_seconds`: how long a wait polls before it naps
  // (SessionOptions::wait_spin_seconds).
  Guard(MPI_Comm comm, double timeout_seconds, double spin_seconds, const std::string& node);
  ~Guard();
  Guard(const Guard&) = delete;
  Guard& operator=(const Guard&) = delete;

  // Waits until every request is complete, guarded as above. Throws the error every rank
  // throws (StallError, UsageError) when a rank has stalled or the ranks disagree.
  void wait(std::span<MPI_Request> requests);
  // Between waits (every antdt call makes it): answers rank 0's question, obeys its stop.
  void serve();
  // This rank leaves before the run is over (its program returned, exited or broke out of its
  // loop, and destroyed its Job): it tells rank 0, which stops every rank at its next wait with
  // an error that names this rank as having left, not as stalled (no node is to blame); rank 0
  // itself tells every rank. Local and quick: it waits for no one.
  void leave();
  // A process that ends without having made a Guard (its program returned or failed before it
  // built its Job or Session), while the other ranks may be waiting at their Job's start-up: it
  // says so on `comm`, where their Guards listen while they are made, so that they stop at once
  // with an error that names this rank as having ended, not as stalled, and blames no node.
  // Another rank tells rank 0, which stops every rank; rank 0 tells every rank. Local and quick;
  // where no rank builds a Job (a program that never meant to), the words are never received.
  static void leave_before_start(MPI_Comm comm);
  // Rank 0 ending with an error: tells `ranks` (those that sit out, which hear of the error no
  // other way; the others share it already) to stop with the error `why` of `kind`, so that they
  // exit with its code. Local and quick.
  void tell_stop(const std::vector<std::int32_t>& ranks, const std::string& why, ErrorKind kind = ErrorKind::runtime);

  // What this rank is doing, for the messages and the answers; a Scope sets it for a block.
  class Scope {
   public:
    Scope(Guard* guard, Phase phase, std::int64_t step);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Guard* guard_;
    Phase phase_;
    std::int64_t step_;
  };
  void set_step(std::int64_t step) noexcept { step_ = step; }
  void set_phase(Phase phase) {
    phase_ = phase;
    stall_point(phase_, step_, rank_);
  }
  [[nodiscard]] Phase phase() const noexcept { return phase_; }
  [[nodiscard]] std::int64_t step() const noexcept { return step_; }
  [[nodiscard]] double timeout_seconds() const noexcept { return timeout_; }
  [[nodiscard]] MPI_Comm comm() const noexcept { return words_; }
  // How often waits slept and how long they waited, this rank (benchmarks, tests).
  [[nodiscard]] std::uint64_t naps() const noexcept { return naps_; }
  // Whether a cgroup CPU quota binds this process (cpu_quota_binds), as of its last guarded wait
  // (read again once a second). Its waits then nap at once: polling would spend the quota.
  [[nodiscard]] bool capped() const noexcept { return capped_; }
  // The cores that quota allows (cpu_quota_cores), read with capped(); 0 where there is none.
  [[nodiscard]] double quota_cores() const noexcept { return quota_cores_; }
  // "rank 3 (node n2)": rank 0 knows every rank's node, the others their own and rank 0's. Before
  // the ranks have told rank 0 their nodes (start-up), it names them from the launcher's layout
  // where that is known for sure (launch_task_nodes), else by rank only.
  [[nodiscard]] std::string rank_name(int rank) const;
  // Rank 0: every rank's node, in rank order (empty elsewhere).
  [[nodiscard]] const std::vector<std::string>& nodes() const noexcept { return nodes_; }

  struct Word;

 private:
  void post_receive();
  static void let_go(std::span<MPI_Request> sends);
  // Rank 0: whether `rank` said it left (a Word::left heard since the last verdict).
  [[nodiscard]] bool said_it_left(int rank) const;
  // A word of this Guard's (its generation stamped in) and what serve() does with one heard.
  [[nodiscard]] Word word(std::uint8_t kind, Phase phase, std::int64_t step, int rank) const;
  void act(const Word& heard);
  void answer(const Word& question);
  // Rank 0, past the timeout: finds who stalled (or that the calls differ) and stops every rank;
  // returns only when every rank answered and `requests` completed meanwhile (a late rank).
  void judge(std::span<MPI_Request> requests);
  // A rank other than 0 that heard nothing from rank 0: rank 0 stalled.
  [[noreturn]] void rank0_silent(double waited);
  void nap(double waited);
  // Rank 0: tells `ranks` to stop with `why`, in a word of `word_kind` (Word::stop or left_stop).
  void send_stop(const std::vector<std::int32_t>& ranks, const std::string& why, ErrorKind kind,
                 std::uint8_t word_kind);

  MPI_Comm words_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  double timeout_ = 0.0;
  double spin_ = 0.0;
  std::vector<std::string> nodes_;  // rank 0: every rank's node (the launcher's layout until they told it)
  std::string node_, root_node_;    // this rank's, and rank 0's
  Phase phase_ = Phase::startup;
  std::int64_t step_ = 0;
  std::vector<char> incoming_;  // the pre-posted receive's buffer (a Word)
  MPI_Request receive_ = MPI_REQUEST_NULL;
  std::vector<char> outgoing_;  // an answer or ask in flight
  MPI_Request send_ = MPI_REQUEST_NULL;
  std::vector<Word> sent_;  // rank 0's questions and stops, alive while they may be in flight
  std::uint64_t naps_ = 0;
  bool alive_seen_ = false;  // rank 0 said it is alive since the wait's last test
  std::vector<Word> left_;   // rank 0: the words of ranks that said they left
  // This Guard's generation, rank 0's count of the Guards it made (1 to 255, then 1 again),
  // shared at construction and stamped in every word: a word of an earlier Guard, sent after the
  // receiver freed that one's communicator, is delivered by Open MPI to a later communicator
  // that gets its context id, and must not be taken for this one's (a stale "left" made rank 0
  // stop a healthy next Job). 0 until shared: words with a generation heard before are kept in
  // early_.
  std::uint8_t generation_ = 0;
  std::vector<Word> early_;
  bool capped_ = false;
  double quota_cores_ = 0.0;
  double quota_read_ = -1e300;  // when capped_ was read
};

// True once a guarded wait of this process has ended in an error with its requests still
// active: a collective that may never complete, or complete later into buffers that are gone.
// The process must then end (antdt::run_main ends it with MPI_Abort): every later guarded wait
// throws at once, and communicators are left to the end of the process, not freed under it.
[[nodiscard]] bool waits_abandoned() noexcept;
// Whether this process stopped because another rank left the run (its program returned or
// exited: Guard::leave, leave_before_start). Its Environment then ends a moment after
// MPI_Finalize, so that the leaver's process ends first and a non-zero code of its own is the
// one the launcher reports (mpirun reports the first non-zero one).
[[nodiscard]] bool a_rank_left() noexcept;
inline constexpr double kLeaverEndsFirstSeconds = 1.0;

// The Guard of this process's job (set by the Session for its life), or nullptr: then the
// helpers below block as MPI's own calls do.
[[nodiscard]] Guard* installed_guard() noexcept;
class GuardInstall {
 public:
  explicit GuardInstall(Guard* guard) noexcept;
  ~GuardInstall();
  GuardInstall(const GuardInstall&) = delete;
  GuardInstall& operator=(const GuardInstall&) = delete;

 private:
  Guard* previous_;
};

// MPI_Waitall, guarded by the installed Guard.
void wait_requests(std::span<MPI_Request> requests);
// Whether an in-place all-reduce of `count` elements of `type` over `comm` should be given a
// copy of its buffer to send from. Open MPI 4.1 runs every non-blocking all-reduce in its
// libnbc component, which runs an in-place one as a binomial reduce to rank 0 and a broadcast
// back (2 ceil(log2 p) whole vectors on the longest path, rank 0's link carrying 2 log2 p),
// whatever its size; given a separate send buffer of 64 KiB or more on 4 ranks or more, it
// runs Rabenseifner's reduce-scatter and all-gather instead (2 (p-1)/p of the vector each way
// over every link). The copy is one pass over memory. False for other MPI libraries.
[[nodiscard]] bool send_copy_pays(MPI_Comm comm, int count, MPI_Datatype type);
// The collectives antdt needs, non-blocking and waited for by wait_requests. An in-place
// all-reduce sends from a copy where send_copy_pays says so.
void allreduce(const void* send, void* receive, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm);
void bcast(void* buffer, int count, MPI_Datatype type, int root, MPI_Comm comm);
void barrier(MPI_Comm comm);
void allgather(const void* send, int count, MPI_Datatype type, void* receive, MPI_Comm comm);
void gather(const void* send, int count, MPI_Datatype type, void* receive, int root, MPI_Comm comm);

}  // namespace antdt::detail

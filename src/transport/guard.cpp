#include "transport/guard.hpp"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <thread>
#include <vector>

#include "antdt/error.hpp"
#include "core/error_kind.hpp"
#include "core/option_names.hpp"
#include "runtime/cpu_quota.hpp"
#include "runtime/launcher.hpp"

namespace antdt::detail {

// One word between rank 0 and a rank: a question, its answer, a stop, an ask or an "alive".
struct Guard::Word {
  // left_stop: a stop because a rank left (its program returned or exited), not a stall.
  enum Kind : std::uint8_t { question = 1, answer = 2, stop = 3, ask = 4, alive = 5, left = 6, left_stop = 7 };
  std::uint8_t kind = 0;
  std::uint8_t phase = 0;
  std::uint8_t error_kind = 0;
  std::uint8_t generation = 0;  // the sender Guard's (0: not yet shared)
  std::int32_t rank = 0;
  std::int64_t step = 0;
  char text[1008] = {};
};
static_assert(sizeof(Guard::Word) == 1024);

namespace {

// Tags antdt uses on the Guard's own communicator, and on the user's only while that one is
// being made (the Guard's constructor).
constexpr int kToRank = 31001, kAsk = 31002, kAnswer = 31003;
constexpr int kWordBytes = static_cast<int>(sizeof(Guard::Word));
constexpr double kMinNap = 50e-6, kShortNap = 200e-6, kLongNap = 5e-3, kNapFraction = 0.05;
constexpr std::size_t kNamedAtMost = 8;

Guard* g_installed = nullptr;
bool g_abandoned = false;
bool g_made = false;       // a Guard was made in this process (Guard::leave_before_start)
bool g_rank_left = false;  // this process stopped because another rank left (a_rank_left)
// A word's step for a rank that left before its Job existed (Guard::leave_before_start).
constexpr std::int64_t kBeforeStart = -1;

// Marks the wait's requests abandoned when an error leaves it.
struct AbandonOnThrow {
  int uncaught = std::uncaught_exceptions();
  ~AbandonOnThrow() {
    if (std::uncaught_exceptions() > uncaught) g_abandoned = true;
  }
};

std::string seconds_text(double s) {
  std::string t = std::to_string(s);
  t.erase(t.find_last_not_of('0') + 1);
  if (!t.empty() && t.back() == '.') t.pop_back();
  return t;
}

Guard::Word make_word(std::uint8_t kind, Phase phase, std::int64_t step, int rank) {
  Guard::Word w;
  w.kind = kind;
  w.phase = static_cast<std::uint8_t>(phase);
  w.step = step;
  w.rank = rank;
  return w;
}

void set_text(Guard::Word& w, const std::string& text) {
  const std::size_t n = std::min(text.size(), sizeof(w.text) - 1);
  std::memcpy(w.text, text.data(), n);
  w.text[n] = '\0';
}

std::string where(Phase phase, std::int64_t step) {
  return std::string(phase_name(phase)) + " of step " + std::to_string(step);
}

}  // namespace

const char* phase_name(Phase phase) noexcept {
  switch (phase) {
    case Phase::startup:
      return "the start-up";
    case Phase::probe:
      return "the startup probe";
    case Phase::step:
      return "the compute";
    case Phase::reduction:
      return "the gradient reduction";
    case Phase::control:
      return "the step's control exchange";
    case Phase::evaluation:
      return "the evaluation";
    case Phase::checkpoint:
      return "the checkpoint";
    case Phase::resume:
      return "the resume";
    case Phase::end:
      return "the end of the run";
    case Phase::sitting_out:
      return "sitting out";
    case Phase::regroup:
      return "the regroup of the ranks that take part";
  }
  return "a wait";
}

void stall_point(Phase phase, std::int64_t step, int rank) {
  struct Spec {
    int phase = -1, rank = -1;
    std::int64_t step = 0;
  };
  static const Spec spec = [] {
    Spec s;
    const char* text = std::getenv("ANTDT_TEST_STALL");
    if (text == nullptr) return s;
    static const char* const kKeys[] = {"startup",    "probe",  "step", "reduction", "control", "evaluation",
                                        "checkpoint", "resume", "end",  "sitting",   "regroup"};
    const std::string t(text);
    const auto colon = t.find(':');
    for (int k = 0; k < 11 && colon != std::string::npos; ++k)
      if (t.substr(0, colon) == kKeys[k]) s.phase = k;
    if (s.phase < 0) return s;
    const std::string rest = t.substr(colon + 1);
    s.rank = std::atoi(rest.c_str());
    if (const auto c2 = rest.find(':'); c2 != std::string::npos) s.step = std::atoll(rest.c_str() + c2 + 1);
    return s;
  }();
  static bool stopped = false;
  if (stopped || spec.phase != static_cast<int>(phase) || spec.rank != rank || step < spec.step) return;
  stopped = true;
  std::fprintf(stderr, "antdt: rank %d stops itself in %s of step %lld (ANTDT_TEST_STALL)\n", rank, phase_name(phase),
               static_cast<long long>(step));
  std::fflush(stderr);
  std::raise(SIGSTOP);
}

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double grace_seconds(double timeout) { return std::max(5.0, 0.1 * timeout); }

Guard::Guard(MPI_Comm comm, double timeout_seconds, double spin_seconds, const std::string& node)
    : timeout_(timeout_seconds), spin_(spin_seconds), node_(node), incoming_(sizeof(Word)), outgoing_(sizeof(Word)) {
  if (!(timeout_ >= 0.0)) throw UsageError(option_name("step-timeout") + " must be 0 (none) or positive seconds");
  g_made = true;
  MPI_Comm_rank(comm, &rank_);
  MPI_Comm_size(comm, &size_);
  if (rank_ == 0) nodes_ = launch_task_nodes(rank_, size_);  // until the ranks tell rank 0 (below)
  if (timeout_ == 0.0 || size_ == 1) {
    ANTDT_CHECK_MPI(MPI_Comm_dup(comm, &words_));
    if (timeout_ > 0.0) post_receive();
  } else {
    // Until the Guard's own communicator exists, its words travel on the user's: a rank that
    // never reaches this point is named like any other stalled rank (by its rank only).
    words_ = comm;
    post_receive();
    MPI_Comm own = MPI_COMM_NULL;
    MPI_Request dup = MPI_REQUEST_NULL;
    ANTDT_CHECK_MPI(MPI_Comm_idup(comm, &own, &dup));
    wait(std::span<MPI_Request>(&dup, 1));
    MPI_Cancel(&receive_);
    MPI_Wait(&receive_, MPI_STATUS_IGNORE);
    if (send_ != MPI_REQUEST_NULL) MPI_Wait(&send_, MPI_STATUS_IGNORE);
    words_ = own;
    post_receive();
  }
  // The nodes, for the names in messages: rank 0 gets every rank's, every rank rank 0's.
  constexpr int kWidth = 256;
  std::vector<char> mine(kWidth, '\0');
  node_.copy(mine.data(), kWidth - 1);
  std::vector<char> all(rank_ == 0 ? static_cast<std::size_t>(kWidth) * static_cast<std::size_t>(size_) : 0);
  MPI_Request q = MPI_REQUEST_NULL;
  ANTDT_CHECK_MPI(MPI_Igather(mine.data(), kWidth, MPI_CHAR, all.data(), kWidth, MPI_CHAR, 0, words_, &q));
  wait(std::span<MPI_Request>(&q, 1));
  if (rank_ == 0) {
    nodes_.clear();
    for (int r = 0; r < size_; ++r) nodes_.emplace_back(all.data() + static_cast<std::size_t>(r) * kWidth);
    root_node_ = node_;
  }
  std::vector<char> root(kWidth + 1, '\0');  // rank 0's node, then this Guard's generation
  if (rank_ == 0) {
    static std::uint8_t made = 0;
    made = made == 255 ? 1 : static_cast<std::uint8_t>(made + 1);
    node_.copy(root.data(), kWidth - 1);
    root[kWidth] = static_cast<char>(made);
  }
  ANTDT_CHECK_MPI(MPI_Ibcast(root.data(), kWidth + 1, MPI_CHAR, 0, words_, &q));
  wait(std::span<MPI_Request>(&q, 1));
  root_node_ = root.data();
  generation_ = static_cast<std::uint8_t>(root[kWidth]);
  std::vector<Word> early;
  early.swap(early_);
  for (const Word& w : early) act(w);
}

std::string Guard::rank_name(int rank) const {
  std::string node;
  if (rank == rank_) node = node_;
  if (rank == 0) node = root_node_;
  if (rank_ == 0 && static_cast<std::size_t>(rank) < nodes_.size()) node = nodes_[static_cast<std::size_t>(rank)];
  return "rank " + std::to_string(rank) + (node.empty() ? std::string() : " (node " + node + ")");
}

Guard::~Guard() {
  if (receive_ != MPI_REQUEST_NULL) {
    MPI_Cancel(&receive_);
    MPI_Wait(&receive_, MPI_STATUS_IGNORE);  // completes at once: the buffer is free after it
  }
  if (send_ != MPI_REQUEST_NULL) MPI_Request_free(&send_);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (words_ != MPI_COMM_NULL && finalized == 0 && !waits_abandoned()) MPI_Comm_free(&words_);
}

void Guard::post_receive() {
  if (rank_ == 0) {
    ANTDT_CHECK_MPI(MPI_Irecv(incoming_.data(), kWordBytes, MPI_BYTE, MPI_ANY_SOURCE, kAsk, words_, &receive_));
  } else {
    ANTDT_CHECK_MPI(MPI_Irecv(incoming_.data(), kWordBytes, MPI_BYTE, 0, kToRank, words_, &receive_));
  }
}

Guard::Scope::Scope(Guard* guard, Phase phase, std::int64_t step)
    : guard_(guard), phase_(guard ? guard->phase_ : Phase::startup), step_(guard ? guard->step_ : 0) {
  if (guard_ == nullptr) return;
  guard_->step_ = step;
  guard_->set_phase(phase);
}

Guard::Scope::~Scope() {
  if (guard_ == nullptr) return;
  guard_->phase_ = phase_;
  guard_->step_ = step_;
}

// Answers a word: rank 0 an ask ("are you alive?"), another rank a question ("where are you?").
void Guard::answer(const Word& w) {
  if (send_ != MPI_REQUEST_NULL) MPI_Wait(&send_, MPI_STATUS_IGNORE);  // the last one is small: it has gone
  Word out;
  int tag = 0, to = 0;
  if (rank_ == 0) {  // an ask: "are you alive?"
    out = word(Word::alive, phase_, step_, 0);
    tag = kToRank;
    to = w.rank;
  } else {  // a question: "where are you?"
    out = word(Word::answer, phase_, step_, rank_);
    tag = kAnswer;
  }
  std::memcpy(outgoing_.data(), &out, sizeof out);
  ANTDT_CHECK_MPI(MPI_Isend(outgoing_.data(), kWordBytes, MPI_BYTE, to, tag, words_, &send_));
}

void Guard::serve() {
  if (receive_ == MPI_REQUEST_NULL) return;
  for (;;) {
    int arrived = 0;
    ANTDT_CHECK_MPI(MPI_Test(&receive_, &arrived, MPI_STATUS_IGNORE));
    if (arrived == 0) return;
    Word w;
    std::memcpy(&w, incoming_.data(), sizeof w);
    post_receive();
    // Before this Guard's generation is shared, a word of a Guard that has one waits for it (the
    // constructor acts on it then, or drops an earlier Guard's); one of a Guard under
    // construction too is acted on now (a stall in the constructor's own waits is judged so).
    if (generation_ == 0 && w.generation != 0) {
      early_.push_back(w);
      continue;
    }
    act(w);
  }
}

Guard::Word Guard::word(std::uint8_t kind, Phase phase, std::int64_t step, int rank) const {
  Word w = make_word(kind, phase, step, rank);
  w.generation = generation_;
  return w;
}

void Guard::act(const Word& w) {
  // An earlier Guard's word (0: a Guard's that had not shared its generation yet) is not ours.
  if (w.generation != generation_ && w.generation != 0) return;
  if (w.kind == Word::stop || w.kind == Word::left_stop) {
    if (w.kind == Word::left_stop) g_rank_left = true;
    // Rank 0 that ended before its Job existed prints nothing itself: rank 1 says it.
    const bool from_before_start = w.step == kBeforeStart;
    throw_shared_error(static_cast<ErrorKind>(w.error_kind), w.text, !from_before_start || rank_ != 1);
  }
  if (w.kind == Word::question || (rank_ == 0 && w.kind == Word::ask)) answer(w);
  if (w.kind == Word::alive) alive_seen_ = true;               // needs no answer: wait() extends its patience
  if (rank_ == 0 && w.kind == Word::left) left_.push_back(w);  // judged at rank 0's next wait
}

namespace {
// Where a rank left, as rank 0 words it (the leaver's phase and step).
std::string left_text(const std::string& who, Phase phase, std::int64_t step) {
  if (step == kBeforeStart) {
    return who +
           " ended its program before it built its Job (a return, an exception or an exit on that rank before "
           "antdt::Job), which is not a stall: no node is to blame";
  }
  return who + " left the run in " + phase_name(phase) + " (step " + std::to_string(step) +
         ") before it ended: its program stopped calling antdt there (a return, a break, an exception or an exit on "
         "that rank), which is not a stall: no node is to blame";
}
}  // namespace

void Guard::leave() {
  if (rank_ == 0) {  // every rank hears it as a stop, as from rank 0's judge
    std::vector<std::int32_t> all;
    for (int r = 1; r < size_; ++r) all.push_back(r);
    send_stop(all, left_text(rank_name(0), phase_, step_) + "; stopping every rank", ErrorKind::runtime,
              Word::left_stop);
    return;
  }
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized != 0 || words_ == MPI_COMM_NULL || size_ == 1 || waits_abandoned()) return;
  if (send_ != MPI_REQUEST_NULL) MPI_Wait(&send_, MPI_STATUS_IGNORE);  // small: it has gone
  const Word w = word(Word::left, phase_, step_, rank_);
  std::memcpy(outgoing_.data(), &w, sizeof w);
  ANTDT_CHECK_MPI(MPI_Isend(outgoing_.data(), kWordBytes, MPI_BYTE, 0, kAsk, words_, &send_));
  let_go({&send_, 1});
}

void Guard::leave_before_start(MPI_Comm comm) {
  int initialized = 0, finalized = 0, rank = 0, size = 1;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized == 0 || finalized != 0 || g_made) return;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  if (size == 1) return;
  // The words live until MPI_Finalize: a send nobody receives may stay pending until then.
  static std::vector<Word> words;
  std::vector<MPI_Request> sends;
  if (rank != 0) {
    words.assign(1, make_word(Word::left, Phase::startup, kBeforeStart, rank));
    sends.emplace_back(MPI_REQUEST_NULL);
    MPI_Isend(words.data(), kWordBytes, MPI_BYTE, 0, kAsk, comm, &sends.back());
  } else {
    Word stop = make_word(Word::left_stop, Phase::startup, kBeforeStart, 0);
    stop.error_kind = static_cast<std::uint8_t>(ErrorKind::runtime);
    set_text(stop, left_text("rank 0 (node " + discover_node_name() + ")", Phase::startup, kBeforeStart) +
                       "; stopping every rank");
    words.assign(static_cast<std::size_t>(size), stop);
    for (int r = 1; r < size; ++r) {
      sends.emplace_back(MPI_REQUEST_NULL);
      MPI_Isend(&words[static_cast<std::size_t>(r)], kWordBytes, MPI_BYTE, r, kToRank, comm, &sends.back());
    }
  }
  let_go(sends);
}

void Guard::tell_stop(const std::vector<std::int32_t>& ranks, const std::string& why, ErrorKind kind) {
  send_stop(ranks, why, kind, Word::stop);
}

void Guard::send_stop(const std::vector<std::int32_t>& ranks, const std::string& why, ErrorKind kind,
                      std::uint8_t word_kind) {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (rank_ != 0 || ranks.empty() || finalized != 0 || words_ == MPI_COMM_NULL || waits_abandoned()) return;
  sent_.assign(1, word(word_kind, phase_, step_, 0));
  sent_[0].error_kind = static_cast<std::uint8_t>(kind);
  set_text(sent_[0], why);
  std::vector<MPI_Request> sends;
  for (const std::int32_t r : ranks) {
    if (r <= 0 || r >= size_) continue;
    sends.emplace_back(MPI_REQUEST_NULL);
    ANTDT_CHECK_MPI(MPI_Isend(sent_.data(), kWordBytes, MPI_BYTE, r, kToRank, words_, &sends.back()));
  }
  let_go(sends);
}

// Small words go eagerly: gives them a moment, then lets them go (their buffers live with the Guard).
void Guard::let_go(std::span<MPI_Request> sends) {
  const double deadline = steady_seconds() + 0.2;
  for (int done = 0; done == 0 && steady_seconds() < deadline;) {
    ANTDT_CHECK_MPI(MPI_Testall(static_cast<int>(sends.size()), sends.data(), &done, MPI_STATUSES_IGNORE));
    if (done == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  for (auto& q : sends) {
    if (q != MPI_REQUEST_NULL) MPI_Request_free(&q);
  }
}

bool Guard::said_it_left(int rank) const {
  return std::any_of(left_.begin(), left_.end(), [rank](const Word& w) { return w.rank == rank; });
}

void Guard::nap(double waited) {
  if (waited < (capped_ ? 0.0 : spin_)) return;
  ++naps_;
  const double cap = waited < 1.0 ? kShortNap : kLongNap;
  std::this_thread::sleep_for(std::chrono::duration<double>(std::clamp(kNapFraction * waited, kMinNap, cap)));
}

void Guard::wait(std::span<MPI_Request> requests) {
  if (requests.empty()) return;
  if (timeout_ <= 0.0 || size_ == 1) {
    ANTDT_CHECK_MPI(MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE));
    return;
  }
  stall_point(phase_, step_, rank_);
  if (g_abandoned) {
    throw Error(
        "a wait of this process was abandoned after a stall: its MPI state is unusable; end the process "
        "(antdt::run_main does)");
  }
  const AbandonOnThrow abandon;
  const double start = steady_seconds();
  if (start >= quota_read_ + 1.0) {                         // a job's quota may change while it runs
    const std::optional<double> cores = cpu_quota_cores();  // the files are read once
    capped_ = cpu_quota_binds(cores);
    quota_cores_ = capped_ ? *cores : 0.0;
    quota_read_ = start;
  }
  const double grace = grace_seconds(timeout_);
  double patience = start + timeout_ + (rank_ == 0 ? 0.0 : grace);  // rank 0 judges first
  double asked = -1.0;                                              // when this rank asked rank 0
  for (;;) {
    int done = 0;
    ANTDT_CHECK_MPI(MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE));
    if (done != 0) return;
    alive_seen_ = false;
    serve();
    const double now = steady_seconds();
    if (rank_ != 0 && alive_seen_) {  // rank 0 is there: it judges at its own deadline
      asked = -1.0;
      patience = now + timeout_ + grace;
    }
    if (now >= patience || (rank_ == 0 && !left_.empty())) {  // a rank that left: no need to wait
      if (rank_ == 0 && now < patience) {
        // A rank that left after its part of this wait (it threw the error every rank threw
        // here, then ended): the wait completes, and the leave is judged at the next one. Its
        // word came after its part, so that part has arrived.
        ANTDT_CHECK_MPI(MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE));
        if (done != 0) return;
      }
      if (rank_ == 0) {
        judge(requests);
        return;  // the waited-for work completed while rank 0 asked around: a late rank, not a stall
      }
      if (asked < 0.0) {
        if (send_ != MPI_REQUEST_NULL) MPI_Wait(&send_, MPI_STATUS_IGNORE);
        const Word ask = word(Word::ask, phase_, step_, rank_);
        std::memcpy(outgoing_.data(), &ask, sizeof ask);
        ANTDT_CHECK_MPI(MPI_Isend(outgoing_.data(), kWordBytes, MPI_BYTE, 0, kAsk, words_, &send_));
        asked = now;
      } else if (now >= asked + grace) {
        rank0_silent(now - start);
      }
    }
    nap(now - start);
  }
}

void Guard::judge(std::span<MPI_Request> requests) {
  const double t0 = steady_seconds();
  // A live rank answers from whatever wait it is in within milliseconds; one that is computing
  // (not in antdt) a full timeout after rank 0 began waiting has stalled, and does not.
  const double window = std::min(grace_seconds(timeout_), std::max(0.5, 0.1 * timeout_));
  std::vector<Word> answers(static_cast<std::size_t>(size_));
  // The words rank 0 sends live as long as the Guard: a send whose receiver stopped may still
  // be in flight when this returns or throws.
  std::vector<Word>& questions = sent_;
  questions.assign(2 * static_cast<std::size_t>(size_), Word{});
  std::vector<MPI_Request> asked(static_cast<std::size_t>(size_), MPI_REQUEST_NULL);
  std::vector<MPI_Request> heard(static_cast<std::size_t>(size_), MPI_REQUEST_NULL);
  for (int r = 1; r < size_; ++r) {
    const auto i = static_cast<std::size_t>(r);
    questions[i] = word(Word::question, phase_, step_, 0);
    ANTDT_CHECK_MPI(MPI_Irecv(&answers[i], kWordBytes, MPI_BYTE, r, kAnswer, words_, &heard[i]));
    ANTDT_CHECK_MPI(MPI_Isend(&questions[i], kWordBytes, MPI_BYTE, r, kToRank, words_, &asked[i]));
  }
  // Every live rank answers from whatever wait it is in; give them the grace.
  std::vector<char> answered(static_cast<std::size_t>(size_), 0);
  answered[0] = 1;
  for (;;) {
    int left = 0;
    for (int r = 1; r < size_; ++r) {
      const auto i = static_cast<std::size_t>(r);
      if (answered[i] != 0) continue;
      int got = 0;
      ANTDT_CHECK_MPI(MPI_Test(&heard[i], &got, MPI_STATUS_IGNORE));
      if (got != 0) {
        answered[i] = 1;
      } else if (!said_it_left(r)) {
        ++left;  // a rank that said it left does not answer: no need to wait for it
      }
    }
    serve();  // asks from ranks that lost patience: they hear rank 0 is alive
    const double now = steady_seconds();
    if (left == 0 || now >= t0 + window) break;
    nap(now - t0 + spin_);
  }
  std::vector<int> missing;
  for (int r = 1; r < size_; ++r) {
    const auto i = static_cast<std::size_t>(r);
    if (answered[i] != 0) continue;
    missing.push_back(r);
    MPI_Cancel(&heard[i]);
    MPI_Wait(&heard[i], MPI_STATUS_IGNORE);  // a cancelled receive completes at once; its buffer is then free
  }
  for (auto& q : asked) {
    if (q != MPI_REQUEST_NULL) MPI_Request_free(&q);  // small words: they go without us
  }
  if (missing.empty()) {
    left_.clear();  // whoever said it left has answered since: it is here
    // Everyone answered: if the waited-for work completes now, a rank was late, not stalled.
    const double settle = steady_seconds() + window;
    for (int done = 0; steady_seconds() < settle;) {
      ANTDT_CHECK_MPI(MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE));
      if (done != 0) return;
      serve();
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  // The verdict.
  const std::string here = where(phase_, step_);
  const std::string timeout = seconds_text(timeout_) + " s (" + option_name("step-timeout") + ")";
  ErrorKind kind = ErrorKind::stall;
  std::string what;
  std::vector<int> stalled;  // the missing ranks that did not say they left
  for (const int r : missing) {
    if (!said_it_left(r)) stalled.push_back(r);
  }
  const bool left_verdict = !missing.empty() && stalled.empty();  // every missing rank said it left
  if (left_verdict) {
    const Word& first = left_.front();
    kind = ErrorKind::runtime;
    what = left_text(rank_name(first.rank), static_cast<Phase>(first.phase), first.step) +
           (left_.size() > 1 ? " (and " + std::to_string(left_.size() - 1) + " more)" : "") + "; stopping every rank";
  } else if (!missing.empty()) {
    missing = stalled;
    std::string who;
    for (std::size_t k = 0; k < std::min(missing.size(), kNamedAtMost); ++k)
      who += (k == 0 ? "" : ", ") + rank_name(missing[k]);
    if (missing.size() > kNamedAtMost) who += " and " + std::to_string(missing.size() - kNamedAtMost) + " more";
    what = who + (missing.size() == 1 ? " has" : " have") + " not answered in " + here + ", " + timeout +
           " after the wait there began: stopped, hung or swapping; stopping every rank";
  } else {
    int other = -1;
    for (int r = 1; r < size_ && other < 0; ++r) {
      const auto& a = answers[static_cast<std::size_t>(r)];
      if (a.phase == static_cast<std::uint8_t>(Phase::sitting_out)) continue;  // not in these steps
      if (a.phase != static_cast<std::uint8_t>(phase_) || a.step != step_) other = r;
    }
    if (other > 0) {
      const auto& a = answers[static_cast<std::size_t>(other)];
      kind = ErrorKind::usage;
      what = "the ranks made different antdt calls: rank 0 waits in " + here + " but " + rank_name(other) + " is in " +
             where(static_cast<Phase>(a.phase), a.step) +
             "; every rank must make the same collective calls in the same order (docs/errors.md)";
    } else {
      what = "every rank is in " + here + " but it has not completed in " + timeout +
             ": no rank stalled; the MPI transport between them did";
    }
  }
  // Every rank hears it (a stalled one when it comes back, at its next wait), and stops;
  // rank 0 throws it first-hand.
  std::vector<MPI_Request> told, told_silent;
  for (int r = 1; r < size_; ++r) {
    const auto i = static_cast<std::size_t>(r);
    std::vector<MPI_Request>& list = answered[i] != 0 ? told : told_silent;
    Word& stop = questions[static_cast<std::size_t>(size_) + i];
    stop = word(left_verdict ? Word::left_stop : Word::stop, phase_, step_, 0);
    stop.error_kind = static_cast<std::uint8_t>(kind);
    set_text(stop, what);
    list.emplace_back(MPI_REQUEST_NULL);
    ANTDT_CHECK_MPI(MPI_Isend(&stop, kWordBytes, MPI_BYTE, r, kToRank, words_, &list.back()));
  }
  // The words are small (eager): they leave without their receivers, but give them a moment;
  // their buffers live as long as the Guard, so one still in flight is safe to let go.
  const double deadline = steady_seconds() + 0.2;
  for (int done = 0; done == 0 && steady_seconds() < deadline;) {
    ANTDT_CHECK_MPI(MPI_Testall(static_cast<int>(told.size()), told.data(), &done, MPI_STATUSES_IGNORE));
    if (done == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  told.insert(told.end(), told_silent.begin(), told_silent.end());
  for (auto& q : told) {
    if (q != MPI_REQUEST_NULL) MPI_Request_free(&q);
  }
  if (kind == ErrorKind::stall && !missing.empty()) {
    // First-hand: the stalled ranks' nodes as data (StallError::nodes()), each once, for the
    // exclude file that leaves them out of a resubmission.
    std::vector<std::string> nodes;
    for (const int r : missing) {
      const auto i = static_cast<std::size_t>(r);
      if (i < nodes_.size() && !nodes_[i].empty() && std::find(nodes.begin(), nodes.end(), nodes_[i]) == nodes.end())
        nodes.push_back(nodes_[i]);
    }
    StallError e(what, true, std::move(nodes));
    e.set_shared(true, false);
    throw e;
  }
  if (left_verdict) g_rank_left = true;
  throw_shared_error(kind, what, false);
}

void Guard::rank0_silent(double waited) {
  // Every other rank finds it, each after its own wait: rank 1 says it, the rest stay quiet
  // (one line, as for any stall).
  char waited_text[32];
  std::snprintf(waited_text, sizeof waited_text, "%.1f", waited);
  throw_shared_error(ErrorKind::stall,
                     "rank " + std::to_string(rank_) + " waited " + waited_text + " s in " + where(phase_, step_) +
                         " and " + rank_name(0) + " did not answer within " + seconds_text(grace_seconds(timeout_)) +
                         " s (" + option_name("step-timeout") + " " + seconds_text(timeout_) +
                         " plus grace): rank 0 stalled",
                     rank_ != 1);
}

Guard* installed_guard() noexcept { return g_installed; }
bool waits_abandoned() noexcept { return g_abandoned; }
bool a_rank_left() noexcept { return g_rank_left; }

GuardInstall::GuardInstall(Guard* guard) noexcept : previous_(g_installed) { g_installed = guard; }
GuardInstall::~GuardInstall() { g_installed = previous_; }

void wait_requests(std::span<MPI_Request> requests) {
  if (Guard* g = installed_guard()) {
    g->wait(requests);
  } else {
    ANTDT_CHECK_MPI(MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE));
  }
}

bool send_copy_pays(MPI_Comm comm, int count, MPI_Datatype type) {
#if defined(OPEN_MPI) && OPEN_MPI
  constexpr int kRanks = 4;                               // libnbc: below 4 ranks, binomial anyway
  constexpr std::int64_t kBytes = std::int64_t{1} << 16;  // libnbc: below 64 KiB, binomial anyway
  int size = 0, ranks = 0;
  ANTDT_CHECK_MPI(MPI_Type_size(type, &size));
  ANTDT_CHECK_MPI(MPI_Comm_size(comm, &ranks));
  return ranks >= kRanks && std::int64_t{count} * size >= kBytes;
#else
  (void)comm;
  (void)count;
  (void)type;
  return false;
#endif
}

void allreduce(const void* send, void* receive, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm) {
  std::vector<std::byte> copy;  // in place: sent from a copy where that picks a better algorithm
  if (send == MPI_IN_PLACE && send_copy_pays(comm, count, type)) {
    int size = 0;
    ANTDT_CHECK_MPI(MPI_Type_size(type, &size));
    const auto* first = static_cast<const std::byte*>(receive);
    copy.assign(first, first + static_cast<std::size_t>(count) * static_cast<std::size_t>(size));
    send = copy.data();
  }
  MPI_Request q = MPI_REQUEST_NULL;
  ANTDT_CHECK_MPI(MPI_Iallreduce(send, receive, count, type, op, comm, &q));
  wait_requests(std::span<MPI_Request>(&q, 1));
}

void bcast(void* buffer, int count, MPI_Datatype type, int root, MPI_Comm comm) {
  MPI_Request q = MPI_REQUEST_NULL;
  ANTDT_CHECK_MPI(MPI_Ibcast(buffer, count, type, root, comm, &q));
  wait_requests(std::span<MPI_Request>(&q, 1));
}

void barrier(MPI_Comm comm) {
  MPI_Request q = MPI_REQUEST_NULL;
  ANTDT_CHECK_MPI(MPI_Ibarrier(comm, &q));
  wait_requests(std::span<MPI_Request>(&q, 1));
}

void allgather(const void* send, int count, MPI_Datatype type, void* receive, MPI_Comm comm) {
  MPI_Request q = MPI_REQUEST_NULL;
  ANTDT_CHECK_MPI(MPI_Iallgather(send, count, type, receive, count, type, comm, &q));
  wait_requests(std::span<MPI_Request>(&q, 1));
}

void gather(const void* send, int count, MPI_Datatype type, void* receive, int root, MPI_Comm comm) {
  MPI_Request q = MPI_REQUEST_NULL;
  ANTDT_CHECK_MPI(MPI_Igather(send, count, type, receive, count, type, root, comm, &q));
  wait_requests(std::span<MPI_Request>(&q, 1));
}

}  // namespace antdt::detail

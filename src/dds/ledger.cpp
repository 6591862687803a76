// The DDS ledger: the authoritative state of every piece of every open epoch.
//
// Representation. An open epoch keeps TODO as (a) `returned`, tails that came back from a
// failed or dropped rank, served first, and (b) the shards from `next_order` on in the
// epoch's shard order, which have never been handed out and need no storage. A DOING piece
// lives in its owner's list in acquisition order and is [committed, end) of one shard, of
// which [consumed, end) is not consumed yet; the committed prefix is DONE and only counted.
// Tails restored from a checkpoint on the same world size wait in `reserved_` of their old
// owner (still TODO for the counts), so that owner gets them back first, in the old order.
//
// Each epoch carries running counters (todo, doing = uncommitted DOING positions, done), and
// each rank its held positions; every transition moves positions between them, so counts()
// is O(open epochs) and held() O(1). check_identity() recounts todo, doing and held from the
// pieces themselves, in one pass over all of them, and compares.
#include <algorithm>
#include <array>
#include <limits>
#include <string>

#include "antdt/error.hpp"
#include "core/bytes.hpp"
#include "dds/dds.hpp"

namespace antdt::dds {

namespace {
constexpr std::uint64_t kLedgerMagic = 0x524744454C534444ULL;  // "DDSLEDGR"
constexpr std::uint32_t kLedgerVersion = 1;
}  // namespace

Ledger::Ledger(const LedgerOptions& options, int world_size)
    : options_(options), map_(options), world_size_(world_size) {
  if (world_size < 1) throw UsageError("dds: world size must be at least 1, got " + std::to_string(world_size));
  options_.shard_size = map_.shard_size();  // resolve "automatic" once, so it is what gets saved
  doing_.resize(static_cast<std::size_t>(world_size));
  reserved_.resize(static_cast<std::size_t>(world_size));
  held_.assign(static_cast<std::size_t>(world_size), 0);
}

void Ledger::check_rank(int rank, const char* what) const {
  if (rank < 0 || rank >= world_size_) {
    throw UsageError(std::string("dds: ") + what + ": rank " + std::to_string(rank) + " out of range [0, " +
                     std::to_string(world_size_) + ")");
  }
}

Ledger::Epoch* Ledger::find_epoch(std::int64_t epoch) {
  for (auto& e : open_) {
    if (e.epoch == epoch) return &e;
  }
  return nullptr;
}

Ledger::Epoch& Ledger::epoch_state(std::int64_t epoch) {
  Epoch* e = find_epoch(epoch);
  ANTDT_ASSERT(e != nullptr, "a piece refers to an epoch that is not open");
  return *e;
}

Grant Ledger::hand_out(int rank, std::int64_t epoch, std::int64_t shard, std::int64_t begin, std::int64_t end) {
  Epoch& e = epoch_state(epoch);
  e.todo -= end - begin;
  e.doing += end - begin;
  doing_[static_cast<std::size_t>(rank)].push_back(Piece{epoch, shard, begin, begin, end});
  held_[static_cast<std::size_t>(rank)] += end - begin;
  return Grant{epoch, shard, begin, end, static_cast<std::int32_t>(rank)};
}

Grant Ledger::take_piece(int rank, Epoch& e, std::int64_t max_positions) {
  TodoPiece p;
  if (!e.returned.empty()) {
    p = e.returned.front();
    e.returned.pop_front();
  } else {
    p.shard = map_.shard_at(e.epoch, e.next_order++);
    p.begin = 0;
    p.end = map_.shard_length(p.shard);
  }
  if (max_positions > 0 && p.end - p.begin > max_positions) {
    e.returned.push_front(TodoPiece{p.shard, p.begin + max_positions, p.end});  // still TODO
    p.end = p.begin + max_positions;
  }
  return hand_out(rank, e.epoch, p.shard, p.begin, p.end);
}

std::optional<Grant> Ledger::acquire(int rank, std::int64_t max_positions) {
  check_rank(rank, "acquire");
  const auto take_reserved = [&](std::vector<Reserved>& list) {
    const Reserved r = list.back();  // the next in the old order
    list.pop_back();
    --reserved_pieces_;
    return hand_out(rank, r.epoch, r.shard, r.begin, r.end);
  };
  if (auto& own = reserved_[static_cast<std::size_t>(rank)]; !own.empty()) return take_reserved(own);
  for (auto& e : open_) {
    if (!e.returned.empty() || e.next_order < map_.num_shards()) return take_piece(rank, e, max_positions);
  }
  // Nothing free in the open epochs: take a tail reserved for another rank before opening a
  // new epoch, so a rank that never asks again cannot keep an epoch from completing.
  if (reserved_pieces_ > 0) {
    for (auto& other : reserved_) {
      if (!other.empty()) return take_reserved(other);
    }
  }
  if (options_.max_epochs > 0 && next_epoch_ >= options_.max_epochs) return std::nullopt;
  Epoch fresh;
  fresh.epoch = next_epoch_++;
  fresh.todo = map_.dataset_size();
  open_.push_back(std::move(fresh));
  return take_piece(rank, open_.back(), max_positions);
}

std::vector<Grant> Ledger::consume(int rank, std::int64_t k) {
  std::vector<Grant> runs;
  consume(rank, k, runs);
  return runs;
}

void Ledger::consume(int rank, std::int64_t k, std::vector<Grant>& runs) {
  check_rank(rank, "consume");
  if (k < 0) throw UsageError("dds: consume: count must be >= 0, got " + std::to_string(k));
  std::int64_t taken = 0;
  for (auto& p : doing_[static_cast<std::size_t>(rank)]) {
    if (k == 0) break;
    if (p.consumed == p.end) continue;
    const std::int64_t take = std::min(k, p.end - p.consumed);
    runs.push_back(Grant{p.epoch, p.shard, p.consumed, p.consumed + take, static_cast<std::int32_t>(rank)});
    p.consumed += take;
    k -= take;
    taken += take;
  }
  held_[static_cast<std::size_t>(rank)] -= taken;
}

std::int64_t Ledger::commit(int rank) {
  check_rank(rank, "commit");
  auto& pieces = doing_[static_cast<std::size_t>(rank)];
  std::int64_t total = 0;
  for (auto& p : pieces) {
    const std::int64_t amount = p.consumed - p.committed;
    if (amount == 0) continue;
    Epoch& e = epoch_state(p.epoch);
    e.doing -= amount;
    e.done += amount;
    p.committed = p.consumed;
    total += amount;
  }
  std::erase_if(pieces, [](const Piece& p) { return p.committed == p.end; });
  close_complete_epochs();
  return total;
}

void Ledger::return_tails(std::vector<Reserved> tails) {
  // push_front in reverse keeps the tails in their original order at the front.
  for (auto it = tails.rbegin(); it != tails.rend(); ++it) {
    if (it->begin == it->end) continue;
    epoch_state(it->epoch).returned.push_front(TodoPiece{it->shard, it->begin, it->end});
  }
}

std::int64_t Ledger::fail_rank(int rank) {
  check_rank(rank, "fail_rank");
  auto& pieces = doing_[static_cast<std::size_t>(rank)];
  auto& own = reserved_[static_cast<std::size_t>(rank)];
  std::vector<Reserved> tails;
  std::int64_t total = 0;
  for (const auto& p : pieces) {
    const std::int64_t amount = p.end - p.committed;
    Epoch& e = epoch_state(p.epoch);
    e.doing -= amount;
    e.todo += amount;
    total += amount;
    tails.push_back(Reserved{p.epoch, p.shard, p.committed, p.end});
  }
  // Tails reserved for this rank are TODO already; they just stop being reserved (old order).
  tails.insert(tails.end(), own.rbegin(), own.rend());
  reserved_pieces_ -= static_cast<std::int64_t>(own.size());
  pieces.clear();
  own.clear();
  held_[static_cast<std::size_t>(rank)] = 0;
  return_tails(std::move(tails));
  return total;
}

std::int64_t Ledger::drop(int rank) {
  check_rank(rank, "drop");
  auto& pieces = doing_[static_cast<std::size_t>(rank)];
  std::vector<Reserved> tails;
  std::int64_t total = 0;
  for (auto& p : pieces) {
    const std::int64_t amount = p.consumed - p.committed;
    if (amount == 0) continue;
    Epoch& e = epoch_state(p.epoch);
    e.doing -= amount;
    e.todo += amount;
    total += amount;
    tails.push_back(Reserved{p.epoch, p.shard, p.committed, p.consumed});
    p.committed = p.consumed;  // the piece now starts at its unconsumed remainder
  }
  std::erase_if(pieces, [](const Piece& p) { return p.committed == p.end; });
  return_tails(std::move(tails));
  return total;
}

std::int64_t Ledger::held(int rank) const {
  check_rank(rank, "held");
  return held_[static_cast<std::size_t>(rank)];
}

bool Ledger::has_reserved(int rank) const {
  check_rank(rank, "has_reserved");
  return !reserved_[static_cast<std::size_t>(rank)].empty();
}

std::int64_t Ledger::reserved(int rank) const {
  check_rank(rank, "reserved");
  std::int64_t total = 0;
  for (const auto& r : reserved_[static_cast<std::size_t>(rank)]) total += r.end - r.begin;
  return total;
}

void Ledger::close_complete_epochs() {
  for (auto it = open_.begin(); it != open_.end();) {
    if (it->done == map_.dataset_size()) {
      completed_.push_back(it->epoch);
      it = open_.erase(it);
    } else {
      ++it;
    }
  }
}

std::vector<Ledger::EpochCounts> Ledger::counts() const {
  std::vector<EpochCounts> out;
  out.reserve(open_.size());
  for (const auto& e : open_) out.push_back(EpochCounts{e.epoch, e.todo, e.doing, e.done});
  return out;
}

// One pass over every piece, whatever the number of open epochs: each piece's epoch is looked
// up among the open ones (a handful), and its positions added to that epoch's recount.
void Ledger::check_identity() const {
  const std::int64_t n = map_.dataset_size();
  const std::int64_t shards = map_.num_shards();
  constexpr std::size_t kInline = 8;  // open epochs recounted without allocating
  struct Recount {
    std::int64_t todo = 0, doing = 0;
  };
  std::array<Recount, kInline> inline_counts{};
  std::vector<Recount> more(open_.size() > kInline ? open_.size() : 0);
  const std::span<Recount> recount =
      open_.size() > kInline ? std::span<Recount>(more) : std::span<Recount>(inline_counts).first(open_.size());
  const auto slot_of = [&](std::int64_t epoch) -> Recount& {
    for (std::size_t i = 0; i < open_.size(); ++i) {
      if (open_[i].epoch == epoch) return recount[i];
    }
    throw Error("dds ledger: a DOING piece or reserved tail refers to epoch " + std::to_string(epoch) +
                ", which is not open");
  };
  // TODO from the pieces: returned tails + reserved tails + shards not handed out yet. The
  // shards left all have shard_size positions, except the short last shard if it is among
  // them (its place in the order comes from the inverse permutation).
  for (std::size_t i = 0; i < open_.size(); ++i) {
    const Epoch& e = open_[i];
    std::int64_t todo = 0;
    for (const auto& p : e.returned) todo += p.end - p.begin;
    todo += (shards - e.next_order) * map_.shard_size();
    if (map_.order_of(e.epoch, shards - 1) >= e.next_order) todo -= map_.shard_size() - map_.shard_length(shards - 1);
    recount[i].todo += todo;
  }
  std::int64_t reserved_pieces = 0;
  for (const auto& list : reserved_) {
    reserved_pieces += static_cast<std::int64_t>(list.size());
    for (const auto& r : list) slot_of(r.epoch).todo += r.end - r.begin;
  }
  for (std::size_t rank = 0; rank < doing_.size(); ++rank) {
    std::int64_t held = 0;
    for (const auto& p : doing_[rank]) {
      if (!(p.committed <= p.consumed && p.consumed <= p.end)) {
        throw Error("dds ledger: epoch " + std::to_string(p.epoch) +
                    ": a DOING piece has committed > consumed or consumed > end");
      }
      slot_of(p.epoch).doing += p.end - p.committed;
      held += p.end - p.consumed;
    }
    if (held != held_[rank]) {
      throw Error("dds ledger: rank " + std::to_string(rank) + " holds " + std::to_string(held) +
                  " unconsumed positions, but its running count says " + std::to_string(held_[rank]));
    }
  }
  if (reserved_pieces != reserved_pieces_) {
    throw Error("dds ledger: " + std::to_string(reserved_pieces) + " reserved tails, but the running count says " +
                std::to_string(reserved_pieces_));
  }
  for (std::size_t i = 0; i < open_.size(); ++i) {
    const Epoch& e = open_[i];
    const std::int64_t todo = recount[i].todo, doing = recount[i].doing;
    if (todo != e.todo || doing != e.doing || e.done < 0 || e.todo + e.doing + e.done != n || e.done == n) {
      throw Error("dds ledger identity broken in epoch " + std::to_string(e.epoch) + ": todo " +
                  std::to_string(e.todo) + " (pieces say " + std::to_string(todo) + ") + doing " +
                  std::to_string(e.doing) + " (pieces say " + std::to_string(doing) + ") + done " +
                  std::to_string(e.done) + " != dataset size " + std::to_string(n));
    }
  }
}

std::int64_t Ledger::current_epoch() const { return open_.empty() ? next_epoch_ : open_.front().epoch; }

bool Ledger::exhausted() const {
  return options_.max_epochs > 0 && next_epoch_ >= options_.max_epochs && open_.empty();
}

void Ledger::set_max_epochs(std::int64_t max_epochs) {
  if (max_epochs < 0) throw UsageError("dds: max_epochs must be >= 0 (0 = unlimited)");
  if (max_epochs > 0 && max_epochs < next_epoch_) {
    throw UsageError("dds: cannot stop after epoch " + std::to_string(max_epochs) + ": " + std::to_string(next_epoch_) +
                     " epochs are already under way or done");
  }
  options_.max_epochs = max_epochs;
}

std::vector<std::byte> Ledger::serialize() const {
  detail::ByteWriter w;
  w.put(kLedgerMagic);
  w.put(kLedgerVersion);
  w.put(options_.dataset_size);
  w.put(options_.shard_size);
  w.put(options_.seed);
  w.put<std::uint8_t>(options_.shuffle_shards ? 1 : 0);
  w.put<std::uint8_t>(options_.shuffle_within_shard ? 1 : 0);
  w.put(options_.max_epochs);
  w.put<std::int32_t>(world_size_);
  w.put(next_epoch_);
  w.put_vector(completed_);
  w.put<std::uint64_t>(open_.size());
  for (const auto& e : open_) {
    w.put(e.epoch);
    w.put(e.next_order);
    w.put(e.todo);
    w.put(e.doing);
    w.put(e.done);
    w.put_vector(std::vector<TodoPiece>(e.returned.begin(), e.returned.end()));
  }
  for (const auto& list : doing_) w.put_vector(list);
  for (const auto& list : reserved_) w.put_vector(std::vector<Reserved>(list.rbegin(), list.rend()));  // old order
  return w.take();
}

Ledger Ledger::restore(std::span<const std::byte> bytes, int world_size) {
  if (world_size < 1) throw UsageError("dds: world size must be at least 1, got " + std::to_string(world_size));
  try {
    detail::ByteReader r(bytes);
    if (r.get<std::uint64_t>() != kLedgerMagic) throw CheckpointError("not a DDS ledger (bad magic)");
    const auto version = r.get<std::uint32_t>();
    if (version != kLedgerVersion) {
      throw CheckpointError("DDS ledger version " + std::to_string(version) + ", this build reads version " +
                            std::to_string(kLedgerVersion));
    }
    LedgerOptions options;
    options.dataset_size = r.get<std::int64_t>();
    options.shard_size = r.get<std::int64_t>();
    options.seed = r.get<std::uint64_t>();
    options.shuffle_shards = r.get<std::uint8_t>() != 0;
    options.shuffle_within_shard = r.get<std::uint8_t>() != 0;
    options.max_epochs = r.get<std::int64_t>();
    const auto old_world = r.get<std::int32_t>();
    // Each old rank has two lists below, 8 bytes each at least, so the bytes bound the count.
    if (old_world < 1 || static_cast<std::uint64_t>(old_world) > r.remaining() / 16) {
      throw CheckpointError("saved world size " + std::to_string(old_world) + " is out of range [1, " +
                            std::to_string(r.remaining() / 16) + "] (two 8-byte list headers per rank follow)");
    }
    Ledger ledger(options, world_size);
    const ShardMap& map = ledger.map_;
    if (map.shard_size() != options.shard_size) throw CheckpointError("bad shard size");
    ledger.next_epoch_ = r.get<std::int64_t>();
    // acquire increments next_epoch_; at the maximum that would overflow.
    if (ledger.next_epoch_ < 0 || ledger.next_epoch_ == std::numeric_limits<std::int64_t>::max() ||
        (options.max_epochs > 0 && ledger.next_epoch_ > options.max_epochs)) {
      throw CheckpointError(
          "next epoch " + std::to_string(ledger.next_epoch_) + " is out of range [0, " +
          (options.max_epochs > 0 ? std::to_string(options.max_epochs) + "] (max_epochs)" : std::string("2^63 - 1)")));
    }
    ledger.completed_ = r.get_vector<std::int64_t>();
    for (const auto epoch : ledger.completed_) {
      if (epoch < 0 || epoch >= ledger.next_epoch_) {
        throw CheckpointError("completed epoch " + std::to_string(epoch) + " was never started (next epoch " +
                              std::to_string(ledger.next_epoch_) + ")");
      }
    }
    const auto open_count = r.get<std::uint64_t>();
    if (open_count > static_cast<std::uint64_t>(ledger.next_epoch_)) {
      throw CheckpointError("more open epochs than epochs started");
    }
    auto check_range = [&](std::int64_t epoch, std::int64_t shard, std::int64_t begin, std::int64_t end) {
      if (shard < 0 || shard >= map.num_shards() || begin < 0 || begin > end || end > map.shard_length(shard) ||
          ledger.find_epoch(epoch) == nullptr) {
        throw CheckpointError("a piece is out of range (epoch " + std::to_string(epoch) + ", shard " +
                              std::to_string(shard) + ")");
      }
    };
    for (std::uint64_t i = 0; i < open_count; ++i) {
      Epoch e;
      e.epoch = r.get<std::int64_t>();
      e.next_order = r.get<std::int64_t>();
      e.todo = r.get<std::int64_t>();
      e.doing = r.get<std::int64_t>();
      e.done = r.get<std::int64_t>();
      if (e.epoch < 0 || e.epoch >= ledger.next_epoch_ || e.next_order < 0 || e.next_order > map.num_shards() ||
          (!ledger.open_.empty() && ledger.open_.back().epoch >= e.epoch)) {
        throw CheckpointError("bad open epoch record");
      }
      // Each counter is a number of positions of one epoch, so in [0, N]; check_identity
      // then checks their sum, without overflow.
      const std::int64_t n = map.dataset_size();
      if (e.todo < 0 || e.todo > n || e.doing < 0 || e.doing > n || e.done < 0 || e.done > n) {
        throw CheckpointError("open epoch " + std::to_string(e.epoch) + ": todo " + std::to_string(e.todo) +
                              ", doing " + std::to_string(e.doing) + " or done " + std::to_string(e.done) +
                              " is outside [0, dataset size " + std::to_string(n) + "]");
      }
      const auto returned = r.get_vector<TodoPiece>();
      e.returned.assign(returned.begin(), returned.end());
      ledger.open_.push_back(std::move(e));
      for (const auto& p : returned) check_range(ledger.open_.back().epoch, p.shard, p.begin, p.end);
    }
    // Old DOING pieces and old reservations, per old rank, in acquisition order.
    std::vector<std::vector<Reserved>> tails(static_cast<std::size_t>(old_world));
    for (auto& list : tails) {
      for (const auto& p : r.get_vector<Piece>()) {
        check_range(p.epoch, p.shard, p.committed, p.end);
        if (p.consumed < p.committed || p.consumed > p.end) throw CheckpointError("a DOING piece has bad offsets");
        Epoch& e = ledger.epoch_state(p.epoch);
        e.doing -= p.end - p.committed;  // uncommitted tail: DOING -> TODO
        e.todo += p.end - p.committed;
        list.push_back(Reserved{p.epoch, p.shard, p.committed, p.end});
      }
    }
    for (auto& list : tails) {
      for (const auto& p : r.get_vector<Reserved>()) {
        check_range(p.epoch, p.shard, p.begin, p.end);
        list.push_back(p);
      }
    }
    if (!r.done()) throw CheckpointError("trailing bytes after the DDS ledger");
    if (old_world == world_size) {
      for (std::size_t rank = 0; rank < tails.size(); ++rank) {
        auto& own = ledger.reserved_[rank];
        for (auto t = tails[rank].rbegin(); t != tails[rank].rend(); ++t) {  // stored with the next one last
          if (t->begin < t->end) own.push_back(*t);
        }
        ledger.reserved_pieces_ += static_cast<std::int64_t>(own.size());
      }
    } else {
      std::vector<Reserved> all;
      for (auto& list : tails) all.insert(all.end(), list.begin(), list.end());
      ledger.return_tails(std::move(all));
    }
    ledger.check_identity();
    return ledger;
  } catch (const CheckpointError& e) {
    throw CheckpointError(std::string("DDS ledger checkpoint cannot be restored: ") + e.what());
  } catch (const Error& e) {
    throw CheckpointError(std::string("DDS ledger checkpoint is corrupt or truncated: ") + e.what());
  }
}

}  // namespace antdt::dds

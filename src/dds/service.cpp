#include "dds/service.hpp"

#include <exception>
#include <string>

#include "antdt/error.hpp"
#include "core/bytes.hpp"
#include "dds/wire.hpp"

namespace antdt::dds {

namespace {
constexpr std::uint8_t kReplyOk = 0;
constexpr std::uint8_t kReplyUsageError = 1;  // a bad argument: every rank throws UsageError
constexpr std::uint8_t kReplyError = 2;       // anything else: every rank throws Error
}  // namespace

Service::Service(const Communicator& comm, const LedgerOptions& options, std::int64_t demand, int prefetch_steps)
    : comm_(&comm), channel_(comm), client_(options) {
  if (comm.is_root()) coordinator_.emplace(options, comm.size(), prefetch_steps);
  // The initial grants travel in the same exchange as every later step, with nothing consumed.
  exchange(0, demand);
}

std::vector<std::int64_t> Service::next(std::int64_t k) {
  if (k < 0 || taken_this_step_ + k > demand_) {
    throw UsageError("dds service: this step asks for " + std::to_string(taken_this_step_ + k) +
                     " samples but declared a demand of " + std::to_string(demand_) +
                     "; pass the larger demand to end_step (or the constructor) one step ahead");
  }
  auto indices = client_.take(k);
  taken_this_step_ += static_cast<std::int64_t>(indices.size());
  return indices;
}

void Service::end_step(std::int64_t next_demand) {
  exchange(taken_this_step_, next_demand);
  taken_this_step_ = 0;  // only once committed: a rejected step can be ended again
}

void Service::exchange(std::int64_t consumed, std::int64_t demand) {
  detail::ByteWriter report;
  report.put(consumed);
  report.put(demand);
  // Runs on rank 0 only. An exception here must not escape: the other ranks are already
  // waiting in the reply broadcast, so the error travels in the reply and every rank throws.
  // Arguments are checked here too, not locally, so that one rank's bad argument fails the
  // step on every rank instead of leaving the others waiting in the collective. Demands are
  // checked before anything is committed, so a rejected step changes nothing.
  auto decide = [this](const std::vector<std::span<const std::byte>>& reports) {
    detail::ByteWriter reply;
    auto refuse = [](std::uint8_t kind, const char* what) {
      detail::ByteWriter error;
      error.put(kind);
      error.put_string(what);
      return error.take();
    };
    try {
      std::vector<std::int64_t> consumed_by(reports.size()), demand_of(reports.size());
      for (std::size_t r = 0; r < reports.size(); ++r) {
        detail::ByteReader in(reports[r]);
        consumed_by[r] = in.get<std::int64_t>();
        demand_of[r] = in.get<std::int64_t>();
        if (demand_of[r] < 0) {
          throw UsageError("dds service: rank " + std::to_string(r) + " declared a negative demand (" +
                           std::to_string(demand_of[r]) + ")");
        }
      }
      coordinator_->commit_step(consumed_by);
      const auto grants = coordinator_->grant(demand_of);
      reply.put(kReplyOk);
      reply.put(coordinator_->ledger().completed_epochs());
      reply.put<std::uint8_t>(coordinator_->ledger().exhausted() ? 1 : 0);
      encode_grants(grants, reply);
    } catch (const UsageError& e) {
      return refuse(kReplyUsageError, e.what());
    } catch (const std::exception& e) {
      return refuse(kReplyError, e.what());
    }
    return reply.take();
  };
  const auto reply = channel_.exchange(report.bytes(), decide);
  detail::ByteReader in(reply);
  const auto status = in.get<std::uint8_t>();
  if (status == kReplyUsageError) throw UsageError(in.get_string());
  if (status != kReplyOk) throw Error("dds service: rank 0 rejected the step: " + in.get_string());
  completed_epochs_ = in.get<std::int64_t>();
  exhausted_ = in.get<std::uint8_t>() != 0;
  client_.add(decode_grants(in), comm_->rank());
  demand_ = demand;
}

}  // namespace antdt::dds

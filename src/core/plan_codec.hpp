// Private: wire and checkpoint form of a Plan (the Session's control reply and the
// Controller's checkpoint both use it).
#pragma once

#include "antdt/plan.hpp"
#include "core/bytes.hpp"

namespace antdt {

inline void encode_plan(const Plan& p, detail::ByteWriter& w) {
  w.put<std::int64_t>(p.effective_step);
  w.put<std::int64_t>(p.global_batch);
  w.put<std::int64_t>(p.version);
  w.put_vector(p.batch);
  w.put_vector(p.micro_batch_cap);
  w.put_vector(p.accumulation);
  w.put_string(p.reason);
  w.put<std::uint8_t>(p.pooled ? 1 : 0);
  w.put_vector(p.sitting);
}

inline Plan decode_plan(detail::ByteReader& r) {
  Plan p;
  p.effective_step = r.get<std::int64_t>();
  p.global_batch = r.get<std::int64_t>();
  p.version = r.get<std::int64_t>();
  p.batch = r.get_vector<std::int64_t>();
  p.micro_batch_cap = r.get_vector<std::int64_t>();
  p.accumulation = r.get_vector<std::int32_t>();
  p.reason = r.get_string();
  const auto pooled = r.get<std::uint8_t>();
  if (pooled > 1) throw Error("plan record is inconsistent: its pooled flag is " + std::to_string(pooled));
  p.pooled = pooled == 1;
  p.sitting = r.get_vector<std::int32_t>();
  if (p.micro_batch_cap.size() != p.batch.size() || p.accumulation.size() != p.batch.size()) {
    throw Error("plan record is inconsistent: batch, cap and accumulation lengths differ");
  }
  return p;
}

}  // namespace antdt

#include "dds/wire.hpp"

#include <string>

namespace antdt::dds {

void encode_grants(const std::vector<Grant>& grants, antdt::detail::ByteWriter& out) {
  out.put<std::uint64_t>(grants.size());
  for (const auto& g : grants) {
    out.put(g.epoch);
    out.put(g.shard);
    out.put(g.begin);
    out.put(g.end);
    out.put(g.rank);
  }
}

std::vector<Grant> decode_grants(antdt::detail::ByteReader& in) {
  const auto count = in.get<std::uint64_t>();
  if (count > in.remaining() / kGrantWireBytes) {
    throw Error("dds: grant list claims " + std::to_string(count) + " grants but only " +
                std::to_string(in.remaining()) + " bytes follow");
  }
  std::vector<Grant> grants(static_cast<std::size_t>(count));
  for (auto& g : grants) {
    g.epoch = in.get<std::int64_t>();
    g.shard = in.get<std::int64_t>();
    g.begin = in.get<std::int64_t>();
    g.end = in.get<std::int64_t>();
    g.rank = in.get<std::int32_t>();
  }
  return grants;
}

}  // namespace antdt::dds

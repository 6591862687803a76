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
    if (g.epoch < 0 || g.shard < 0 || g.begin < 0 || g.begin > g.end || g.rank < 0) {
      throw Error("dds: malformed grant (epoch " + std::to_string(g.epoch) + ", shard " + std::to_string(g.shard) +
                  ", [" + std::to_string(g.begin) + ", " + std::to_string(g.end) + "), rank " + std::to_string(g.rank) +
                  "): every field must be >= 0 and begin <= end");
    }
  }
  return grants;
}

}  // namespace antdt::dds

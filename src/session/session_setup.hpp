// Private: what a Session is built from, as pure functions of its options (no MPI): the checks,
// the ledger, the first plan, and rank 0's coordinator options once every rank's cap is known.
#pragma once

#include <cstdint>
#include <vector>

#include "core/plan_rules.hpp"
#include "dds/dds.hpp"
#include "protocol/step_coordinator.hpp"
#include "session/session.hpp"

namespace antdt::detail {

// UsageError with one line when the options cannot run on `world` ranks (`dataset_known`
// false: before the data set's size is known, which is then not checked).
void validate_session_options(const SessionOptions& o, int world, bool dataset_known = true);
// The ledger's options (shard size defaults to about 10 global batches). Validates.
[[nodiscard]] dds::LedgerOptions session_ledger_options(const SessionOptions& o, int world);
// How steps are cut: pooled when the policy pools (nd), with the session's backup workers.
[[nodiscard]] PoolOptions pool_options(const SessionOptions& o, int world);
// Rank 0's StepCoordinator options, with the Controller's resolved from every rank's cap m_i.
// `nodes`: every rank's node name on rank 0 (empty elsewhere).
[[nodiscard]] protocol::StepCoordinatorOptions coordinator_options(const SessionOptions& o,
                                                                   const std::vector<std::int64_t>& caps,
                                                                   const std::vector<std::string>& nodes = {});
// Equal shares; or, for a policy that rebalances, a split by GPU-generation priors (0 = unknown)
// before anything is measured.
[[nodiscard]] Plan first_plan(const SessionOptions& o, const std::vector<std::int64_t>& caps,
                              const std::vector<double>& priors);

}  // namespace antdt::detail

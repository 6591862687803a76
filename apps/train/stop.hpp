// antdt-train's stop signals (docs/errors.md, "Stopping a run"). The first of the
// --stop-signals (default SIGTERM, SIGINT, SIGUSR1: a time limit, preemption, Ctrl-C) asks the
// Session to stop after the step under way; rank 0 checkpoints it and every rank exits with
// cli::kExitStopped. The handler resets itself, so a second signal has its default effect and a
// job that will not stop can still be ended.
#pragma once

#include <string>
#include <vector>

namespace antdt::train {

// "TERM,INT,USR1" (names with or without SIG, or numbers), or "none". UsageError otherwise.
[[nodiscard]] std::vector<int> parse_stop_signals(const std::string& spec);
void install_stop_handlers(const std::vector<int>& signals);
// The first stop signal this process received; 0: none.
[[nodiscard]] int stop_signal() noexcept;
// "SIGTERM"
[[nodiscard]] std::string signal_name(int signal);

}  // namespace antdt::train

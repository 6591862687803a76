// antdt-checkpoint-probe DIR: what a resume does on rank 0 before it restores anything (find the
// newest usable checkpoint, open it, read and check every entry), in a process of its own, so
// that apps.safety.ResumeFromDamagedCheckpoint can try hundreds of damaged files and see each
// one's exit status: 0 and the chosen file on stdout; 2 and one error line when the directory
// holds checkpoints but none is usable; a signal if reading a damaged file crashed.
#include <cstdio>
#include <exception>
#include <optional>
#include <string>

#include "antdt/error.hpp"
#include "checkpoint/checkpoint.hpp"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CHECKPOINT_DIR\n", argv[0]);
    return 64;
  }
  const std::string dir = argv[1];
  try {
    const std::optional<std::string> latest = antdt::find_latest_checkpoint(dir);
    if (!latest) {
      const auto all = antdt::list_checkpoints(dir);
      if (all.empty()) {
        std::printf("none\n");
        return 0;
      }
      antdt::CheckpointReader(all.back()).verify();  // as the Job does: the newest one's reason
      throw antdt::CheckpointError("none of the " + std::to_string(all.size()) + " checkpoints in " + dir +
                                   " is usable");
    }
    const antdt::CheckpointReader reader(*latest);
    reader.verify();
    std::printf("%s\n", latest->c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "antdt-checkpoint-probe: error: %s\n", e.what());
    return 2;
  }
}

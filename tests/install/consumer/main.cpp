// Built against the installed package by tests/install/run_consumer_test.cmake.
#include <antdt/antdt.hpp>

#include <cstdio>

int main(int argc, char** argv) {
  antdt::Environment env(argc, argv);
  auto comm = antdt::Communicator::duplicate(MPI_COMM_WORLD);
  int ok = comm.size() == env.world_size() ? 1 : 0;
  int all = 0;
  ANTDT_CHECK_MPI(MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, comm.get()));
  if (comm.is_root()) std::printf(all ? "antdt consumer OK (%d ranks, antdt %s)\n" : "antdt consumer FAILED\n",
                                  comm.size(), ANTDT_VERSION_STRING);
  return all ? 0 : 1;
}

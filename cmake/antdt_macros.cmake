# Test helpers. ctest owns every MPI launch; the launch line comes from FindMPI's MPIEXEC_*
# variables, plus what Open MPI needs to run oversubscribed as root (CI runs as root on 2 cores).

set(ANTDT_MPI_TEST_ENV
    "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1;OMPI_MCA_btl_vader_single_copy_mechanism=none;OMPI_MCA_mpi_yield_when_idle=1"
    CACHE STRING "Environment for every MPI test launched by ctest")
set(ANTDT_DEFAULT_TEST_RANKS "1;2;3;4" CACHE STRING "World sizes an MPI test runs at unless it says otherwise")

# antdt_add_mpi_test(NAME <name> SOURCES <src...> [RANKS <n...>] [LIBS <libs...>]
#                    [LABELS <labels...>] [TIMEOUT <s>] [ARGS <args...>])
# Builds one GoogleTest executable with the MPI-aware main and registers it with ctest once
# per world size, as <name>.np<N>.
function(antdt_add_mpi_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "SOURCES;RANKS;LIBS;LABELS;ARGS" ${ARGN})
  if(NOT T_RANKS)
    set(T_RANKS ${ANTDT_DEFAULT_TEST_RANKS})
  endif()
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  if(NOT TARGET ${T_NAME})
    add_executable(${T_NAME} ${T_SOURCES})
    target_link_libraries(${T_NAME} PRIVATE antdt_test_main antdt::antdt antdt_warnings ${T_LIBS})
  endif()
  foreach(n IN LISTS T_RANKS)
    add_test(NAME ${T_NAME}.np${n}
             COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${n} ${MPIEXEC_PREFLAGS}
                     $<TARGET_FILE:${T_NAME}> ${MPIEXEC_POSTFLAGS} ${T_ARGS})
    set_tests_properties(${T_NAME}.np${n} PROPERTIES
      ENVIRONMENT "${ANTDT_MPI_TEST_ENV}"
      PROCESSORS ${n}
      TIMEOUT ${T_TIMEOUT}
      LABELS "mpi;${T_LABELS}")
  endforeach()
endfunction()

# antdt_add_test(NAME <name> SOURCES <src...> [LIBS ...] [LABELS ...] [TIMEOUT s])
# A serial GoogleTest executable (pure logic: ledger, controller, planner). It still uses the
# MPI-aware main, started as a single process without mpirun (a singleton MPI init).
function(antdt_add_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE antdt_test_main antdt::antdt antdt_warnings ${T_LIBS})
  add_test(NAME ${T_NAME} COMMAND ${T_NAME})
  set_tests_properties(${T_NAME} PROPERTIES ENVIRONMENT "${ANTDT_MPI_TEST_ENV}"
                       TIMEOUT ${T_TIMEOUT} LABELS "unit;${T_LABELS}")
endfunction()

# antdt_add_core_test(NAME <name> SOURCES <src...> [LABELS ...] [TIMEOUT s])
# A unit test of the core (src/core, dds, monitor, controller, protocol, agent, sim): it links
# the core's objects and GoogleTest alone, with no MPI, and runs as a plain process. The
# core.isolated test checks that such a binary has no MPI library in it.
function(antdt_add_core_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "SOURCES;LABELS" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE antdt_core GTest::gtest_main antdt_warnings)
  add_test(NAME ${T_NAME} COMMAND ${T_NAME})
  set_tests_properties(${T_NAME} PROPERTIES TIMEOUT ${T_TIMEOUT} LABELS "unit;core;${T_LABELS}")
endfunction()

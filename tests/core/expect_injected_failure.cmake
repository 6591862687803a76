# Runs the 4-rank harness test with a failure injected on rank 2 and asserts that the run
# fails and names rank 2. Invoked by ctest as cmake -P.
set(ENV{ANTDT_TEST_INJECT_FAILURE_RANK} 2)
execute_process(COMMAND ${MPIEXEC} ${NP_FLAG} 4 --oversubscribe --allow-run-as-root ${EXE}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 100)
message("${out}\n${err}")
if(rc EQUAL 0)
  message(FATAL_ERROR "the harness returned 0 although rank 2 failed")
endif()
if(NOT err MATCHES "\\[rank 2\\] FAILED Harness.InjectedFailure")
  message(FATAL_ERROR "rank 2's failure was not reported")
endif()
if(NOT err MATCHES "FAILED on 1 of 4 ranks: 2")
  message(FATAL_ERROR "rank 0's summary does not name rank 2")
endif()

# Installs the build tree into a scratch prefix, then configures, builds and runs a tiny
# consumer project against it with find_package(antdt). Invoked by ctest as cmake -P.
file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "command failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  set(LAST_OUT "${out}${err}" PARENT_SCOPE)
endfunction()
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/install/consumer -B ${WORK_DIR}/build -G ${CMAKE_GENERATOR}
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release
    -DANTDT_EXAMPLE_SOURCE=${SOURCE_DIR}/apps/examples/least_squares.cpp)
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
run(${MPIEXEC} -n 3 --oversubscribe --allow-run-as-root ${WORK_DIR}/build/antdt_consumer 150 1,1,0.5)
message("${LAST_OUT}")
if(NOT LAST_OUT MATCHES "antdt consumer OK")
  message(FATAL_ERROR "the consumer did not report success")
endif()

# Installs the build tree into a scratch prefix, moves the prefix elsewhere (an installed tree
# must run from wherever it is put), then configures, builds and runs a tiny consumer project
# against it with find_package(antdt), and runs the installed antdt-train, all with no
# LD_LIBRARY_PATH. Invoked by ctest as cmake -P.
#   CONSUMER_CXX_FLAGS / CONSUMER_LINKER_FLAGS: the build's own flags, so that a consumer of a
#   sanitized library (the asan preset) is built with the same sanitizers.
file(REMOVE_RECURSE ${WORK_DIR})
set(installed ${WORK_DIR}/prefix)
set(prefix ${WORK_DIR}/moved/prefix)
function(run)
  execute_process(COMMAND ${CMAKE_COMMAND} -E env --unset=LD_LIBRARY_PATH ${ARGN}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "command failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  set(LAST_OUT "${out}${err}" PARENT_SCOPE)
endfunction()
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${installed})
file(MAKE_DIRECTORY ${WORK_DIR}/moved)
file(RENAME ${installed} ${prefix})
run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/install/consumer -B ${WORK_DIR}/build -G ${CMAKE_GENERATOR}
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release
    "-DCMAKE_CXX_FLAGS=${CONSUMER_CXX_FLAGS}" "-DCMAKE_EXE_LINKER_FLAGS=${CONSUMER_LINKER_FLAGS}"
    -DANTDT_EXAMPLE_SOURCE=${SOURCE_DIR}/apps/examples/least_squares.cpp)
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
run(${MPIEXEC} -n 3 --oversubscribe --allow-run-as-root ${WORK_DIR}/build/antdt_consumer 150 1,1,0.5)
message("${LAST_OUT}")
if(NOT LAST_OUT MATCHES "antdt consumer OK")
  message(FATAL_ERROR "the consumer did not report success")
endif()
# The installed apps start from the moved prefix: they find libantdt through their run path.
if(EXISTS ${prefix}/bin/antdt-train)
  run(${prefix}/bin/antdt-train --version)
  run(${MPIEXEC} -n 2 --oversubscribe --allow-run-as-root ${prefix}/bin/antdt-train --steps 3 --synthetic-samples 256
      --global-batch 32 --quiet --summary-json ${WORK_DIR}/installed-train.json)
  file(READ ${WORK_DIR}/installed-train.json summary)
  if(NOT summary MATCHES "\"samples\": 96,")
    message(FATAL_ERROR "the installed antdt-train did not train 3 steps of 32 samples:\n${summary}")
  endif()
  run(${prefix}/bin/antdt-datagen -o ${WORK_DIR}/installed.h5 --samples 10 --dim 2 --classes 2)
  message("installed antdt-train and antdt-datagen run from ${prefix}")
endif()

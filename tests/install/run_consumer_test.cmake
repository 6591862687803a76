# Installs the build tree into a scratch prefix, moves the prefix elsewhere (an installed tree
# must run from wherever it is put), then configures, builds and runs the installed examples
# (share/antdt/examples) against it with find_package(antdt), and runs the installed
# antdt-train, all with no LD_LIBRARY_PATH. Invoked by ctest as cmake -P.
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
# The package installs only the public API, and docs/job.md ("Which headers a program needs")
# names every header it installs: no private header (src/) is installed, none is undocumented.
file(GLOB installed_headers RELATIVE ${prefix}/include/antdt ${prefix}/include/antdt/*.hpp)
file(READ ${SOURCE_DIR}/docs/job.md job_md)
string(FIND "${job_md}" "## Which headers a program needs" at)
string(SUBSTRING "${job_md}" ${at} -1 section)
string(FIND "${section}" "\n## " end)
string(SUBSTRING "${section}" 0 ${end} section)
string(REGEX MATCHALL "antdt/[a-z_]+\\.hpp" documented "${section}")
list(TRANSFORM documented REPLACE "^antdt/" "")
list(REMOVE_DUPLICATES documented)
foreach(h IN LISTS installed_headers)
  list(FIND documented ${h} i)
  if(i LESS 0)
    message(FATAL_ERROR "include/antdt/${h} is installed but docs/job.md (\"Which headers a program needs\") does not name it")
  endif()
endforeach()
foreach(h IN LISTS documented)
  list(FIND installed_headers ${h} i)
  if(i LESS 0 AND NOT h STREQUAL "torch.hpp")  # torch.hpp: with the adapter only
    message(FATAL_ERROR "docs/job.md names antdt/${h} as public, but the package does not install it")
  endif()
endforeach()
list(LENGTH installed_headers n_headers)
message("installed headers (${n_headers}): ${installed_headers}")
# The docs and the examples' sources go with the package.
foreach(f share/doc/antdt/README.md share/doc/antdt/job.md share/doc/antdt/errors.md
          share/antdt/examples/least_squares.cpp share/antdt/examples/mlp_adam.cpp)
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "the package does not install ${f}")
  endif()
endforeach()
# A user's project: the examples as installed (share/antdt/examples), built against the
# installed package alone (find_package(antdt COMPONENTS cli)); the libtorch example is
# torch.install_consumer's.
run(${CMAKE_COMMAND} -S ${prefix}/share/antdt/examples -B ${WORK_DIR}/build -G ${CMAKE_GENERATOR}
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release -DCMAKE_DISABLE_FIND_PACKAGE_Torch=TRUE
    "-DCMAKE_CXX_FLAGS=${CONSUMER_CXX_FLAGS}" "-DCMAKE_EXE_LINKER_FLAGS=${CONSUMER_LINKER_FLAGS}")
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
run(${MPIEXEC} -n 3 --oversubscribe --allow-run-as-root ${WORK_DIR}/build/antdt-example-least-squares --steps 150
    --emulate-speed 1,1,0.5 --quiet --summary-json ${WORK_DIR}/least-squares.json)
message("${LAST_OUT}")
if(NOT LAST_OUT MATCHES "the true weights recovered")
  message(FATAL_ERROR "the installed least-squares example did not recover the true weights")
endif()
file(READ ${WORK_DIR}/least-squares.json summary)
if(NOT summary MATCHES "\"duplicated_samples\": 0," OR NOT summary MATCHES "\"missing_samples\": 0,")
  message(FATAL_ERROR "the installed least-squares example trained a sample twice or missed one:\n${summary}")
endif()
run(${MPIEXEC} -n 2 --oversubscribe --allow-run-as-root ${WORK_DIR}/build/antdt-example-mlp-adam --steps 5 --quiet
    --checkpoint-dir ${WORK_DIR}/mlp-ckpt)
if(NOT EXISTS ${WORK_DIR}/mlp-ckpt/ckpt-00000005.h5)
  message(FATAL_ERROR "the installed MLP example did not checkpoint its 5 steps")
endif()
# Without CLI11 the cli component is not found, and find_package says what to install.
execute_process(COMMAND ${CMAKE_COMMAND} -S ${prefix}/share/antdt/examples -B ${WORK_DIR}/build-no-cli11
                        -G ${CMAKE_GENERATOR} -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_DISABLE_FIND_PACKAGE_CLI11=TRUE
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0 OR NOT "${out}${err}" MATCHES "needs CLI11")
  message(FATAL_ERROR "without CLI11, find_package(antdt COMPONENTS cli) must fail naming CLI11:\n${out}${err}")
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

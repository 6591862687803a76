# Installs the build tree into a scratch prefix and builds and runs tests/torch/consumer against
# it with find_package(antdt COMPONENTS torch), with no LD_LIBRARY_PATH. Invoked by ctest as
# cmake -P with SOURCE_DIR, BUILD_DIR, WORK_DIR and CMAKE_GENERATOR.
file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix} OUTPUT_QUIET COMMAND_ERROR_IS_FATAL ANY)
foreach(f include/antdt/torch.hpp lib/cmake/antdt/antdtTorchTargets.cmake)
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "the package does not install ${f}")
  endif()
endforeach()
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/torch/consumer -B ${WORK_DIR}/build
                        -G ${CMAKE_GENERATOR} -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release
                COMMAND_ERROR_IS_FATAL ANY)
execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK_DIR}/build COMMAND_ERROR_IS_FATAL ANY)
execute_process(COMMAND ${CMAKE_COMMAND} -E env --unset=LD_LIBRARY_PATH ${WORK_DIR}/build/antdt_torch_consumer
                OUTPUT_VARIABLE out COMMAND_ERROR_IS_FATAL ANY)
message("${out}")
if(NOT out MATCHES "antdt torch consumer OK: 8 gradient values")
  message(FATAL_ERROR "the consumer did not report success")
endif()
# The installed examples project builds the libtorch example too (find_package(antdt COMPONENTS
# cli OPTIONAL_COMPONENTS torch)), and it trains from the moved prefix.
execute_process(COMMAND ${CMAKE_COMMAND} -S ${prefix}/share/antdt/examples -B ${WORK_DIR}/examples
                        -G ${CMAKE_GENERATOR} -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release
                OUTPUT_QUIET COMMAND_ERROR_IS_FATAL ANY)
execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK_DIR}/examples --target antdt-example-torch-cnn
                COMMAND_ERROR_IS_FATAL ANY)
execute_process(COMMAND ${prefix}/bin/antdt-datagen --kind digits -n 256 -o ${WORK_DIR}/digits.h5 OUTPUT_QUIET
                COMMAND_ERROR_IS_FATAL ANY)
execute_process(COMMAND ${CMAKE_COMMAND} -E env --unset=LD_LIBRARY_PATH ${WORK_DIR}/examples/antdt-example-torch-cnn
                        --data ${WORK_DIR}/digits.h5 --global-batch 64 --steps 2 --quiet
                        --summary-json ${WORK_DIR}/torch-cnn.json
                COMMAND_ERROR_IS_FATAL ANY)
file(READ ${WORK_DIR}/torch-cnn.json summary)
if(NOT summary MATCHES "\"samples\": 128,")
  message(FATAL_ERROR "the installed libtorch example did not train 2 steps of 64 samples:\n${summary}")
endif()
message("the installed examples project built and ran the libtorch example")

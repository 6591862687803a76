# The core is MPI-free by construction (docs/design.md, "Layers"): this script fails when
#  - a source or header of the core (src/core, dds, monitor, controller, protocol, agent, sim)
#    includes MPI, HDF5, CUDA, or a header of the transport, the runtime, the checkpoint store
#    or the Session (which speak MPI);
#  - a header or source of the transport includes a header of the core, except the two leaf
#    headers of shared vocabulary (core/error_kind.hpp: which error every rank throws;
#    core/option_names.hpp: an option's name in messages), which hold no state of the core;
#  - the core's unit test binary CORE_TEST links an MPI library.
# cmake -DSOURCE_DIR=... -DCORE_TEST=... -P check_core_isolated.cmake
set(core_dirs core dds monitor controller protocol agent sim)
set(forbidden_in_core "<mpi\\.h>" "<hdf5\\.h>" "<cuda" "<nccl" "\"antdt/(data|runtime)\\.hpp\""
                      "\"(transport|runtime|checkpoint|session|comm|data|model)/")
set(problems "")
foreach(dir IN LISTS core_dirs)
  file(GLOB files ${SOURCE_DIR}/src/${dir}/*.hpp ${SOURCE_DIR}/src/${dir}/*.cpp)
  foreach(f IN LISTS files)
    file(STRINGS ${f} includes REGEX "^[ \t]*#[ \t]*include")
    foreach(line IN LISTS includes)
      foreach(pattern IN LISTS forbidden_in_core)
        if(line MATCHES "${pattern}")
          string(APPEND problems "\n  ${f}: ${line}")
        endif()
      endforeach()
    endforeach()
  endforeach()
endforeach()
file(GLOB transport ${SOURCE_DIR}/src/transport/*.hpp ${SOURCE_DIR}/src/transport/*.cpp)
foreach(f IN LISTS transport)
  file(STRINGS ${f} includes REGEX "^[ \t]*#[ \t]*include")
  foreach(line IN LISTS includes)
    foreach(dir IN LISTS core_dirs)
      if(line MATCHES "\"${dir}/" AND NOT line MATCHES "\"core/(error_kind|option_names)\\.hpp\"")
        string(APPEND problems "\n  ${f}: ${line} (the transport must not know the core)")
      endif()
    endforeach()
  endforeach()
endforeach()
if(CORE_TEST)
  execute_process(COMMAND ldd ${CORE_TEST} OUTPUT_VARIABLE libs RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    string(APPEND problems "\n  ldd ${CORE_TEST} failed")
  elseif(libs MATCHES "libmpi|libhdf5|libcudart")
    string(APPEND problems "\n  ${CORE_TEST} links MPI, HDF5 or CUDA:\n${libs}")
  endif()
endif()
if(problems)
  message(FATAL_ERROR "the core is not isolated:${problems}")
endif()
message(STATUS "the core includes no MPI, HDF5, CUDA, transport or Session header, and its test links none of them")

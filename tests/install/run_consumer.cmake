# The installed package as a consumer sees it (ctest install_consumer): install this build into a fresh
# prefix, build examples/consumer against it with find_package(qlinear), run it on a checkpoint and on a
# quantized layer. Fails when any step fails, or when find_package found qlinear anywhere but the prefix.
#
#   cmake -DBUILD_DIR=<build> -DSOURCE_DIR=<repo> -DWORK_DIR=<scratch> [-DGENERATOR=Ninja] [-DLIBDIR=lib]
#         -P run_consumer.cmake
foreach(var BUILD_DIR SOURCE_DIR WORK_DIR)
  if(NOT ${var})
    message(FATAL_ERROR "run_consumer.cmake: -D${var}=... is required")
  endif()
endforeach()
if(NOT LIBDIR)
  set(LIBDIR lib)
endif()
if(NOT GENERATOR)
  set(GENERATOR "Unix Makefiles")
endif()

set(prefix ${WORK_DIR}/prefix)
set(consumer_build ${WORK_DIR}/consumer-build)
file(REMOVE_RECURSE ${WORK_DIR})

function(step name)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("---- ${name}\n${out}${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "install_consumer: ${name} failed (exit ${rc}): ${ARGN}")
  endif()
  set(step_output "${out}${err}" PARENT_SCOPE)
endfunction()

step("install into ${prefix}" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix} --component dev)
foreach(f include/qlinear/registry.hpp ${LIBDIR}/libqlinear.a ${LIBDIR}/cmake/qlinear/qlinearConfig.cmake
          ${LIBDIR}/cmake/qlinear/qlinearConfigVersion.cmake ${LIBDIR}/cmake/qlinear/qlinearTargets.cmake)
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "install_consumer: ${prefix}/${f} was not installed")
  endif()
endforeach()

# CMAKE_FIND_USE_PACKAGE_REGISTRY=OFF: only the prefix may provide qlinear.
step("configure examples/consumer" ${CMAKE_COMMAND} -S ${SOURCE_DIR}/examples/consumer -B ${consumer_build}
     -G ${GENERATOR} -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=${prefix}
     -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
if(NOT step_output MATCHES "from ${prefix}/${LIBDIR}/cmake/qlinear")
  message(FATAL_ERROR "install_consumer: find_package(qlinear) did not use the installed package in ${prefix}")
endif()
step("build examples/consumer" ${CMAKE_COMMAND} --build ${consumer_build})

step("run on a checkpoint" ${consumer_build}/qlinear_consumer ${SOURCE_DIR}/tests/fixtures/w8a8-fp8-channel)
if(NOT step_output MATCHES "consumer: all layers ok")
  message(FATAL_ERROR "install_consumer: the consumer did not report success")
endif()
step("run on a quantized layer" ${consumer_build}/qlinear_consumer --scheme w4a16-mxfp4)

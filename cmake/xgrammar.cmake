# xgrammar (Apache-2.0), the grammar engine behind structured outputs, built from its PyPI
# source distribution: tools/setup.sh fetches it into .deps/ (tools/fetch_sdist.py checks the
# pinned SHA-256). Only its C++ core is built, as a static library; its own warnings are
# silenced (third-party code), ours stay on.
set(PEREGRINE_XGRAMMAR_VERSION 0.2.9)
set(PEREGRINE_XGRAMMAR_SHA256 87b466bca2475e29bb0323abc62c6c33cbcbcff47e5fb800a3e2099ac9620b90)
set(PEREGRINE_XGRAMMAR_DIR ${PROJECT_SOURCE_DIR}/.deps/xgrammar-${PEREGRINE_XGRAMMAR_VERSION}
    CACHE PATH "xgrammar source tree (its PyPI sdist, unpacked)")
if(NOT EXISTS ${PEREGRINE_XGRAMMAR_DIR}/include/xgrammar/xgrammar.h)
  message(FATAL_ERROR "xgrammar ${PEREGRINE_XGRAMMAR_VERSION} not found in ${PEREGRINE_XGRAMMAR_DIR}: "
                      "run tools/setup.sh (or tools/fetch_sdist.py xgrammar ${PEREGRINE_XGRAMMAR_VERSION} "
                      "${PEREGRINE_XGRAMMAR_SHA256} .deps)")
endif()
file(GLOB PEREGRINE_XGRAMMAR_SOURCES ${PEREGRINE_XGRAMMAR_DIR}/cpp/*.cc ${PEREGRINE_XGRAMMAR_DIR}/cpp/support/*.cc
     ${PEREGRINE_XGRAMMAR_DIR}/cpp/converter_ext/*.cc)
add_library(xgrammar STATIC ${PEREGRINE_XGRAMMAR_SOURCES})
target_include_directories(xgrammar SYSTEM PUBLIC ${PEREGRINE_XGRAMMAR_DIR}/include
                           ${PEREGRINE_XGRAMMAR_DIR}/3rdparty/picojson ${PEREGRINE_XGRAMMAR_DIR}/3rdparty/dlpack/include)
target_compile_definitions(xgrammar PUBLIC XGRAMMAR_ENABLE_CPPTRACE=0)
target_compile_options(xgrammar PRIVATE -w)
set_target_properties(xgrammar PROPERTIES CXX_STANDARD 17 POSITION_INDEPENDENT_CODE ON)
target_link_libraries(xgrammar PUBLIC Threads::Threads)

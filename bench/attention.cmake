# libperegrine_attention_bench.so: the attention launchers behind a C interface, timed
# against PyTorch by bench/attention/bench_attention.py. Needs position-independent code
# throughout (configure with -DCMAKE_POSITION_INDEPENDENT_CODE=ON, as
# tools/gpu_run.sh documents); skipped otherwise.
if(PEREGRINE_HAVE_CUDA AND CMAKE_POSITION_INDEPENDENT_CODE)
  add_library(peregrine_attention_bench SHARED ${CMAKE_CURRENT_LIST_DIR}/attention/bench_api.cc)
  target_compile_options(peregrine_attention_bench PRIVATE ${PEREGRINE_WARNINGS})
  target_link_libraries(peregrine_attention_bench PRIVATE peregrine_backend_cuda)
  # Keep the static libraries' symbols (libstdc++, cudart) private to the library, so that
  # it coexists with PyTorch's own copies in one process.
  target_link_options(peregrine_attention_bench PRIVATE -Wl,--exclude-libs,ALL -Wl,--as-needed)
  set_target_properties(peregrine_attention_bench PROPERTIES
    OUTPUT_NAME peregrine_attention_bench
    LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/gpu-bin)
endif()

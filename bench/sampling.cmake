add_executable(sampling_bench ${CMAKE_CURRENT_LIST_DIR}/sampling_bench.cc)
target_compile_options(sampling_bench PRIVATE ${PEREGRINE_WARNINGS})
target_link_libraries(sampling_bench PRIVATE peregrine_sampling)
target_compile_definitions(sampling_bench PRIVATE PEREGRINE_BENCH_RESULTS="${PROJECT_SOURCE_DIR}/bench/results")

add_executable(model_cpu_bench ${CMAKE_CURRENT_LIST_DIR}/model_cpu_bench.cc)
target_compile_options(model_cpu_bench PRIVATE ${PEREGRINE_WARNINGS})
target_link_libraries(model_cpu_bench PRIVATE peregrine_model_deepseek_v4)
target_compile_definitions(model_cpu_bench PRIVATE PEREGRINE_BENCH_RESULTS="${PROJECT_SOURCE_DIR}/bench/results")

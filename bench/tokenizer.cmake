add_executable(tokenizer_bench ${CMAKE_CURRENT_LIST_DIR}/tokenizer_bench.cc)
target_compile_options(tokenizer_bench PRIVATE ${PEREGRINE_WARNINGS})
target_link_libraries(tokenizer_bench PRIVATE peregrine_tokenizer nlohmann_json::nlohmann_json)
target_compile_definitions(tokenizer_bench PRIVATE
  PEREGRINE_BENCH_RESULTS="${PROJECT_SOURCE_DIR}/bench/results"
  PEREGRINE_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
  PEREGRINE_PYTHON="${PROJECT_SOURCE_DIR}/.venv/bin/python"
  PEREGRINE_BENCH_WORK_DIR="${CMAKE_CURRENT_BINARY_DIR}/tokenizer_bench_work")

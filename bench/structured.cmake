# Grammar masks on the host (structured outputs) with the real vocabulary.
add_executable(structured_mask_bench ${CMAKE_CURRENT_LIST_DIR}/structured_mask_bench.cc)
target_compile_options(structured_mask_bench PRIVATE ${PEREGRINE_WARNINGS})
target_link_libraries(structured_mask_bench PRIVATE peregrine_server peregrine_structured peregrine_tokenizer
                      nlohmann_json::nlohmann_json)
target_compile_definitions(structured_mask_bench PRIVATE
  PEREGRINE_BENCH_RESULTS="${PROJECT_SOURCE_DIR}/bench/results"
  PEREGRINE_PYTHON="${PROJECT_SOURCE_DIR}/.venv/bin/python")

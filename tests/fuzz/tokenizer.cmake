# Tokenizer fuzz targets (sources in tests/unit/tokenizer/fuzz): Encode over arbitrary bytes,
# the streaming detokenizer over arbitrary ids, and tokenizer.json loading. The first two use
# the committed tiny fixture unless PEREGRINE_TOKENIZER_FUZZ_JSON names another file.
set(_tok_fuzz_dir ${PROJECT_SOURCE_DIR}/tests/unit/tokenizer/fuzz)
set(_tok_fixture ${PROJECT_SOURCE_DIR}/tests/unit/tokenizer/testdata/tiny_tokenizer.json)
foreach(_target tokenizer_encode tokenizer_stream tokenizer_json)
  string(REPLACE "tokenizer_" "" _source ${_target})
  peregrine_fuzz(${_target} SOURCES ${_tok_fuzz_dir}/${_source}_fuzz.cc DEPS peregrine_tokenizer)
  foreach(_exe ${_target}_replay ${_target})
    if(TARGET ${_exe})
      target_compile_definitions(${_exe} PRIVATE PEREGRINE_TOKENIZER_FIXTURE="${_tok_fixture}")
      target_compile_options(${_exe} PRIVATE ${PEREGRINE_WARNINGS})
    endif()
  endforeach()
endforeach()

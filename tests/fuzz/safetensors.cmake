# Fuzz target for the safetensors header parser: arbitrary bytes as a whole file image.
# Seeds: corpus/safetensors_header/ (tiny valid and broken files).
peregrine_fuzz(safetensors_header
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/safetensors/safetensors_header_fuzz.cc
  DEPS peregrine_model)
target_compile_options(safetensors_header_replay PRIVATE ${PEREGRINE_WARNINGS})
if(TARGET safetensors_header)
  target_compile_options(safetensors_header PRIVATE ${PEREGRINE_WARNINGS})
endif()

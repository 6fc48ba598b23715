# One include per fuzz target family; each file calls peregrine_fuzz().
include(${CMAKE_CURRENT_LIST_DIR}/safetensors.cmake OPTIONAL)
include(${CMAKE_CURRENT_LIST_DIR}/tokenizer.cmake OPTIONAL)
include(${CMAKE_CURRENT_LIST_DIR}/chat.cmake OPTIONAL)
include(${CMAKE_CURRENT_LIST_DIR}/chat_parsers.cmake OPTIONAL)
include(${CMAKE_CURRENT_LIST_DIR}/disaggregation.cmake OPTIONAL)

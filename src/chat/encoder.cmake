# Prompt side of src/chat: the DeepSeek-V4 encoder and the sandboxed Jinja subset.
list(APPEND PEREGRINE_CHAT_ENCODER_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/jinja_pystr.cc
  ${CMAKE_CURRENT_LIST_DIR}/jinja_json.cc
  ${CMAKE_CURRENT_LIST_DIR}/jinja_value.cc
  ${CMAKE_CURRENT_LIST_DIR}/jinja_lexer.cc
  ${CMAKE_CURRENT_LIST_DIR}/jinja_parser.cc
  ${CMAKE_CURRENT_LIST_DIR}/jinja_interp.cc
  ${CMAKE_CURRENT_LIST_DIR}/jinja_ops.cc
  ${CMAKE_CURRENT_LIST_DIR}/jinja_filters.cc
  ${CMAKE_CURRENT_LIST_DIR}/jinja_methods.cc
  ${CMAKE_CURRENT_LIST_DIR}/jinja_template.cc
  ${CMAKE_CURRENT_LIST_DIR}/v4_format.cc
  ${CMAKE_CURRENT_LIST_DIR}/v4_messages.cc
  ${CMAKE_CURRENT_LIST_DIR}/v4_encoder.cc
)

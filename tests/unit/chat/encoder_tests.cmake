# Tests for the prompt side of src/chat (DeepSeek-V4 encoder, Jinja subset).
peregrine_test(chat_encoder_test
  SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/v4_encoder_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/py_format_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/jinja_parity_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/jinja_sandbox_test.cc
  DEPS peregrine_chat)

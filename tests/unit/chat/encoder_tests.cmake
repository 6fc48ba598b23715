# Tests for the prompt side of src/chat (DeepSeek-V4 encoder, Jinja subset) and the
# `render-chat` command built on it (compiled here from src/cli, which only the main binary links).
peregrine_test(chat_encoder_test
  SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/v4_encoder_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/py_format_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/jinja_parity_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/jinja_sandbox_test.cc
  DEPS peregrine_chat)
peregrine_test(chat_render_command_test
  SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/render_chat_command_test.cc
    ${PROJECT_SOURCE_DIR}/src/cli/render_chat_command.cc
  DEPS peregrine_chat CLI11::CLI11)
target_include_directories(chat_render_command_test PRIVATE ${CMAKE_BINARY_DIR}/include/peregrine_cli)

# Tests for the output parsers (reasoning separation, tool calls, the OutputParser facade).
peregrine_test(chat_parser_test
  SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/parser_split_harness.cc
    ${CMAKE_CURRENT_LIST_DIR}/reasoning_parser_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/tool_call_parser_dsml_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/tool_call_parser_v3x_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/output_parser_test.cc
  DEPS peregrine_chat)
# Forced tool calls: the DSML structural tag against the encoder's output.
peregrine_test(chat_tool_grammar_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/tool_call_grammar_test.cc
  DEPS peregrine_chat peregrine_structured)

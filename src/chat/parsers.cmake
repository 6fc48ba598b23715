# Output parsing half of the chat library: reasoning separation and tool-call parsers.
list(APPEND PEREGRINE_CHAT_PARSER_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/marker_scan.cc
  ${CMAKE_CURRENT_LIST_DIR}/reasoning_literal_mask.cc
  ${CMAKE_CURRENT_LIST_DIR}/reasoning_parser.cc
  ${CMAKE_CURRENT_LIST_DIR}/tool_call_id_generator.cc
  ${CMAKE_CURRENT_LIST_DIR}/tool_call_parser_args.cc
  ${CMAKE_CURRENT_LIST_DIR}/tool_call_parser_schema.cc
  ${CMAKE_CURRENT_LIST_DIR}/tool_call_parser_item.cc
  ${CMAKE_CURRENT_LIST_DIR}/tool_call_parser_dsml.cc
  ${CMAKE_CURRENT_LIST_DIR}/tool_call_parser_v3x.cc
  ${CMAKE_CURRENT_LIST_DIR}/tool_call_parser.cc
  ${CMAKE_CURRENT_LIST_DIR}/output_parser.cc
  ${CMAKE_CURRENT_LIST_DIR}/tool_call_grammar.cc)

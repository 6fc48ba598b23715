# Fuzz targets for the chat output parsers (reasoning separation, the four tool-call dialects,
# the OutputParser facade). Each parses its input whole and under several splits and aborts when
# any split disagrees with the whole-text result or loses text. Seeds: corpus/<target>/.
foreach(parser reasoning_parser dsml_v4_tool_parser dsml_v32_tool_parser v31_tool_parser
               v3_tool_parser output_parser)
  set(target chat_${parser}_fuzz)
  peregrine_fuzz(${target}
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/chat_parsers/${parser}_fuzz.cc
            ${CMAKE_CURRENT_LIST_DIR}/chat_parsers/parser_fuzz_check.cc
    DEPS peregrine_chat)
  target_compile_options(${target}_replay PRIVATE ${PEREGRINE_WARNINGS})
  if(TARGET ${target})
    target_compile_options(${target} PRIVATE ${PEREGRINE_WARNINGS})
  endif()
endforeach()

# Fuzz targets for the prompt side of src/chat: the Jinja subset (template text against a fixed
# context; the step budget must stop every runaway) and the DeepSeek-V4 encoder (arbitrary JSON).
# Seeds: corpus/<target>/.
foreach(target jinja_template_fuzz v4_encoder_fuzz)
  peregrine_fuzz(${target} SOURCES ${CMAKE_CURRENT_LIST_DIR}/chat/${target}.cc DEPS peregrine_chat)
  target_compile_options(${target}_replay PRIVATE ${PEREGRINE_WARNINGS})
  if(TARGET ${target})
    target_compile_options(${target} PRIVATE ${PEREGRINE_WARNINGS})
  endif()
endforeach()

# Fuzz target for the KV transfer's messages (src/disaggregation/transfer_wire.h).
# Seeds: corpus/kv_transfer_wire/ (a header, a signed meta, inner metas of host and device pages).
peregrine_fuzz(kv_transfer_wire
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/disaggregation/kv_transfer_wire_fuzz.cc
  DEPS peregrine_disaggregation)
target_compile_options(kv_transfer_wire_replay PRIVATE ${PEREGRINE_WARNINGS})
if(TARGET kv_transfer_wire)
  target_compile_options(kv_transfer_wire PRIVATE ${PEREGRINE_WARNINGS})
endif()

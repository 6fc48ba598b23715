# MoE launchers (routing, expert bookkeeping, expert GEMMs, combine).
target_sources(peregrine_backend_cuda PRIVATE ${CMAKE_CURRENT_LIST_DIR}/ops/moe.cc)

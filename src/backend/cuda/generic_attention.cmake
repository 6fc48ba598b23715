# Launchers of the shape-generic attention-path kernels.
target_sources(peregrine_backend_cuda PRIVATE ${CMAKE_CURRENT_LIST_DIR}/ops/generic_attention.cc)

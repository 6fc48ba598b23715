# Shape-generic sparse attention and indexer scores (any heads and head dim).
target_sources(peregrine_kernels PRIVATE ${CMAKE_CURRENT_LIST_DIR}/generic_attention.cu)

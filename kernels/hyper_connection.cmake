# mHC collapse/expand, token embedding into the streams, clamped SwiGLU.
target_sources(peregrine_kernels PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/hyper_connection.cu
  ${CMAKE_CURRENT_LIST_DIR}/embedding.cu
  ${CMAKE_CURRENT_LIST_DIR}/swiglu.cu)

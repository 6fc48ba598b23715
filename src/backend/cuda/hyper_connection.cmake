# mHC collapse/expand, token embedding into the streams, clamped SwiGLU.
target_sources(peregrine_backend_cuda PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/ops/hyper_connection.cc
  ${CMAKE_CURRENT_LIST_DIR}/ops/embedding.cc
  ${CMAKE_CURRENT_LIST_DIR}/ops/swiglu.cc)

# Sampling launcher (rows built on the host by src/sampling/device_rows.h).
target_sources(peregrine_backend_cuda PRIVATE ${CMAKE_CURRENT_LIST_DIR}/ops/sampling.cc)
target_link_libraries(peregrine_backend_cuda PUBLIC peregrine_sampling)

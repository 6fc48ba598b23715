// Marks functions of the kernel interfaces that both host and device code call (the
// interfaces are also compiled by the host compiler, which has no __device__).
#pragma once

#if defined(__CUDACC__)
#define PG_HOST_DEVICE __host__ __device__
#else
#define PG_HOST_DEVICE
#endif

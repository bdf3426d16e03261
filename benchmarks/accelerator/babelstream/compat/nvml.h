/* The four NVML entry points BabelStream's CUDA model calls (src/cuda/CUDAStream.cu: the device's
 * memory clock for its preamble), declared as the driver's libnvidia-ml.so.1 exports them. Used
 * only where the CUDA toolkit has no nvml.h of its own (a toolkit assembled from pip wheels has
 * none); hpcai_jax/acceptance/babelstream_cuda.py puts this folder on the include path then.
 * Not part of BabelStream: this project's file. */
#pragma once

#ifdef __cplusplus
extern "C" {
#endif

typedef enum nvmlReturn_enum { NVML_SUCCESS = 0 } nvmlReturn_t;
typedef enum nvmlClockType_enum { NVML_CLOCK_GRAPHICS = 0, NVML_CLOCK_SM = 1, NVML_CLOCK_MEM = 2 } nvmlClockType_t;
typedef struct nvmlDevice_st *nvmlDevice_t;

/* The library's versioned symbols, under the names its own header maps them to. */
nvmlReturn_t nvmlInit_v2(void);
nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device);
nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int *clock);
const char *nvmlErrorString(nvmlReturn_t result);

#define nvmlInit nvmlInit_v2
#define nvmlDeviceGetHandleByPciBusId nvmlDeviceGetHandleByPciBusId_v2

#ifdef __cplusplus
}
#endif

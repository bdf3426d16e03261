/* A link-time stand-in for the driver's libnvidia-ml.so.1, as the CUDA toolkit's stubs/ folder
 * provides one: built as libnvidia-ml.so with that soname, so the binary is linked on a machine
 * without a driver and loads the driver's own library when it runs (no rpath points here).
 * Defines the symbols BabelStream's CUDA model needs (compat/nvml.h); each fails if ever called.
 * Not part of BabelStream: this project's file. */
typedef struct nvmlDevice_st *nvmlDevice_t;

static const int NOT_LOADED = 9; /* NVML_ERROR_DRIVER_NOT_LOADED */

int nvmlInit_v2(void) { return NOT_LOADED; }
int nvmlDeviceGetHandleByPciBusId_v2(const char *bus, nvmlDevice_t *device) { return NOT_LOADED; }
int nvmlDeviceGetClockInfo(nvmlDevice_t device, int type, unsigned int *clock) { return NOT_LOADED; }
const char *nvmlErrorString(int result) { return "the NVML link stub was loaded instead of the driver's libnvidia-ml.so.1"; }

/* A stand-in for NVML (libnvidia-ml.so.1), for the harness's tests: it counts $STANDIN_NVML_COUNT
 * GPUs (default 1); a negative count makes nvmlInit fail, as on a machine whose NVML is broken. */
#include <stdlib.h>

enum { NVML_SUCCESS = 0, NVML_ERROR_UNINITIALIZED = 1 };

static int count(void) {
  const char *text = getenv("STANDIN_NVML_COUNT");
  return text ? atoi(text) : 1;
}

int nvmlInit(void) { return count() < 0 ? NVML_ERROR_UNINITIALIZED : NVML_SUCCESS; }
int nvmlInit_v2(void) { return nvmlInit(); }
int nvmlShutdown(void) { return NVML_SUCCESS; }

int nvmlDeviceGetCount_v2(unsigned int *found) {
  if (count() < 0) return NVML_ERROR_UNINITIALIZED;
  *found = (unsigned int)count();
  return NVML_SUCCESS;
}

int nvmlDeviceGetCount(unsigned int *found) { return nvmlDeviceGetCount_v2(found); }

/* A stand-in for the CUDA driver (libcuda.so.1) on a machine without a GPU, for the harness's tests.
 *
 * Torch's own CUDA runtime loads it as it loads the real driver, so every path of torch's that reaches
 * the driver reaches this. cuInit appends to $STANDIN_CUDA_LOG the process that called it and the
 * Python stack that got there, then answers as a machine with no usable device does
 * (CUDA_ERROR_NO_DEVICE). A process forked after an earlier cuInit answers as the real driver does
 * there (CUDA_ERROR_NOT_INITIALIZED): the state a child inherits is unusable. Every other entry the
 * runtime asks for reports CUDA_ERROR_NOT_INITIALIZED. */
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { CUDA_SUCCESS = 0, CUDA_ERROR_NOT_INITIALIZED = 3, CUDA_ERROR_NO_DEVICE = 100 };

static pid_t initialised_in = 0; /* the process whose cuInit ran here; a forked child inherits it */

static void log_call(const char *what) {
  const char *path = getenv("STANDIN_CUDA_LOG");
  if (!path) return;
  int fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0644);
  if (fd < 0) return;
  char head[160];
  int n = snprintf(head, sizeof head, "CALL %s pid=%d inherited=%d\n", what, (int)getpid(),
                   initialised_in != 0 && initialised_in != getpid());
  if (write(fd, head, n) < 0) { close(fd); return; }
  /* CPython's own traceback writer, as faulthandler uses it: no GIL needed, no allocation. */
  void (*dump)(int, void *) = (void (*)(int, void *))dlsym(RTLD_DEFAULT, "_Py_DumpTraceback");
  void *(*thread_state)(void) = (void *(*)(void))dlsym(RTLD_DEFAULT, "PyGILState_GetThisThreadState");
  void *state = thread_state ? thread_state() : NULL;
  if (dump && state) dump(fd, state);
  if (write(fd, "END\n", 4) < 0) {}
  close(fd);
}

int cuInit(unsigned int flags) {
  (void)flags;
  int inherited = initialised_in != 0 && initialised_in != getpid();
  log_call("cuInit");
  if (inherited) return CUDA_ERROR_NOT_INITIALIZED;
  initialised_in = getpid();
  return CUDA_ERROR_NO_DEVICE;
}

int cuDriverGetVersion(int *version) {
  *version = 13000;
  return CUDA_SUCCESS;
}

static int not_initialised(void) { return CUDA_ERROR_NOT_INITIALIZED; }

int cuGetProcAddress_v2(const char *symbol, void **function, int version, unsigned long long flags, int *status) {
  (void)version; (void)flags;
  if (status) *status = 0; /* CU_GET_PROC_ADDRESS_SUCCESS */
  if (!strcmp(symbol, "cuInit")) *function = (void *)cuInit;
  else if (!strcmp(symbol, "cuDriverGetVersion")) *function = (void *)cuDriverGetVersion;
  else if (!strcmp(symbol, "cuGetProcAddress")) *function = (void *)cuGetProcAddress_v2;
  else *function = (void *)not_initialised;
  return CUDA_SUCCESS;
}

int cuGetProcAddress(const char *symbol, void **function, int version, unsigned long long flags) {
  return cuGetProcAddress_v2(symbol, function, version, flags, NULL);
}

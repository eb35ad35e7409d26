/* A stand-in for NVIDIA's NVML library (libnvidia-ml.so.1) for the tests: the functions the
 * agent's GPU telemetry calls through the real `nvidia-ml-py` binding, with NVML's own
 * signatures, structures and return codes.
 *
 * The devices and their readings come from the file named by BENCHSITE_FAKE_NVML, read again
 * on every call so that a test can change them while the agent samples: one line a device,
 *
 *     name|gpu_util_pct|memory_used_mib|memory_total_mib|power_mw|sm_clock_mhz|temperature_c
 *
 * A negative reading answers NVML_ERROR_NOT_SUPPORTED for that query (as NVML does for a
 * sensor a board lacks). Without the variable, or without the file, nvmlInitWithFlags
 * answers NVML_ERROR_DRIVER_NOT_LOADED: a machine with no GPU driver. The driver and CUDA
 * versions are fixed (FAKE_DRIVER_VERSION, FAKE_CUDA_DRIVER_VERSION below).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_DRIVER_NOT_LOADED 9
#define NVML_CLOCK_SM 1
#define NVML_TEMPERATURE_GPU 0
#define MAX_DEVICES 16

typedef struct { unsigned int gpu; unsigned int memory; } nvmlUtilization_t;
typedef struct { unsigned long long total; unsigned long long free; unsigned long long used; } nvmlMemory_t;

typedef struct {
    char name[96];
    long util, used_mib, total_mib, power_mw, sm_mhz, temp_c;
} device_t;

static int initialized = 0;

static int read_devices(device_t *devices) {
    const char *path = getenv("BENCHSITE_FAKE_NVML");
    if (path == NULL) return -1;
    FILE *file = fopen(path, "r");
    if (file == NULL) return -1;
    int count = 0;
    char line[512];
    while (count < MAX_DEVICES && fgets(line, sizeof line, file) != NULL) {
        device_t *d = &devices[count];
        if (sscanf(line, "%95[^|]|%ld|%ld|%ld|%ld|%ld|%ld", d->name, &d->util, &d->used_mib,
                   &d->total_mib, &d->power_mw, &d->sm_mhz, &d->temp_c) == 7) {
            count++;
        }
    }
    fclose(file);
    return count;
}

/* The device behind a handle (its index + 1, so that no handle is NULL), read afresh. */
static int device_of(void *handle, device_t *out) {
    device_t devices[MAX_DEVICES];
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    long index = (long)handle - 1;
    int count = read_devices(devices);
    if (index < 0 || index >= count) return NVML_ERROR_INVALID_ARGUMENT;
    *out = devices[index];
    return NVML_SUCCESS;
}

int nvmlInitWithFlags(unsigned int flags) {
    device_t devices[MAX_DEVICES];
    (void)flags;
    if (read_devices(devices) < 0) return NVML_ERROR_DRIVER_NOT_LOADED;
    initialized = 1;
    return NVML_SUCCESS;
}

int nvmlShutdown(void) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    initialized = 0;
    return NVML_SUCCESS;
}

const char *nvmlErrorString(int result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    default: return "Unknown Error";
    }
}

int nvmlDeviceGetCount_v2(unsigned int *count) {
    device_t devices[MAX_DEVICES];
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    int found = read_devices(devices);
    *count = found < 0 ? 0 : (unsigned int)found;
    return NVML_SUCCESS;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void **device) {
    device_t devices[MAX_DEVICES];
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    if ((int)index >= read_devices(devices)) return NVML_ERROR_INVALID_ARGUMENT;
    *device = (void *)(long)(index + 1);
    return NVML_SUCCESS;
}

int nvmlDeviceGetName(void *handle, char *name, unsigned int length) {
    device_t d;
    int ret = device_of(handle, &d);
    if (ret != NVML_SUCCESS) return ret;
    if (strlen(d.name) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(name, d.name);
    return NVML_SUCCESS;
}

int nvmlDeviceGetUtilizationRates(void *handle, nvmlUtilization_t *utilization) {
    device_t d;
    int ret = device_of(handle, &d);
    if (ret != NVML_SUCCESS) return ret;
    if (d.util < 0) return NVML_ERROR_NOT_SUPPORTED;
    utilization->gpu = (unsigned int)d.util;
    utilization->memory = 0;
    return NVML_SUCCESS;
}

int nvmlDeviceGetMemoryInfo(void *handle, nvmlMemory_t *memory) {
    device_t d;
    int ret = device_of(handle, &d);
    if (ret != NVML_SUCCESS) return ret;
    if (d.used_mib < 0 || d.total_mib < 0) return NVML_ERROR_NOT_SUPPORTED;
    memory->total = (unsigned long long)d.total_mib << 20;
    memory->used = (unsigned long long)d.used_mib << 20;
    memory->free = memory->total - memory->used;
    return NVML_SUCCESS;
}

int nvmlDeviceGetPowerUsage(void *handle, unsigned int *power_mw) {
    device_t d;
    int ret = device_of(handle, &d);
    if (ret != NVML_SUCCESS) return ret;
    if (d.power_mw < 0) return NVML_ERROR_NOT_SUPPORTED;
    *power_mw = (unsigned int)d.power_mw;
    return NVML_SUCCESS;
}

int nvmlDeviceGetClockInfo(void *handle, unsigned int type, unsigned int *clock_mhz) {
    device_t d;
    int ret = device_of(handle, &d);
    if (ret != NVML_SUCCESS) return ret;
    if (type != NVML_CLOCK_SM || d.sm_mhz < 0) return NVML_ERROR_NOT_SUPPORTED;
    *clock_mhz = (unsigned int)d.sm_mhz;
    return NVML_SUCCESS;
}

int nvmlDeviceGetTemperature(void *handle, unsigned int sensor, unsigned int *temperature_c) {
    device_t d;
    int ret = device_of(handle, &d);
    if (ret != NVML_SUCCESS) return ret;
    if (sensor != NVML_TEMPERATURE_GPU || d.temp_c < 0) return NVML_ERROR_NOT_SUPPORTED;
    *temperature_c = (unsigned int)d.temp_c;
    return NVML_SUCCESS;
}

/* The host's driver, as a driver 550.54.15 with CUDA 12.4 answers (what the agent's hello
 * reports). */
#define FAKE_DRIVER_VERSION "550.54.15"
#define FAKE_CUDA_DRIVER_VERSION 12040

int nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    if (strlen(FAKE_DRIVER_VERSION) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(version, FAKE_DRIVER_VERSION);
    return NVML_SUCCESS;
}

int nvmlSystemGetCudaDriverVersion(int *cuda_version) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    *cuda_version = FAKE_CUDA_DRIVER_VERSION;
    return NVML_SUCCESS;
}

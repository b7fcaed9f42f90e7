/* fake_nvml.c: a stand-in for the driver's libnvidia-ml.so.1 with two fixed GPUs, so the GPU
 * stats path (dlopen, symbol look-up, PCI matching, formatting) runs on a machine without one:
 * DPT_NVML_LIBRARY=build/tests/libfake_nvml.so. Values are chosen to be recognisable. */
#include <string.h>

typedef struct {
    unsigned int gpu, memory;
} util_t;
typedef struct {
    unsigned long long total, free, used;
} mem_t;

static int devices[2] = {0, 1};

int nvmlInit_v2(void)
{
    return 0;
}
int nvmlShutdown(void)
{
    return 0;
}
int nvmlDeviceGetCount_v2(unsigned int *n)
{
    *n = 2;
    return 0;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned int i, void **dev)
{
    if (i > 1) return 2; /* NVML_ERROR_INVALID_ARGUMENT */
    *dev = &devices[i];
    return 0;
}
int nvmlDeviceGetHandleByPciBusId_v2(const char *bus, void **dev)
{
    if (strcmp(bus, "00000000:4A:00.0") != 0) return 6; /* NVML_ERROR_NOT_FOUND */
    *dev = &devices[1];
    return 0;
}
int nvmlDeviceGetName(void *dev, char *name, unsigned int len)
{
    strncpy(name, *(int *)dev ? "Stand-in H200 (b)" : "Stand-in H200 (a)", len);
    return 0;
}
int nvmlDeviceGetUtilizationRates(void *dev, util_t *u)
{
    u->gpu = *(int *)dev ? 87 : 12, u->memory = 40;
    return 0;
}
int nvmlDeviceGetMemoryInfo(void *dev, mem_t *m)
{
    m->total = 143771ull << 20, m->used = (*(int *)dev ? 31949ull : 512ull) << 20,
    m->free = m->total - m->used;
    return 0;
}
int nvmlDeviceGetTemperature(void *dev, int sensor, unsigned int *t)
{
    *t = *(int *)dev ? 64 : 33;
    return 0;
}
int nvmlDeviceGetPowerUsage(void *dev, unsigned int *mw)
{
    *mw = *(int *)dev ? 312400 : 75000;
    return 0;
}

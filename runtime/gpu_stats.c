/* gpu_stats.c: what nvidia-smi shows, per GPU, for the progress line, the metrics file and
 * ./train --env: utilisation, memory used/total, temperature, power. NVML is loaded at run time
 * (dlopen of libnvidia-ml.so.1, which ships with the driver, not the toolkit); without it the
 * stats are off, silently. The few NVML prototypes are declared here, so building needs no
 * NVML header. DPT_NVML_LIBRARY names another library (the tests' stand-in). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpt.h"

typedef int nvml_return;   /* nvmlReturn_t: 0 is NVML_SUCCESS */
typedef void *nvml_device; /* nvmlDevice_t */
typedef struct nvml_utilization {
    unsigned int gpu, memory; /* percent of the last sample period */
} nvml_utilization;
typedef struct nvml_memory {
    unsigned long long total, free, used; /* bytes */
} nvml_memory;

static struct {
    bool loaded;
    nvml_return (*init)(void);
    nvml_return (*count)(unsigned int *);
    nvml_return (*by_index)(unsigned int, nvml_device *);
    nvml_return (*by_pci)(const char *, nvml_device *);
    nvml_return (*name)(nvml_device, char *, unsigned int);
    nvml_return (*utilization)(nvml_device, nvml_utilization *);
    nvml_return (*memory)(nvml_device, nvml_memory *);
    nvml_return (*temperature)(nvml_device, int, unsigned int *);
    nvml_return (*power)(nvml_device, unsigned int *);
} nvml;
static pthread_once_t nvml_once = PTHREAD_ONCE_INIT;

static void nvml_load(void)
{
    const char *path = getenv("DPT_NVML_LIBRARY");
    void *lib = dlopen(path && *path ? path : "libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return;
#define SYM(field, name) *(void **)&nvml.field = dlsym(lib, name)
    SYM(init, "nvmlInit_v2");
    SYM(count, "nvmlDeviceGetCount_v2");
    SYM(by_index, "nvmlDeviceGetHandleByIndex_v2");
    SYM(by_pci, "nvmlDeviceGetHandleByPciBusId_v2");
    SYM(name, "nvmlDeviceGetName");
    SYM(utilization, "nvmlDeviceGetUtilizationRates");
    SYM(memory, "nvmlDeviceGetMemoryInfo");
    SYM(temperature, "nvmlDeviceGetTemperature");
    SYM(power, "nvmlDeviceGetPowerUsage");
#undef SYM
    nvml.loaded =
        nvml.init && nvml.count && nvml.by_index && nvml.utilization && nvml.memory && nvml.init() == 0;
}

int dpt_gpu_stats_count(void)
{
    pthread_once(&nvml_once, nvml_load);
    unsigned int n = 0;
    return nvml.loaded && nvml.count(&n) == 0 ? (int)n : 0;
}

bool dpt_gpu_stats_read(int nvml_index, const char *pci_bus_id, dpt_gpu_stats *out)
{
    memset(out, 0, sizeof *out);
    pthread_once(&nvml_once, nvml_load);
    if (!nvml.loaded) return false;
    nvml_device dev = NULL;
    /* CUDA's device numbers follow CUDA_VISIBLE_DEVICES, NVML's do not: match by PCI bus. */
    bool found = pci_bus_id && *pci_bus_id && nvml.by_pci ? nvml.by_pci(pci_bus_id, &dev) == 0
                                                          : nvml.by_index((unsigned)nvml_index, &dev) == 0;
    if (!found) return false;
    nvml_utilization u;
    nvml_memory m;
    if (nvml.utilization(dev, &u) != 0 || nvml.memory(dev, &m) != 0) return false;
    out->util_pct = (int)u.gpu;
    out->mem_used_mb = (double)m.used / 1048576.0;
    out->mem_total_mb = (double)m.total / 1048576.0;
    unsigned int temp = 0, milliwatts = 0;
    out->temp_c =
        nvml.temperature && nvml.temperature(dev, 0 /* NVML_TEMPERATURE_GPU */, &temp) == 0 ? (int)temp : -1;
    out->power_w = nvml.power && nvml.power(dev, &milliwatts) == 0 ? milliwatts / 1000.0 : -1.0;
    if (!nvml.name || nvml.name(dev, out->name, sizeof out->name) != 0)
        snprintf(out->name, sizeof out->name, "?");
    out->valid = true;
    return true;
}

const char *dpt_gpu_stats_str(const dpt_gpu_stats *s, char *buf, size_t cap)
{
    if (!s->valid) {
        snprintf(buf, cap, "no stats");
        return buf;
    }
    int n = snprintf(buf, cap, "%d%% %.1f/%.1f GiB", s->util_pct, s->mem_used_mb / 1024.0,
                     s->mem_total_mb / 1024.0);
    if (s->temp_c >= 0 && n > 0 && (size_t)n < cap)
        n += snprintf(buf + n, cap - (size_t)n, " %dC", s->temp_c);
    if (s->power_w >= 0 && n > 0 && (size_t)n < cap) snprintf(buf + n, cap - (size_t)n, " %.0fW", s->power_w);
    return buf;
}

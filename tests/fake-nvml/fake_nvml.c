/*
 * A stand-in for NVIDIA's NVML library (libnvidia-ml.so.1), for tests and benchmarks on
 * machines without a GPU. It implements the entry points cg-trace uses through nvml-wrapper
 * and answers from a script file that the test rewrites while cg-trace runs: the file
 * `fake-nvml.script` next to this library (or $FAKE_NVML_SCRIPT), re-read on every call.
 *
 * Build: cc -shared -fPIC -O1 -o DIR/libnvidia-ml.so.1 fake_nvml.c
 * (no soname, so that copies in different directories load as different libraries).
 *
 * Script lines (anything else is ignored):
 *   init ERROR                      nvmlInit_v2 fails with ERROR
 *   devices N                       N GPUs (index 0..N-1)
 *   name I TEXT...                  GPU I's name (rest of the line)
 *   uuid I TEXT                     GPU I's UUID
 *   set I key=value ...             energy_mj power_mw temp_c util_gpu util_mem mem_total
 *                                   mem_used power_limit_mw at_ns (CLOCK_MONOTONIC when
 *                                   energy_mj was true: the counter then goes on advancing
 *                                   at power_mw, as a real one does, however late the
 *                                   script's writer is)
 *   sample I pid=P ts=T sm=S        a per-process utilisation sample (ts in microseconds)
 *   running I PID compute|graphics  a process with a context on GPU I
 *   accounting I pid=P util=U mem=M max_mem=B time_ms=T start_us=S running=0|1
 *                                   NVIDIA's accounting stats of a process (and accounting
 *                                   mode on for GPU I)
 *   error I WHAT ERROR              WHAT: all energy power temp util mem samples processes
 *                                   accounting
 * ERROR: NOT_SUPPORTED NO_PERMISSION NOT_FOUND DRIVER_NOT_LOADED GPU_IS_LOST UNKNOWN ...
 *
 * Replaying a recorded GPU (tests/src/lib.rs `NvmlReplay` writes these from a recording of a
 * real one), driven by the clock as a real GPU is:
 *   replay_start_us U               the recording's time 0 plays at U (CLOCK_REALTIME, µs)
 *   frame I t_us=T key=value ...    from U+T on, GPU I reads as `set` would make it (keys as
 *                                   for `set`, and running=PID,PID,... its compute processes),
 *                                   until the next frame; before the first, the first
 * In replay, `sample` timestamps are CLOCK_REALTIME µs, and a sample is seen only once its
 * time has come (NVML's buffer fills as the GPU runs).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;

#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_NO_PERMISSION 4
#define NVML_ERROR_NOT_FOUND 6
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_DRIVER_NOT_LOADED 9
#define NVML_ERROR_GPU_IS_LOST 15
#define NVML_ERROR_UNKNOWN 999

typedef struct {
    unsigned int gpu;
    unsigned int memory;
} nvmlUtilization_t;

typedef struct {
    unsigned int version;
    unsigned long long total;
    unsigned long long reserved;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_v2_t;

typedef struct {
    unsigned int pid;
    unsigned long long timeStamp;
    unsigned int smUtil;
    unsigned int memUtil;
    unsigned int encUtil;
    unsigned int decUtil;
} nvmlProcessUtilizationSample_t;

typedef struct {
    unsigned int gpuUtilization;
    unsigned int memoryUtilization;
    unsigned long long maxMemoryUsage;
    unsigned long long time;
    unsigned long long startTime;
    unsigned int isRunning;
    unsigned int reserved[5];
} nvmlAccountingStats_t;

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlProcessInfo_t;

enum { MAX_DEVICES = 8, MAX_SAMPLES = 256, MAX_RUNNING = 64, MAX_FRAMES = 4096, FRAME_PIDS = 8 };
enum { E_ALL, E_ENERGY, E_POWER, E_TEMP, E_UTIL, E_MEM, E_SAMPLES, E_PROCESSES, E_ACCOUNTING,
       E_KINDS };
enum { MAX_ACCOUNTED = 64 };

struct nvmlDevice_st {
    char name[96];
    char uuid[96];
    unsigned long long energy_mj, at_ns, mem_total, mem_used;
    unsigned int power_mw, temp_c, util_gpu, util_mem, power_limit_mw;
    int errors[E_KINDS];
    nvmlProcessUtilizationSample_t samples[MAX_SAMPLES];
    unsigned int n_samples;
    nvmlProcessInfo_t compute[MAX_RUNNING], graphics[MAX_RUNNING];
    unsigned int n_compute, n_graphics;
    unsigned int accounted_pids[MAX_ACCOUNTED];
    nvmlAccountingStats_t accounted[MAX_ACCOUNTED];
    unsigned int n_accounted;
};

/* One poll of a recorded GPU (see `frame`). */
struct frame {
    unsigned int device;
    unsigned long long t_us, energy_mj, mem_used;
    unsigned int power_mw, temp_c, util_gpu, util_mem;
    unsigned int pids[FRAME_PIDS], n_pids;
};

static struct {
    int init_error;
    unsigned int devices;
    struct nvmlDevice_st dev[MAX_DEVICES];
    unsigned long long replay_start_us;
    struct frame frames[MAX_FRAMES];
    unsigned int n_frames;
} state;

static int error_code(const char *name) {
    static const struct {
        const char *name;
        int code;
    } codes[] = {
        {"UNINITIALIZED", NVML_ERROR_UNINITIALIZED},
        {"INVALID_ARGUMENT", NVML_ERROR_INVALID_ARGUMENT},
        {"NOT_SUPPORTED", NVML_ERROR_NOT_SUPPORTED},
        {"NO_PERMISSION", NVML_ERROR_NO_PERMISSION},
        {"NOT_FOUND", NVML_ERROR_NOT_FOUND},
        {"DRIVER_NOT_LOADED", NVML_ERROR_DRIVER_NOT_LOADED},
        {"GPU_IS_LOST", NVML_ERROR_GPU_IS_LOST},
        {"UNKNOWN", NVML_ERROR_UNKNOWN},
    };
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
        if (strcmp(name, codes[i].name) == 0)
            return codes[i].code;
    return NVML_ERROR_UNKNOWN;
}

static int error_kind(const char *what) {
    static const char *kinds[E_KINDS] = {"all", "energy",  "power",     "temp",      "util",
                                         "mem", "samples", "processes", "accounting"};
    for (int i = 0; i < E_KINDS; i++)
        if (strcmp(what, kinds[i]) == 0)
            return i;
    return -1;
}

/* The script's path: $FAKE_NVML_SCRIPT, else fake-nvml.script next to this library. */
static void script_path(char *out, size_t size) {
    const char *env = getenv("FAKE_NVML_SCRIPT");
    if (env) {
        snprintf(out, size, "%s", env);
        return;
    }
    Dl_info info;
    if (dladdr((void *)&script_path, &info) && info.dli_fname) {
        const char *slash = strrchr(info.dli_fname, '/');
        int dir_len = slash ? (int)(slash - info.dli_fname) : 1;
        snprintf(out, size, "%.*s/fake-nvml.script", dir_len, slash ? info.dli_fname : ".");
        return;
    }
    snprintf(out, size, "fake-nvml.script");
}

static struct nvmlDevice_st *device_at(const char *index) {
    unsigned long i = strtoul(index, NULL, 10);
    return i < MAX_DEVICES ? &state.dev[i] : NULL;
}

static void set_value(struct nvmlDevice_st *d, const char *key, const char *value) {
    unsigned long long v = strtoull(value, NULL, 10);
    if (!strcmp(key, "energy_mj")) d->energy_mj = v;
    else if (!strcmp(key, "at_ns")) d->at_ns = v;
    else if (!strcmp(key, "power_mw")) d->power_mw = (unsigned)v;
    else if (!strcmp(key, "temp_c")) d->temp_c = (unsigned)v;
    else if (!strcmp(key, "util_gpu")) d->util_gpu = (unsigned)v;
    else if (!strcmp(key, "util_mem")) d->util_mem = (unsigned)v;
    else if (!strcmp(key, "mem_total")) d->mem_total = v;
    else if (!strcmp(key, "mem_used")) d->mem_used = v;
    else if (!strcmp(key, "power_limit_mw")) d->power_limit_mw = (unsigned)v;
}

static void parse_frame_value(struct frame *fr, const char *key, const char *value) {
    unsigned long long v = strtoull(value, NULL, 10);
    if (!strcmp(key, "t_us")) fr->t_us = v;
    else if (!strcmp(key, "energy_mj")) fr->energy_mj = v;
    else if (!strcmp(key, "power_mw")) fr->power_mw = (unsigned)v;
    else if (!strcmp(key, "temp_c")) fr->temp_c = (unsigned)v;
    else if (!strcmp(key, "util_gpu")) fr->util_gpu = (unsigned)v;
    else if (!strcmp(key, "util_mem")) fr->util_mem = (unsigned)v;
    else if (!strcmp(key, "mem_used")) fr->mem_used = v;
    else if (!strcmp(key, "running")) {
        const char *p = value;
        while (*p && fr->n_pids < FRAME_PIDS) {
            char *end;
            unsigned long pid = strtoul(p, &end, 10);
            if (end == p) break;
            fr->pids[fr->n_pids++] = (unsigned)pid;
            p = *end == ',' ? end + 1 : end;
        }
    }
}

static unsigned long long realtime_us(void) {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return (unsigned long long)now.tv_sec * 1000000ull + (unsigned long long)now.tv_nsec / 1000;
}

/* In replay: sets each replayed GPU to its frame for now (the last one whose time has come). */
static void play(void) {
    if (!state.replay_start_us)
        return;
    unsigned long long now = realtime_us();
    unsigned long long t = now > state.replay_start_us ? now - state.replay_start_us : 0;
    for (unsigned int dev = 0; dev < state.devices; dev++) {
        const struct frame *current = NULL;
        for (unsigned int i = 0; i < state.n_frames; i++) {
            const struct frame *fr = &state.frames[i];
            if (fr->device != dev) continue;
            if (!current || fr->t_us <= t) current = fr;
            if (fr->t_us > t) break;
        }
        if (!current) continue;
        struct nvmlDevice_st *d = &state.dev[dev];
        d->energy_mj = current->energy_mj;
        d->at_ns = 0;
        d->power_mw = current->power_mw;
        d->temp_c = current->temp_c;
        d->util_gpu = current->util_gpu;
        d->util_mem = current->util_mem;
        d->mem_used = current->mem_used;
        d->n_compute = 0;
        for (unsigned int k = 0; k < current->n_pids && k < MAX_RUNNING; k++) {
            memset(&d->compute[k], 0, sizeof d->compute[k]);
            d->compute[k].pid = current->pids[k];
            d->compute[k].gpuInstanceId = 0xFFFFFFFF;
            d->compute[k].computeInstanceId = 0xFFFFFFFF;
            d->n_compute++;
        }
    }
}

/* Re-reads the script into `state` when it changed (a new file, size or time). */
static void load(void) {
    static struct stat seen;
    static int loaded;
    char path[4096];
    script_path(path, sizeof path);
    struct stat now;
    if (stat(path, &now) == 0 && loaded && now.st_ino == seen.st_ino &&
        now.st_size == seen.st_size && now.st_mtim.tv_sec == seen.st_mtim.tv_sec &&
        now.st_mtim.tv_nsec == seen.st_mtim.tv_nsec) {
        play();
        return;
    }
    memset(&seen, 0, sizeof seen);
    loaded = 0;
    memset(&state, 0, sizeof state);
    for (int i = 0; i < MAX_DEVICES; i++) {
        snprintf(state.dev[i].name, sizeof state.dev[i].name, "Fake GPU %d", i);
        snprintf(state.dev[i].uuid, sizeof state.dev[i].uuid, "GPU-fake-%d", i);
    }
    FILE *f = fopen(path, "r");
    if (!f) {
        state.init_error = NVML_ERROR_DRIVER_NOT_LOADED;
        return;
    }
    struct stat opened;
    if (fstat(fileno(f), &opened) == 0) {
        seen = opened;
        loaded = 1;
    }
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *save = NULL;
        char *word = strtok_r(line, " ", &save);
        if (!word)
            continue;
        if (!strcmp(word, "init")) {
            char *e = strtok_r(NULL, " ", &save);
            if (e) state.init_error = error_code(e);
            continue;
        }
        if (!strcmp(word, "replay_start_us")) {
            char *u = strtok_r(NULL, " ", &save);
            if (u) state.replay_start_us = strtoull(u, NULL, 10);
            continue;
        }
        if (!strcmp(word, "devices")) {
            char *n = strtok_r(NULL, " ", &save);
            if (n) state.devices = (unsigned)strtoul(n, NULL, 10);
            if (state.devices > MAX_DEVICES) state.devices = MAX_DEVICES;
            continue;
        }
        char *index = strtok_r(NULL, " ", &save);
        struct nvmlDevice_st *d = index ? device_at(index) : NULL;
        if (!d)
            continue;
        if (!strcmp(word, "name")) {
            snprintf(d->name, sizeof d->name, "%s", save ? save : "");
        } else if (!strcmp(word, "uuid")) {
            char *u = strtok_r(NULL, " ", &save);
            if (u) snprintf(d->uuid, sizeof d->uuid, "%s", u);
        } else if (!strcmp(word, "set")) {
            char *kv;
            while ((kv = strtok_r(NULL, " ", &save))) {
                char *eq = strchr(kv, '=');
                if (!eq) continue;
                *eq = 0;
                set_value(d, kv, eq + 1);
            }
        } else if (!strcmp(word, "sample") && d->n_samples < MAX_SAMPLES) {
            nvmlProcessUtilizationSample_t *s = &d->samples[d->n_samples++];
            memset(s, 0, sizeof *s);
            char *kv;
            while ((kv = strtok_r(NULL, " ", &save))) {
                char *eq = strchr(kv, '=');
                if (!eq) continue;
                *eq = 0;
                unsigned long long v = strtoull(eq + 1, NULL, 10);
                if (!strcmp(kv, "pid")) s->pid = (unsigned)v;
                else if (!strcmp(kv, "ts")) s->timeStamp = v;
                else if (!strcmp(kv, "sm")) s->smUtil = (unsigned)v;
                else if (!strcmp(kv, "mem")) s->memUtil = (unsigned)v;
            }
        } else if (!strcmp(word, "frame") && state.n_frames < MAX_FRAMES) {
            struct frame *fr = &state.frames[state.n_frames++];
            memset(fr, 0, sizeof *fr);
            fr->device = (unsigned)(d - state.dev);
            char *kv;
            while ((kv = strtok_r(NULL, " ", &save))) {
                char *eq = strchr(kv, '=');
                if (!eq) continue;
                *eq = 0;
                parse_frame_value(fr, kv, eq + 1);
            }
        } else if (!strcmp(word, "accounting") && d->n_accounted < MAX_ACCOUNTED) {
            nvmlAccountingStats_t *a = &d->accounted[d->n_accounted];
            memset(a, 0, sizeof *a);
            unsigned int pid = 0;
            char *kv;
            while ((kv = strtok_r(NULL, " ", &save))) {
                char *eq = strchr(kv, '=');
                if (!eq) continue;
                *eq = 0;
                unsigned long long v = strtoull(eq + 1, NULL, 10);
                if (!strcmp(kv, "pid")) pid = (unsigned)v;
                else if (!strcmp(kv, "util")) a->gpuUtilization = (unsigned)v;
                else if (!strcmp(kv, "mem")) a->memoryUtilization = (unsigned)v;
                else if (!strcmp(kv, "max_mem")) a->maxMemoryUsage = v;
                else if (!strcmp(kv, "time_ms")) a->time = v;
                else if (!strcmp(kv, "start_us")) a->startTime = v;
                else if (!strcmp(kv, "running")) a->isRunning = (unsigned)v;
            }
            d->accounted_pids[d->n_accounted++] = pid;
        } else if (!strcmp(word, "running")) {
            char *pid = strtok_r(NULL, " ", &save);
            char *kind = strtok_r(NULL, " ", &save);
            if (!pid) continue;
            int graphics = kind && !strcmp(kind, "graphics");
            nvmlProcessInfo_t *list = graphics ? d->graphics : d->compute;
            unsigned int *n = graphics ? &d->n_graphics : &d->n_compute;
            if (*n < MAX_RUNNING) {
                memset(&list[*n], 0, sizeof list[*n]);
                list[*n].pid = (unsigned)strtoul(pid, NULL, 10);
                list[*n].gpuInstanceId = 0xFFFFFFFF;
                list[*n].computeInstanceId = 0xFFFFFFFF;
                (*n)++;
            }
        } else if (!strcmp(word, "error")) {
            char *what = strtok_r(NULL, " ", &save);
            char *e = strtok_r(NULL, " ", &save);
            int kind = what ? error_kind(what) : -1;
            if (kind >= 0 && e) d->errors[kind] = error_code(e);
        }
    }
    fclose(f);
    play();
}

/* Loads the script and checks the handle; returns the error for `kind`, if any. */
static nvmlReturn_t enter(nvmlDevice_t device, int kind) {
    load();
    if (state.init_error) return NVML_ERROR_UNINITIALIZED;
    if (!device || device < state.dev || device >= state.dev + state.devices)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (device->errors[E_ALL]) return device->errors[E_ALL];
    return kind >= 0 ? device->errors[kind] : NVML_SUCCESS;
}

nvmlReturn_t nvmlInit_v2(void) {
    load();
    return state.init_error;
}

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    return nvmlInit_v2();
}

nvmlReturn_t nvmlShutdown(void) { return NVML_SUCCESS; }

const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    snprintf(version, length, "550.00.00");
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    load();
    if (state.init_error) return NVML_ERROR_UNINITIALIZED;
    *count = state.devices;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    load();
    if (state.init_error) return NVML_ERROR_UNINITIALIZED;
    if (index >= state.devices) return NVML_ERROR_INVALID_ARGUMENT;
    *device = &state.dev[index];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    nvmlReturn_t r = enter(device, -1);
    if (r) return r;
    snprintf(name, length, "%s", device->name);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    nvmlReturn_t r = enter(device, -1);
    if (r) return r;
    snprintf(uuid, length, "%s", device->uuid);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    nvmlReturn_t r = enter(device, E_MEM);
    if (r) return r;
    memory->total = device->mem_total;
    memory->used = device->mem_used;
    memory->reserved = 0;
    memory->free = device->mem_total > device->mem_used ? device->mem_total - device->mem_used : 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int *limit) {
    nvmlReturn_t r = enter(device, E_POWER);
    if (r) return r;
    if (!device->power_limit_mw) return NVML_ERROR_NOT_SUPPORTED;
    *limit = device->power_limit_mw;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device,
                                                 unsigned long long *energy) {
    nvmlReturn_t r = enter(device, E_ENERGY);
    if (r) return r;
    *energy = device->energy_mj;
    if (device->at_ns) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        unsigned long long now_ns = (unsigned long long)now.tv_sec * 1000000000ull + now.tv_nsec;
        if (now_ns > device->at_ns)
            *energy += (unsigned long long)device->power_mw * (now_ns - device->at_ns) / 1000000000ull;
    }
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power) {
    nvmlReturn_t r = enter(device, E_POWER);
    if (r) return r;
    *power = device->power_mw;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, int sensor, unsigned int *temp) {
    nvmlReturn_t r = enter(device, E_TEMP);
    if (r) return r;
    if (sensor != 0) return NVML_ERROR_INVALID_ARGUMENT;
    *temp = device->temp_c;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *util) {
    nvmlReturn_t r = enter(device, E_UTIL);
    if (r) return r;
    util->gpu = device->util_gpu;
    util->memory = device->util_mem;
    return NVML_SUCCESS;
}

/* Samples newer than lastSeen; NOT_FOUND when there are none (as NVML does). */
nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device,
                                             nvmlProcessUtilizationSample_t *samples,
                                             unsigned int *count,
                                             unsigned long long lastSeen) {
    nvmlReturn_t r = enter(device, E_SAMPLES);
    if (r) return r;
    unsigned long long until = state.replay_start_us ? realtime_us() : ~0ull;
    unsigned int n = 0;
    for (unsigned int i = 0; i < device->n_samples; i++)
        if (device->samples[i].timeStamp > lastSeen && device->samples[i].timeStamp <= until) n++;
    if (n == 0) {
        *count = 0;
        return NVML_ERROR_NOT_FOUND;
    }
    if (!samples || *count == 0) {
        *count = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    /* A sample that came due since the caller counted waits for the next call (its time is
     * later than all of these). */
    unsigned int k = 0;
    for (unsigned int i = 0; i < device->n_samples && k < *count; i++)
        if (device->samples[i].timeStamp > lastSeen && device->samples[i].timeStamp <= until)
            samples[k++] = device->samples[i];
    *count = k;
    return NVML_SUCCESS;
}

static nvmlReturn_t running(nvmlDevice_t device, unsigned int *count, nvmlProcessInfo_t *infos,
                            int graphics) {
    nvmlReturn_t r = enter(device, E_PROCESSES);
    if (r) return r;
    const nvmlProcessInfo_t *list = graphics ? device->graphics : device->compute;
    unsigned int n = graphics ? device->n_graphics : device->n_compute;
    if (!infos || *count < n) {
        *count = n;
        return n ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
    }
    memcpy(infos, list, n * sizeof *infos);
    *count = n;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *count,
                                                     nvmlProcessInfo_t *infos) {
    return running(device, count, infos, 0);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device, unsigned int *count,
                                                      nvmlProcessInfo_t *infos) {
    return running(device, count, infos, 1);
}

/* Accounting mode is on when the script gives any accounting stats for the GPU. */
nvmlReturn_t nvmlDeviceGetAccountingMode(nvmlDevice_t device, int *mode) {
    nvmlReturn_t r = enter(device, E_ACCOUNTING);
    if (r) return r;
    *mode = device->n_accounted > 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetAccountingPids(nvmlDevice_t device, unsigned int *count,
                                         unsigned int *pids) {
    nvmlReturn_t r = enter(device, E_ACCOUNTING);
    if (r) return r;
    if (!pids || *count < device->n_accounted) {
        *count = device->n_accounted;
        return device->n_accounted ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
    }
    memcpy(pids, device->accounted_pids, device->n_accounted * sizeof *pids);
    *count = device->n_accounted;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetAccountingStats(nvmlDevice_t device, unsigned int pid,
                                          nvmlAccountingStats_t *stats) {
    nvmlReturn_t r = enter(device, E_ACCOUNTING);
    if (r) return r;
    for (unsigned int i = 0; i < device->n_accounted; i++)
        if (device->accounted_pids[i] == pid) {
            *stats = device->accounted[i];
            return NVML_SUCCESS;
        }
    return NVML_ERROR_NOT_FOUND;
}

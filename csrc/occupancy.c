/* A kernel's estimated achieved occupancy, as Kineto writes it ("est. achieved occupancy %"):
 * the blocks of one kernel that fit on an SM at once (CUDA's occupancy calculator, the
 * arithmetic of cuda_occupancy.h's cudaOccMaxActiveBlocksPerMultiprocessor, restated in C for
 * the inputs a CUPTI kernel record gives), capped by the grid's blocks per SM, times the
 * block's threads over the SM's thread slots.
 *
 * The inputs are those Kineto passes (no partitioned global caching, default cache and carveout
 * preference, no block barriers or virtual resources) but one: a kernel whose dynamic shared
 * memory is above the default per-block limit can only have launched after opting in
 * (cudaFuncAttributeMaxDynamicSharedMemorySize), so the opt-in limit applies to it; Kineto
 * applies the default limit and writes 0 % for such kernels (flash attention, CUTLASS GEMMs).
 * Pure arithmetic, any thread; tests/occupancy_check.cpp compares it with NVIDIA's header. */
#include <limits.h>

#include "gpu.h"

static int div_up(int x, int y) { return (x + y - 1) / y; }
static int round_up(int x, int y) { return y * div_up(x, y); }
static int min_int(int a, int b) { return a < b ? a : b; }

/* Shared memory an SM can be configured with on Volta and later (KiB, ascending): a size is
 * rounded up to the next one; -1 past the last (an invalid request) or for an unknown chip. */
static int carveout_up(const cprof_device_limits *d, long size, long *out) {
    static const int volta[] = {0, 8, 16, 32, 64, 96, -1};
    static const int turing[] = {32, 64, -1};
    static const int ga100[] = {0, 8, 16, 32, 64, 100, 132, 164, -1};
    static const int ga10x[] = {0, 8, 16, 32, 64, 100, -1};
    static const int hopper[] = {0, 8, 16, 32, 64, 100, 132, 164, 196, 228, -1};
    const int *steps;
    switch (d->cc_major) {
    case 7: steps = d->cc_minor == 5 ? turing : volta; break;
    case 8: steps = (d->cc_minor == 0 || d->cc_minor == 7) ? ga100 : ga10x; break;
    case 9: steps = hopper; break;
    case 10:
    case 11:
        if (d->cc_minor != 0 && d->cc_minor != 1 && d->cc_minor != 3) return -1;
        steps = hopper;
        break;
    case 12:
        if (d->cc_minor != 0 && d->cc_minor != 1) return -1;
        steps = ga10x;
        break;
    default: return -1;
    }
    for (int i = 0; steps[i] >= 0; i++)
        if (size <= (long)steps[i] * 1024) {
            *out = (long)steps[i] * 1024;
            return 0;
        }
    return -1;
}

/* The architecture's fixed limits; -1 for an architecture the calculator does not know. */
static int max_blocks_per_sm(const cprof_device_limits *d) {
    switch (d->cc_major) {
    case 3: return 16;
    case 5:
    case 6: return 32;
    case 7: return d->cc_minor == 5 ? 16 : 32;
    case 8: return d->cc_minor == 0 ? 32 : d->cc_minor == 9 ? 24 : 16;
    case 9: return 32;
    case 10: return d->cc_minor == 1 ? 24 : 32;
    case 11: return d->cc_minor == 0 ? 24 : 32;
    case 12: return 24;
    default: return -1;
    }
}

static int regs_limit(const cprof_device_limits *d, int subpartitions, int regs, int warps) {
    int max_per_thread = d->cc_major <= 6 ? 255 : 256;
    int per_warp = round_up(regs * d->warp_size, 256); /* allocated per warp, 256 at a time */
    int per_block = per_warp * warps;
    /* the hardware checks a block against the limit as if its warps filled every partition */
    int assumed = per_warp * round_up(warps, subpartitions);
    if (d->regs_per_block < assumed || d->regs_per_block < per_block || regs > max_per_thread)
        return 0;
    if (per_warp == 0) return INT_MAX;
    int warps_per_partition = d->regs_per_sm / subpartitions / per_warp;
    return warps_per_partition * subpartitions / warps;
}

static int smem_limit(const cprof_device_limits *d, int smem_static, int smem_dynamic) {
    int granularity = d->cc_major <= 7 ? 256 : 128;
    long preferred = d->smem_per_sm; /* default carveout: as much shared memory as there is */
    if (d->cc_major >= 7 && carveout_up(d, preferred, &preferred) < 0) return -1;
    long fixed = (long)smem_static + d->smem_reserved_per_block;
    long total = fixed + smem_dynamic;
    if (total > INT_MAX / 2) return 0;
    long allocated = round_up((int)total, granularity);
    long per_block = d->smem_per_block;
    if (d->cc_major >= 7 && total > d->smem_per_block && d->smem_per_block_optin > 0)
        per_block = d->smem_per_block_optin; /* it launched, so it opted in */
    if (d->cc_major >= 8) per_block += d->smem_reserved_per_block;
    if (allocated > per_block) return 0;
    long per_sm = preferred;
    if (preferred < allocated) { /* Volta on: the carveout grows to fit one block */
        if (d->cc_major < 7) per_sm = d->smem_per_sm;
        else if (carveout_up(d, allocated, &per_sm) < 0) return -1;
    }
    return allocated > 0 ? (int)(per_sm / allocated) : INT_MAX;
}

int cprof_occupancy_blocks(const cprof_device_limits *d, int regs, int smem_static,
                           int smem_dynamic, int block_threads) {
    if (!d || block_threads <= 0 || regs < 0 || smem_static < 0 || smem_dynamic < 0 ||
        d->max_threads_per_block <= 0 || d->max_threads_per_sm <= 0 || d->regs_per_block <= 0 ||
        d->regs_per_sm <= 0 || d->warp_size <= 0 || d->smem_per_block <= 0 ||
        d->smem_per_sm <= 0 || d->sms <= 0)
        return -1;
    int blocks = max_blocks_per_sm(d);
    if (blocks < 0) return -1;
    int warps = div_up(block_threads, d->warp_size);
    int subpartitions = d->cc_major == 6 && d->cc_minor == 0 ? 2 : 4;
    int by_regs = regs_limit(d, subpartitions, regs, warps);
    /* GP100 has 2 partitions, the rest of Pascal 4: what cannot run on GP10x counts as not
     * running on Pascal at all */
    if (subpartitions == 2 && by_regs && regs_limit(d, 4, regs, warps) == 0) by_regs = 0;
    int by_warps = block_threads > d->max_threads_per_block
                       ? 0 : d->max_threads_per_sm / d->warp_size / warps;
    int by_smem = smem_limit(d, smem_static, smem_dynamic);
    if (by_smem < 0) return -1;
    return min_int(min_int(by_regs, by_warps), min_int(blocks, by_smem));
}

int cprof_occupancy_percent(const cprof_device_limits *d, int regs, int smem_static,
                            int smem_dynamic, const int32_t block[3], const int32_t grid[3]) {
    if (!d || d->sms <= 0 || block[0] <= 0 || block[1] <= 0 || block[2] <= 0 || grid[0] < 0 ||
        grid[1] < 0 || grid[2] < 0)
        return -1;
    int64_t threads = (int64_t)block[0] * block[1] * block[2];
    if (threads > INT_MAX) return -1;
    int active = cprof_occupancy_blocks(d, regs, smem_static, smem_dynamic, (int)threads);
    if (active < 0) return -1;
    /* achieved: a grid smaller than the device fills fewer blocks per SM than could fit.
     * Single precision and the rounding as Kineto's, so both write the same number. */
    float blocks = (float)((double)grid[0] * grid[1] * grid[2]) / (float)d->sms;
    if ((float)active < blocks) blocks = (float)active;
    float occupancy = blocks * (float)threads / (float)d->max_threads_per_sm;
    return (int)(0.5 + occupancy * 100.0);
}

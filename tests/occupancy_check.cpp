// csrc/occupancy.c against NVIDIA's occupancy calculator (cuda_occupancy.h, header-only), for
// the configurations tests/test_occupancy.py writes on stdin, one per line:
//   cc_major cc_minor sms max_threads_per_block max_threads_per_sm warp_size regs_per_block
//   regs_per_sm smem_per_block smem_per_block_optin smem_per_sm smem_reserved_per_block
//   regs smem_static smem_dynamic bx by bz gx gy gz
// and prints, per line, "nvidia_blocks cprof_blocks nvidia_percent cprof_percent" (-1 where
// the calculator refuses the input). The percentage is Kineto's arithmetic (its
// kernelOccupancy and output_json), with the opt-in shared memory limit csrc/occupancy.c uses.
#include <cuda_occupancy.h>
#include <stdint.h>
#include <stdio.h>

extern "C" {
#include "gpu.h"
}

int main() {
    cprof_device_limits d;
    int regs, ss, sd;
    int32_t block[3], grid[3];
    while (scanf("%d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d", &d.cc_major,
                 &d.cc_minor, &d.sms, &d.max_threads_per_block, &d.max_threads_per_sm,
                 &d.warp_size, &d.regs_per_block, &d.regs_per_sm, &d.smem_per_block,
                 &d.smem_per_block_optin, &d.smem_per_sm, &d.smem_reserved_per_block, &regs,
                 &ss, &sd, &block[0], &block[1], &block[2], &grid[0], &grid[1], &grid[2]) == 21) {
        cudaOccDeviceProp p;
        p.computeMajor = d.cc_major;
        p.computeMinor = d.cc_minor;
        p.maxThreadsPerBlock = d.max_threads_per_block;
        p.maxThreadsPerMultiprocessor = d.max_threads_per_sm;
        p.regsPerBlock = d.regs_per_block;
        p.regsPerMultiprocessor = d.regs_per_sm;
        p.warpSize = d.warp_size;
        p.sharedMemPerBlock = (size_t)d.smem_per_block;
        p.sharedMemPerMultiprocessor = (size_t)d.smem_per_sm;
        p.numSms = d.sms;
        p.sharedMemPerBlockOptin = (size_t)d.smem_per_block_optin;
        p.reservedSharedMemPerBlock = (size_t)d.smem_reserved_per_block;
        cudaOccFuncAttributes f;  // Kineto's: no limit of its own, static shared memory
        f.maxThreadsPerBlock = 0x7fffffff;
        f.numRegs = regs;
        f.sharedSizeBytes = (size_t)ss;
        f.partitionedGCConfig = PARTITIONED_GC_OFF;
        f.shmemLimitConfig = FUNC_SHMEM_LIMIT_OPTIN;  // a launched kernel opted in if it had to
        f.maxDynamicSharedSizeBytes = (size_t)sd;
        cudaOccDeviceState s;
        cudaOccResult r;
        int threads = block[0] * block[1] * block[2];
        int nv = -1, nv_pct = -1;
        if (cudaOccMaxActiveBlocksPerMultiprocessor(&r, &p, &f, &s, threads, (size_t)sd) ==
            CUDA_OCC_SUCCESS) {
            nv = r.activeBlocksPerMultiprocessor;
            float blocks_per_sm = (grid[0] * grid[1] * grid[2]) / (float)d.sms;
            if (nv < blocks_per_sm) blocks_per_sm = (float)nv;
            float occupancy = blocks_per_sm * threads / (float)d.max_threads_per_sm;
            nv_pct = (int)(0.5 + occupancy * 100.0);
        }
        printf("%d %d %d %d\n", nv, cprof_occupancy_blocks(&d, regs, ss, sd, threads), nv_pct,
               cprof_occupancy_percent(&d, regs, ss, sd, block, grid));
    }
    return 0;
}

#!/usr/bin/env python
"""Writes a synthetic but realistic torch.profiler (Kineto) GPU training trace of a given size.

The trace is a GPT-like model (embedding, --layers transformer blocks, LM head, cross-entropy)
trained for as many ProfilerStep#N steps as fit in --size-mb of uncompressed JSON, with what a
Kineto trace of such a job holds:

- CPU (pid = a process id, tid = the main thread): ProfilerStep#N user_annotation ranges; the
  data loader's user_annotation; python_function ranges ("nn.Module: Linear_3" with "Python
  module id", then "torch/nn/modules/module.py(1773): _call_impl", "...: forward", ...; "Python
  id" / "Python parent id" form a tree); aten cpu_op ranges (aten::linear > aten::t >
  aten::transpose > aten::as_strided, aten::addmm, ...) with "External id" and some "Input Dims";
  the optimizer's user_annotations; the backward pass on the autograd thread
  ("autograd::engine::evaluate_function: AddmmBackward0" > "AddmmBackward0" > aten::mm, ...).
- CUDA runtime (same pid/tid as the op that calls it): cudaLaunchKernel (cbid 211) inside the
  calling op's time span, cudaMemcpyAsync (41), cudaStreamSynchronize (131) at each step's end
  and for loss.item(), cudaEventRecord / cudaStreamWaitEvent around the DDP all-reduce;
  "correlation" increases through the file.
- GPU (pid = device, tid = stream): kernels on stream 7 (compute) and stream 20 (NCCL), ~30
  distinct names, each starting after its launch and after the previous kernel on its stream
  ended (no overlap on a stream); gpu_memcpy HtoD (pageable and pinned) and DtoH; ac2g flow
  pairs (s on the launch, f on the kernel, id = correlation).
- Multi-rank (--ranks R): ncclDevKernel_AllReduce_Sum_f32_RING_LL kernels per DDP bucket on
  stream 20, overlapping the backward pass; rank R-1 runs 10% slower (a straggler) and the other
  ranks' last all-reduce of each step waits for it.
- Metadata (ph M) for process/thread names and sort indices, the "PyTorch Profiler (0)" span,
  the "Iteration Start" / "Record Window End" instants, and Kineto's top-level keys
  (deviceProperties, distributedInfo with "rank" first, baseTimeNanoseconds, traceName).

Timestamps are µs with ns precision (3 decimals), computed in integer ns, so children lie inside
their parents exactly. The file is written in chunks (one training step at a time) to a
temporary name and renamed when complete; memory use is one step's events.

    python benchmarks/make_trace.py --size-mb 1024 --out /tmp/t/rank0.pt.trace.json
    python benchmarks/make_trace.py --size-mb 100 --out /tmp/t/rank0.pt.trace.json.gz --gzip
    python benchmarks/make_trace.py --size-mb 64 --ranks 4 --out-dir /tmp/t4 [--gzip]
    ... [--seed S] [--layers 12] [--steps S | --micro-batches M] [--summary PATH]

--size-mb is per file (per rank). By default every step is one micro-batch (~1 MB of JSON with
12 layers), so the step count grows with the size (~1000 steps at 1 GB). Real profiles of large
jobs hold a few big steps instead; --steps S writes exactly S steps and makes each one
gradient accumulation over as many micro-batches as fill the size (pipeline-parallel jobs run
tens to hundreds of micro-batches per step). Tools whose cost grows with events x steps (HTA's
iteration assignment does) are sensitive to this choice.

--summary writes ground truth as JSON (event counts by category, kernel count / total ns per
kernel name, GPU busy time per stream, steps) so that a report's numbers can be checked.
"""
import argparse
import gzip
import json
import os
import random
import sys
import time

MB = 1 << 20

# ----------------------------------------------------------------------------------------------
# Kernels: key -> (name, base duration µs, registers, shared mem, grid, block, blocks/SM,
# warps/SM, est. occupancy %)
# ----------------------------------------------------------------------------------------------
_G = "void at::native::"
_ANON = "void at::native::(anonymous namespace)::"
_MTA = _ANON + "multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<"
KERNELS = {
    "gemm_fwd": ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_"
                 "execute_segment_k_off_kernel__5x_cublas", 95, 168, 213248, [132, 1, 1],
                 [384, 1, 1], 1.0, 12.0, 19),
    "gemm_fwd_big": ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_"
                     "warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas", 150, 168,
                     229632, [132, 1, 1], [384, 1, 1], 1.0, 12.0, 19),
    "gemm_dgrad": ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize128x256x64_"
                   "warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas", 110, 168, 229632,
                   [132, 1, 1], [384, 1, 1], 1.0, 12.0, 19),
    "gemm_wgrad": ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_nt_n_tilesize256x128x64_"
                   "warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas", 120, 168, 229632,
                   [132, 1, 1], [384, 1, 1], 1.0, 12.0, 19),
    "gemm_small": ("void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_"
                   "128x2_tn_align8>(cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_"
                   "tn_align8::Params)", 18, 64, 34816, [96, 4, 1], [128, 1, 1], 4.0, 16.0, 25),
    "layer_norm": (_ANON + "vectorized_layer_norm_kernel<c10::BFloat16, float>(int, float, "
                   "c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, "
                   "float*, c10::BFloat16*)", 12, 40, 0, [16384, 1, 1], [128, 1, 1], 16.0, 64.0,
                   100),
    "layer_norm_bwd": (_ANON + "layer_norm_grad_input_kernel_vectorized<c10::BFloat16, float>("
                       "c10::BFloat16 const*, c10::BFloat16 const*, float const*, float const*, "
                       "c10::BFloat16 const*, c10::BFloat16*, int)", 16, 48, 0, [16384, 1, 1],
                       [128, 1, 1], 16.0, 64.0, 100),
    "layer_norm_gb": (_ANON + "GammaBetaBackwardCUDAKernel<c10::BFloat16, float>(long, long, "
                      "c10::BFloat16 const*, c10::BFloat16 const*, float const*, float const*, "
                      "c10::BFloat16*, c10::BFloat16*)", 22, 64, 8448, [24, 1, 1], [32, 32, 1],
                      1.0, 32.0, 50),
    "gelu": (_G + "vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::"
             "TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::"
             "{lambda()#4}::operator()() const::{lambda(c10::BFloat16)#1}, std::array<char*, 2ul> "
             ">(int, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)"
             "::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::"
             "BFloat16)#1}, std::array<char*, 2ul>)", 28, 26, 0, [65536, 1, 1], [128, 1, 1], 16.0,
             64.0, 100),
    "gelu_bwd": (_G + "vectorized_elementwise_kernel<4, at::native::GeluBackwardCUDAKernelImpl(at"
                 "::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::"
                 "{lambda()#4}::operator()() const::{lambda(c10::BFloat16, c10::BFloat16)#1}, std::"
                 "array<char*, 3ul> >(int, at::native::GeluBackwardCUDAKernelImpl(at::"
                 "TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::"
                 "{lambda()#4}::operator()() const::{lambda(c10::BFloat16, c10::BFloat16)#1}, std::"
                 "array<char*, 3ul>)", 36, 32, 0, [65536, 1, 1], [128, 1, 1], 16.0, 64.0, 100),
    "flash_fwd": ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, "
                  "false, false, cutlass::bfloat16_t, Flash_kernel_traits<128, 128, 64, 4, "
                  "cutlass::bfloat16_t> >, false, true, false, false, true, true, false, false>("
                  "pytorch_flash::Flash_fwd_params)", 120, 255, 49152, [16, 96, 1], [128, 1, 1],
                  2.0, 8.0, 12),
    "flash_bwd_dot": ("void pytorch_flash::flash_bwd_dot_do_o_kernel<true, Flash_bwd_kernel_traits"
                      "<128, 64, 128, 8, 2, 4, 2, false, false, cutlass::bfloat16_t, "
                      "Flash_kernel_traits<128, 64, 128, 8, cutlass::bfloat16_t> > >(pytorch_flash"
                      "::Flash_bwd_params)", 9, 32, 0, [16, 8, 12], [256, 1, 1], 8.0, 64.0, 100),
    "flash_bwd": ("void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_"
                  "kernel_traits<128, 64, 128, 8, 2, 4, 2, false, false, cutlass::bfloat16_t, "
                  "Flash_kernel_traits<128, 64, 128, 8, cutlass::bfloat16_t> >, true, false, "
                  "false, false, true, true, false>(pytorch_flash::Flash_bwd_params)", 190, 255,
                  147456, [32, 8, 12], [256, 1, 1], 1.0, 8.0, 12),
    "flash_bwd_cvt": ("void pytorch_flash::flash_bwd_convert_dq_kernel<Flash_bwd_kernel_traits<"
                      "128, 64, 128, 8, 2, 4, 2, false, false, cutlass::bfloat16_t, "
                      "Flash_kernel_traits<128, 64, 128, 8, cutlass::bfloat16_t> > >(pytorch_flash"
                      "::Flash_bwd_params, int)", 7, 32, 0, [16, 8, 12], [256, 1, 1], 8.0, 64.0,
                      100),
    "add": (_G + "vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
            "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array"
            "<char*, 3ul>)", 9, 24, 0, [24576, 1, 1], [128, 1, 1], 16.0, 64.0, 100),
    "dropout": (_G + "(anonymous namespace)::fused_dropout_kernel_vec<c10::BFloat16, float, "
                "unsigned int, 1, 4, bool>(at::cuda::detail::TensorInfo<c10::BFloat16 const, "
                "unsigned int>, at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>, at::"
                "cuda::detail::TensorInfo<bool, unsigned int>, unsigned int, float, at::"
                "PhiloxCudaState)", 11, 30, 0, [1056, 1, 1], [256, 1, 1], 8.0, 64.0, 100),
    "dropout_bwd": (_G + "vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::"
                    "masked_scale_kernel<bool, c10::BFloat16, float>(at::Tensor&, at::Tensor "
                    "const&, at::Tensor const&, float)::{lambda(c10::BFloat16, bool)#1}, std::"
                    "array<char*, 3ul> >(int, at::native::(anonymous namespace)::masked_scale_"
                    "kernel<bool, c10::BFloat16, float>(at::Tensor&, at::Tensor const&, at::Tensor "
                    "const&, float)::{lambda(c10::BFloat16, bool)#1}, std::array<char*, 3ul>)",
                    10, 24, 0, [24576, 1, 1], [128, 1, 1], 16.0, 64.0, 100),
    "copy": (_G + "unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::"
             "TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#12}::operator()() "
             "const::{lambda(c10::BFloat16)#1}, std::array<char*, 2ul>, 4, TrivialOffsetCalculator"
             "<1, unsigned int>, TrivialOffsetCalculator<1, unsigned int>, at::native::memory::"
             "LoadWithCast<1>, at::native::memory::StoreWithCast<1> >(int, at::native::direct_"
             "copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::"
             "{lambda()#12}::operator()() const::{lambda(c10::BFloat16)#1}, std::array<char*, "
             "2ul>, TrivialOffsetCalculator<1, unsigned int>, TrivialOffsetCalculator<1, unsigned "
             "int>, at::native::memory::LoadWithCast<1>, at::native::memory::StoreWithCast<1>)",
             14, 30, 0, [12288, 1, 1], [128, 1, 1], 16.0, 64.0, 100),
    "cat": (_ANON + "CatArrayBatchedCopy_aligned16_contig<at::native::(anonymous namespace)::"
            "OpaqueType<2u>, unsigned int, 3, 128, 1>(at::native::(anonymous namespace)::OpaqueType"
            "<2u>*, at::native::(anonymous namespace)::CatArrInputTensorMetadata<at::native::"
            "(anonymous namespace)::OpaqueType<2u>, unsigned int, 128, 1>, at::native::(anonymous "
            "namespace)::TensorSizeStride<unsigned int, 4u>, int, unsigned int)", 17, 32, 0,
            [1584, 3, 1], [512, 1, 1], 4.0, 64.0, 100),
    "fill": (_G + "vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<"
             "char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)", 3, 16,
             0, [128, 1, 1], [256, 1, 1], 8.0, 64.0, 100),
    "mul": (_G + "vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, float, "
            "at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul> >(int, at::"
            "native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<"
            "float> >, std::array<char*, 3ul>)", 3, 20, 0, [1, 1, 1], [64, 1, 1], 16.0, 2.0, 3),
    "reduce_sum": (_G + "reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_"
                   "wrapper_t<float, at::native::sum_functor<float, float, float>::operator()(at::"
                   "TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4> >(at::"
                   "native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_"
                   "functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, "
                   "float)#1}>, unsigned int, float, 4>)", 19, 32, 16, [96, 4, 1], [32, 16, 1],
                   4.0, 64.0, 100),
    "norm": (_G + "reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::NormTwoOps<float"
             ", float, float>, unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::"
             "NormTwoOps<float, float, float>, unsigned int, float, 4>)", 5, 32, 16, [1, 1, 1],
             [32, 16, 1], 1.0, 16.0, 25),
    "softmax_fwd": (_ANON + "cunn_SoftMaxForward<4, float, float, float, at::native::(anonymous "
                    "namespace)::LogSoftMaxForwardEpilogue>(float*, float const*, int)", 85, 38,
                    64, [8192, 1, 1], [1024, 1, 1], 2.0, 64.0, 100),
    "softmax_bwd": (_ANON + "cunn_SoftMaxBackward<4, float, float, float, at::native::(anonymous "
                    "namespace)::LogSoftMaxBackwardEpilogue>(float*, float const*, float const*, "
                    "int)", 110, 40, 64, [8192, 1, 1], [1024, 1, 1], 2.0, 64.0, 100),
    "nll_fwd": (_ANON + "nll_loss_forward_reduce_cuda_kernel_2d<float, float, long>(float*, "
                "float*, float const*, long const*, float const*, bool, long, long, long, long)",
                4, 32, 4096, [1, 1, 1], [1024, 1, 1], 1.0, 32.0, 50),
    "nll_bwd": (_ANON + "nll_loss_backward_reduce_cuda_kernel_2d<float, long>(float*, float "
                "const*, long const*, float const*, float const*, bool, int, int, long, long)",
                6, 24, 0, [1, 1, 1], [1024, 1, 1], 1.0, 32.0, 50),
    "embed_fwd": (_ANON + "indexSelectLargeIndex<c10::BFloat16, long, unsigned int, 2, 2, -2, "
                  "true>(at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>, at::cuda::"
                  "detail::TensorInfo<c10::BFloat16 const, unsigned int>, at::cuda::detail::"
                  "TensorInfo<long const, unsigned int>, int, int, unsigned int, unsigned int, "
                  "long)", 15, 32, 0, [12288, 1, 1], [128, 1, 1], 16.0, 64.0, 100),
    "embed_bwd": (_ANON + "compute_grad_weight<c10::BFloat16, long>(long const*, c10::BFloat16 "
                  "const*, long const*, long, long, long const*, long, long, float*)", 45, 40, 0,
                  [2048, 1, 1], [32, 1, 1], 16.0, 16.0, 25),
    "embed_bwd2": (_ANON + "sum_and_scatter<c10::BFloat16, long>(long const*, c10::BFloat16*, "
                   "long, long const*, float const*, long const*, long, long, long const*, long "
                   "const*)", 30, 32, 0, [2048, 1, 1], [32, 1, 1], 16.0, 16.0, 25),
    "adam": (_MTA + "4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, (at::"
             "native::ADAM_MODE)1, false>, double*, double, double, double, double, double, bool, "
             "double*, double*>(at::native::(anonymous namespace)::TensorListMetadata<4>, at::"
             "native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, (at::native::ADAM_"
             "MODE)1, false>, double*, double, double, double, double, double, bool, double*, "
             "double*)", 160, 90, 0, [3120, 1, 1], [512, 1, 1], 4.0, 64.0, 100),
    "foreach_norm": (_MTA + "1>, at::native::(anonymous namespace)::LpNormFunctor<float, (at::"
                     "native::(anonymous namespace)::NormType)1, float, float>, float*, int>(at::"
                     "native::(anonymous namespace)::TensorListMetadata<1>, at::native::(anonymous"
                     " namespace)::LpNormFunctor<float, (at::native::(anonymous namespace)::"
                     "NormType)1, float, float>, float*, int)", 40, 32, 2048, [320, 1, 1],
                     [512, 1, 1], 4.0, 64.0, 100),
    "lpnorm_cleanup": (_ANON + "lpnorm_cleanup<float, (at::native::(anonymous namespace)::"
                       "NormType)1, float, float>(float const*, at::native::(anonymous namespace)"
                       "::TensorListAddresses, int)", 3, 32, 2048, [148, 1, 1], [512, 1, 1], 4.0,
                       64.0, 100),
    "foreach_mul": (_MTA + "1>, at::native::(anonymous namespace)::BinaryOpScalarTensorFunctor<"
                    "float, 1, 1, 0>, std::multiplies<float>, float*>(at::native::(anonymous "
                    "namespace)::TensorListMetadata<1>, at::native::(anonymous namespace)::"
                    "BinaryOpScalarTensorFunctor<float, 1, 1, 0>, std::multiplies<float>, float*)",
                    35, 32, 0, [320, 1, 1], [512, 1, 1], 4.0, 64.0, 100),
    "allreduce": ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, "
                  "ncclWork*)", 180, 96, 0, [8, 1, 1], [512, 1, 1], 1.0, 16.0, 25),
}

# name, pageable/pinned, bytes, GB/s
MEMCPY_NAMES = {
    "h2d_pageable": "Memcpy HtoD (Pageable -> Device)",
    "h2d_pinned": "Memcpy HtoD (Pinned -> Device)",
    "d2h_pageable": "Memcpy DtoH (Device -> Pageable)",
}

DEVICE_PROPS = ('{"id": %d, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85029158912, '
                '"computeMajor": 9, "computeMinor": 0, "maxThreadsPerBlock": 1024, '
                '"maxThreadsPerMultiprocessor": 2048, "regsPerBlock": 65536, '
                '"regsPerMultiprocessor": 65536, "warpSize": 32, "sharedMemPerBlock": 49152, '
                '"sharedMemPerMultiprocessor": 233472, "numSms": 132, '
                '"sharedMemPerBlockOptin": 232448}')

COMPUTE_STREAM = 7
NCCL_STREAM = 20


def us(ns):
    """Integer ns as a Kineto µs string with 3 decimals."""
    q, r = divmod(ns, 1000)
    return "%d.%03d" % (q, r)


def jstr(s):
    return json.dumps(s)


class RankTrace:
    """Generates one rank's events, one training step at a time."""

    def __init__(self, rank, world, seed, layers, speed, slow_speed, base_ts_ns,
                 micro_batches=1, sink=None):
        self.rank = rank
        self.world = world
        self.rng = random.Random(seed * 1000003 + rank)
        self.rand = self.rng.random
        self.layers = layers
        self.micro_batches = micro_batches
        self.mb_no = 0
        self.sink = sink  # called with a list of finished events when out grows large
        self.speed = speed  # multiplies every duration (CPU and GPU): 1.10 = 10% slower
        self.slow_speed = slow_speed  # the straggler's speed (for the all-reduce wait)
        self.pid = 31337 + 113 * rank
        self.tid = self.pid
        self.bwd_tid = self.pid + 71
        self.device = rank % 8
        self.t = base_ts_ns  # CPU clock, ns (relative to baseTimeNanoseconds)
        self.t_first = base_ts_ns
        self.free = {COMPUTE_STREAM: base_ts_ns, NCCL_STREAM: base_ts_ns}
        self.ext = 0
        self.corr = 0
        self.pyid = 2  # 1, 2: the script's <module> and train() frames, written at the end
        self.evidx = 0
        self.step_no = 0
        self.out = None
        self.ext_stack = [0]
        self.py_stack = [2]
        self.cur_tid = self.tid
        # ground truth
        self.counts = {}
        self.kstats = {}  # kernel/memcpy name -> [count, total ns]
        self.busy = {COMPUTE_STREAM: 0, NCCL_STREAM: 0}
        self.gpu_first = None
        self.gpu_last = 0
        self.steps = []
        self._templates()

    # -- templates ------------------------------------------------------------------------------
    def _templates(self):
        pid = self.pid
        self._op_t = {}
        self._py_t = {}
        dev = self.device
        self._k_t = {}
        self._kinfo = {}
        for key, (name, base, regs, smem, grid, block, bps, wps, occ) in KERNELS.items():
            self._kinfo[key] = (name, int(base * 1000))
            for stream in (COMPUTE_STREAM, NCCL_STREAM):
                self._k_t[(key, stream)] = (
                    '{"ph": "X", "cat": "kernel", "name": %s, "pid": %d, "tid": %d, '
                    '"ts": %%s, "dur": %%s, "args": {"External id": %%d, "queued": 0, '
                    '"device": %d, "context": 1, "stream": %d, "correlation": %%d, '
                    '"registers per thread": %d, "shared memory": %d, "blocks per SM": %s, '
                    '"warps per SM": %s, "grid": %s, "block": %s, '
                    '"est. achieved occupancy %%%%": %d}}'
                    % (jstr(name), dev, stream, dev, stream, regs, smem, bps, wps,
                       json.dumps(grid), json.dumps(block), occ))
        self._m_t = {}
        for key, name in MEMCPY_NAMES.items():
            self._m_t[key] = (
                '{"ph": "X", "cat": "gpu_memcpy", "name": %s, "pid": %d, "tid": %d, '
                '"ts": %%s, "dur": %%s, "args": {"External id": %%d, "device": %d, '
                '"context": 1, "stream": %d, "correlation": %%d, "bytes": %%d, '
                '"memory bandwidth (GB/s)": %%s}}'
                % (jstr(name), dev, COMPUTE_STREAM, dev, COMPUTE_STREAM))
        self._rt_t = {}
        for tid in (self.tid, self.bwd_tid):
            for name, cbid in (("cudaLaunchKernel", 211), ("cudaMemcpyAsync", 41),
                               ("cudaStreamSynchronize", 131), ("cudaEventRecord", 135),
                               ("cudaStreamWaitEvent", 147)):
                self._rt_t[(name, tid)] = (
                    '{"ph": "X", "cat": "cuda_runtime", "name": "%s", "pid": %d, "tid": %d, '
                    '"ts": %%s, "dur": %%s, "args": {"External id": %%d, "cbid": %d, '
                    '"correlation": %%d}}' % (name, pid, tid, cbid))
        self._flow_s = {tid: ('{"ph": "s", "id": %%d, "pid": %d, "tid": %d, "ts": %%s, '
                              '"cat": "ac2g", "name": "ac2g"}' % (pid, tid))
                        for tid in (self.tid, self.bwd_tid)}
        self._flow_f = {s: ('{"ph": "f", "id": %%d, "pid": %d, "tid": %d, "ts": %%s, '
                            '"cat": "ac2g", "name": "ac2g", "bp": "e"}' % (dev, s))
                        for s in (COMPUTE_STREAM, NCCL_STREAM)}

    def op_t(self, name, cat="cpu_op", extra="", tid=None):
        tid = self.cur_tid if tid is None else tid
        key = (name, cat, extra, tid)
        t = self._op_t.get(key)
        if t is None:
            t = ('{"ph": "X", "cat": "%s", "name": %s, "pid": %d, "tid": %d, "ts": %%s, '
                 '"dur": %%s, "args": {"External id": %%d, "Record function id": 0, '
                 '"Ev Idx": %%d%s}}' % (cat, jstr(name), self.pid, tid, extra))
            self._op_t[key] = t
        return t

    def py_t(self, name, module_id=None):
        key = (name, module_id, self.cur_tid)
        t = self._py_t.get(key)
        if t is None:
            mod = "" if module_id is None else ', "Python module id": %d' % module_id
            t = ('{"ph": "X", "cat": "python_function", "name": %s, "pid": %d, "tid": %d, '
                 '"ts": %%s, "dur": %%s, "args": {"Python parent id": %%d, "Python id": %%d%s, '
                 '"Ev Idx": %%d}}' % (jstr(name), self.pid, self.cur_tid, mod))
            self._py_t[key] = t
        return t

    def flush_if(self, limit=20000):
        if self.sink is not None and len(self.out) >= limit:
            self.sink(self.out)
            self.out = []

    # -- time -----------------------------------------------------------------------------------
    def cpu(self, lo_us, hi_us):
        """Advance the CPU clock by lo..hi µs of host work."""
        self.t += int((lo_us + (hi_us - lo_us) * self.rand()) * 1000 * self.speed)

    def dur(self, base_ns, spread=0.15):
        return int(base_ns * (1.0 - spread + 2.0 * spread * self.rand()) * self.speed)

    # -- ranges ---------------------------------------------------------------------------------
    def begin(self, name, cat="cpu_op", extra=""):
        self.ext += 1
        self.evidx += 1
        self.cpu(0.4, 1.5)
        self.ext_stack.append(self.ext)
        return (self.op_t(name, cat, extra), self.t, self.ext, self.evidx)

    def end(self, tok, lo=0.3, hi=1.2):
        self.cpu(lo, hi)
        tmpl, t0, ext, evidx = tok
        self.out.append(tmpl % (us(t0), us(self.t - t0), ext, evidx))
        self.ext_stack.pop()
        self.counts["cpu"] = self.counts.get("cpu", 0) + 1

    def leaf(self, name, lo=1.0, hi=4.0, extra=""):
        """A cpu_op that launches nothing (aten::view, aten::empty, ...)."""
        tok = self.begin(name, extra=extra)
        self.cpu(lo, hi)
        self.end(tok)

    def py_begin(self, name, module_id=None):
        self.pyid += 1
        self.evidx += 1
        self.cpu(0.3, 1.5)
        parent = self.py_stack[-1]
        self.py_stack.append(self.pyid)
        return (self.py_t(name, module_id), self.t, parent, self.pyid, self.evidx)

    def py_end(self, tok):
        self.cpu(0.2, 0.8)
        tmpl, t0, parent, pyid, evidx = tok
        self.out.append(tmpl % (us(t0), us(self.t - t0), parent, pyid, evidx))
        self.py_stack.pop()
        self.counts["py"] = self.counts.get("py", 0) + 1

    # -- CUDA -----------------------------------------------------------------------------------
    def _gpu_account(self, name, start, d, stream):
        st = self.kstats.get(name)
        if st is None:
            self.kstats[name] = [1, d]
        else:
            st[0] += 1
            st[1] += d
        self.busy[stream] += d
        if self.gpu_first is None:
            self.gpu_first = start
        end = start + d
        if end > self.gpu_last:
            self.gpu_last = end

    def launch(self, key, stream=COMPUTE_STREAM, after=0, extra_ns=0):
        """cudaLaunchKernel from the current op; the kernel starts after the launch, after the
        previous kernel on its stream, and after `after` (a cross-stream dependency)."""
        self.cpu(1.0, 3.0)
        t = self.t
        self.corr += 1
        corr = self.corr
        ext = self.ext_stack[-1]
        rdur = self.dur(4200, 0.4)
        free = self.free[stream]
        start = t + self.dur(4500, 0.4)
        gap = free + int(700 + 1300 * self.rand())
        if gap > start:
            start = gap
        if after > start:
            start = after + int(1000 + 2000 * self.rand())
        name, base = self._kinfo[key]
        d = self.dur(base) + extra_ns
        self.free[stream] = start + d
        tid = self.cur_tid
        o = self.out
        o.append(self._rt_t[("cudaLaunchKernel", tid)] % (us(t), us(rdur), ext, corr))
        o.append(self._k_t[(key, stream)] % (us(start), us(d), ext, corr))
        o.append(self._flow_s[tid] % (corr, us(t)))
        o.append(self._flow_f[stream] % (corr, us(start)))
        self._gpu_account(name, start, d, stream)
        self.counts["launch"] = self.counts.get("launch", 0) + 1
        self.t = t + rdur

    def memcpy(self, key, nbytes, gbps):
        """cudaMemcpyAsync on the compute stream; pageable copies block the host until done."""
        self.cpu(1.0, 3.0)
        t = self.t
        self.corr += 1
        corr = self.corr
        ext = self.ext_stack[-1]
        start = t + self.dur(3500, 0.4)
        gap = self.free[COMPUTE_STREAM] + int(700 + 1300 * self.rand())
        if gap > start:
            start = gap
        d = max(1200, int(nbytes / gbps * (0.9 + 0.2 * self.rand()) * self.speed))
        self.free[COMPUTE_STREAM] = start + d
        if "pageable" in key:
            rdur = start + d - t + self.dur(3000, 0.3)
        else:
            rdur = self.dur(5000, 0.4)
        tid = self.cur_tid
        o = self.out
        o.append(self._rt_t[("cudaMemcpyAsync", tid)] % (us(t), us(rdur), ext, corr))
        o.append(self._m_t[key] % (us(start), us(d), ext, corr, nbytes, "%.4f" % (nbytes / d)))
        o.append(self._flow_s[tid] % (corr, us(t)))
        o.append(self._flow_f[COMPUTE_STREAM] % (corr, us(start)))
        self._gpu_account(MEMCPY_NAMES[key], start, d, COMPUTE_STREAM)
        self.counts["memcpy"] = self.counts.get("memcpy", 0) + 1
        self.t = t + rdur

    def runtime(self, name, until=0):
        """A runtime call with no GPU activity; until = the host blocks until then."""
        self.cpu(0.5, 2.0)
        t = self.t
        self.corr += 1
        d = self.dur(2500, 0.5)
        if until and until + 1500 > t + d:
            d = until + int(1000 + 2000 * self.rand()) - t
        self.out.append(self._rt_t[(name, self.cur_tid)] % (us(t), us(d), self.ext_stack[-1],
                                                           self.corr))
        self.counts["runtime"] = self.counts.get("runtime", 0) + 1
        self.t = t + d

    def sync(self):
        self.runtime("cudaStreamSynchronize", until=max(self.free.values()))

    # -- model ----------------------------------------------------------------------------------
    def op(self, name, kernels=(), children=(), extra="", lo=2.0, hi=8.0):
        """An aten op: optional leaf sub-ops, then its kernel launches."""
        tok = self.begin(name, extra=extra)
        self.cpu(lo, hi)
        for c in children:
            self.leaf(c)
        for k in kernels:
            self.launch(k)
        self.end(tok)

    def linear(self, gemm="gemm_fwd", dims=""):
        tok = self.begin("aten::linear", extra=dims)
        t1 = self.begin("aten::t")
        t2 = self.begin("aten::transpose")
        self.leaf("aten::as_strided", 0.3, 1.0)
        self.end(t2)
        self.end(t1)
        self.op("aten::addmm", (gemm,), ("aten::expand", "aten::resolve_conj"), lo=4, hi=12)
        self.end(tok)

    def module(self, cls, idx, forward, body, *args):
        m = self.py_begin("nn.Module: %s_%d" % (cls, idx), module_id=idx)
        c = self.py_begin("torch/nn/modules/module.py(1773): _call_impl")
        f = self.py_begin(forward)
        body(*args)
        self.py_end(f)
        self.py_end(c)
        self.py_end(m)

    def layer_norm(self):
        tok = self.begin("aten::layer_norm", extra=', "Input Dims": [[8, 2048, 768], [], '
                         '[768], [768], [], []], "Input type": ["c10::BFloat16", "", '
                         '"c10::BFloat16", "c10::BFloat16", "Scalar", "Scalar"]')
        self.op("aten::native_layer_norm", ("layer_norm",), ("aten::empty", "aten::empty"))
        self.end(tok)

    def dropout(self):
        tok = self.begin("aten::dropout")
        self.op("aten::native_dropout", ("dropout",), ("aten::empty_like", "aten::empty"))
        self.end(tok)

    def attention(self, i):
        self.module("Linear", 4 * i, "torch/nn/modules/linear.py(125): forward", self.linear,
                    "gemm_fwd", ', "Input Dims": [[8, 2048, 768], [2304, 768], [2304]], '
                    '"Input type": ["c10::BFloat16", "c10::BFloat16", "c10::BFloat16"]')
        self.leaf("aten::split", 3, 8)
        for _ in range(3):
            self.leaf("aten::view", 1, 2)
            self.leaf("aten::transpose", 1, 2)
        tok = self.begin("aten::scaled_dot_product_attention")
        t2 = self.begin("aten::_scaled_dot_product_flash_attention")
        self.leaf("aten::transpose", 1, 2)
        self.op("aten::_flash_attention_forward", ("flash_fwd",), ("aten::empty_like",
                                                                   "aten::empty"), lo=6, hi=14)
        self.end(t2)
        self.end(tok)
        self.leaf("aten::transpose", 1, 2)
        tok = self.begin("aten::contiguous")
        t2 = self.begin("aten::clone")
        self.leaf("aten::empty_like")
        self.op("aten::copy_", ("copy",))
        self.end(t2)
        self.end(tok)
        self.leaf("aten::view", 1, 2)
        self.module("Linear", 4 * i + 1, "torch/nn/modules/linear.py(125): forward", self.linear,
                    "gemm_small", "")
        self.module("Dropout", 3 * i + 1, "torch/nn/modules/dropout.py(69): forward",
                    self.dropout)

    def mlp(self, i):
        self.module("Linear", 4 * i + 2, "torch/nn/modules/linear.py(125): forward", self.linear,
                    "gemm_fwd_big", "")
        self.module("GELU", i, "torch/nn/modules/activation.py(734): forward", self.op,
                    "aten::gelu", ("gelu",))
        self.module("Linear", 4 * i + 3, "torch/nn/modules/linear.py(125): forward", self.linear,
                    "gemm_fwd", "")
        self.module("Dropout", 3 * i + 2, "torch/nn/modules/dropout.py(69): forward",
                    self.dropout)

    def block(self, i):
        self.module("LayerNorm", 2 * i, "torch/nn/modules/normalization.py(217): forward",
                    self.layer_norm)
        self.module("CausalSelfAttention", i, "model.py(61): forward", self.attention, i)
        self.op("aten::add", ("add",))
        self.module("LayerNorm", 2 * i + 1, "torch/nn/modules/normalization.py(217): forward",
                    self.layer_norm)
        self.module("MLP", i, "model.py(93): forward", self.mlp, i)
        self.op("aten::add", ("add",))

    def embedding(self):
        tok = self.begin("aten::embedding")
        self.leaf("aten::reshape", 1, 2)
        self.op("aten::index_select", ("embed_fwd",), ("aten::empty",))
        self.leaf("aten::view", 1, 2)
        self.end(tok)

    def gpt(self):
        L = self.layers
        self.module("Embedding", 0, "torch/nn/modules/sparse.py(190): forward", self.embedding)
        self.leaf("aten::arange", 2, 5)
        self.module("Embedding", 1, "torch/nn/modules/sparse.py(190): forward", self.embedding)
        self.op("aten::add", ("add",))
        self.module("Dropout", 0, "torch/nn/modules/dropout.py(69): forward", self.dropout)
        for i in range(L):
            self.module("Block", i, "model.py(112): forward", self.block, i)
            self.flush_if()
        self.module("LayerNorm", 2 * L, "torch/nn/modules/normalization.py(217): forward",
                    self.layer_norm)
        self.module("Linear", 4 * L, "torch/nn/modules/linear.py(125): forward", self.linear,
                    "gemm_fwd_big", ', "Input Dims": [[8, 2048, 768], [50304, 768], []], '
                    '"Input type": ["c10::BFloat16", "c10::BFloat16", ""]')
        # loss
        tok = self.begin("aten::cross_entropy_loss")
        t2 = self.begin("aten::log_softmax")
        self.op("aten::_log_softmax", ("softmax_fwd",), lo=4, hi=9)
        self.end(t2)
        t2 = self.begin("aten::nll_loss_nd")
        t3 = self.begin("aten::nll_loss")
        self.op("aten::nll_loss_forward", ("nll_fwd",))
        self.end(t3)
        self.end(t2)
        self.end(tok)

    # backward, on the autograd thread
    def node(self, node, ops):
        """autograd::engine::evaluate_function: X > X > [(aten op, kernels), ...]"""
        tok = self.begin("autograd::engine::evaluate_function: " + node)
        t2 = self.begin(node)
        for name, kernels in ops:
            self.op(name, kernels, lo=2, hi=6)
        self.end(t2)
        self.end(tok)

    def accumulate(self, n):
        for _ in range(n):
            tok = self.begin("autograd::engine::evaluate_function: torch::autograd::"
                             "AccumulateGrad")
            t2 = self.begin("torch::autograd::AccumulateGrad")
            self.leaf("aten::detach", 0.5, 1.5)
            self.end(t2)
            self.end(tok)

    def addmm_bwd(self, dgrad="gemm_dgrad"):
        self.node("AddmmBackward0", (("aten::t", ()), ("aten::mm", (dgrad,)), ("aten::t", ()),
                                     ("aten::mm", ("gemm_wgrad",)),
                                     ("aten::sum", ("reduce_sum",)), ("aten::view", ())))
        self.accumulate(2)

    def ln_bwd(self):
        self.node("NativeLayerNormBackward0", (("aten::native_layer_norm_backward",
                                                ("layer_norm_bwd", "layer_norm_gb")),))
        self.accumulate(2)

    def allreduce(self, bucket, last):
        """A DDP bucket: c10d::allreduce_ > record_param_comms > nccl:all_reduce, on stream 20,
        after the gradients computed so far (cudaEventRecord / cudaStreamWaitEvent)."""
        after = self.free[COMPUTE_STREAM]
        extra = 0
        if last and self.slow_speed > self.speed:
            # everyone waits for the straggler in the step's last collective
            extra = int((self.slow_speed / self.speed - 1.0) * (after - self.step_gpu_start))
        n = 6291456 + bucket * 524288
        tok = self.begin("c10d::allreduce_")
        self.runtime("cudaEventRecord")
        self.runtime("cudaStreamWaitEvent")
        t2 = self.begin("record_param_comms", extra=(
            ', "Collective name": "allreduce", "dtype": "Float", "In msg nelems": %d, '
            '"Out msg nelems": %d, "In split size": "[]", "Out split size": "[]", '
            '"Global rank start": 0, "Global rank stride": 1, "Group size": %d, '
            '"Process Group Name": "0", "Process Group Description": "default_pg", '
            '"Process Group Ranks": "[%s]"' % (n, n, self.world, ", ".join(
                str(r) for r in range(min(self.world, 16))) + (", ..." if self.world > 16
                                                                 else ""))))
        t3 = self.begin("nccl:all_reduce", cat="user_annotation")
        self.launch("allreduce", NCCL_STREAM, after=after, extra_ns=extra)
        self.end(t3)
        self.end(t2)
        self.end(tok)

    def backward(self, sync_grads=True):
        L = self.layers
        main = self.cur_tid
        frames = [self.py_begin("torch/_tensor.py(648): backward"),
                  self.py_begin("torch/autograd/__init__.py(353): backward"),
                  self.py_begin("torch/autograd/graph.py(824): _engine_run_backward"),
                  self.py_begin("<built-in method run_backward of torch._C._EngineBase object "
                                "at 0x7f3a2c1e8d40>")]
        self.cur_tid = self.bwd_tid
        self.cpu(8, 20)
        self.node("NllLossBackward0", (("aten::nll_loss_backward", ("fill", "nll_bwd")),))
        self.node("LogSoftmaxBackward0", (("aten::_log_softmax_backward_data",
                                           ("softmax_bwd",)),))
        self.node("MmBackward0", (("aten::t", ()), ("aten::mm", ("gemm_dgrad",)),
                                  ("aten::t", ()), ("aten::mm", ("gemm_wgrad",))))
        self.accumulate(1)
        self.ln_bwd()
        buckets = 4 if self.world > 1 and sync_grads else 0
        per = max(1, L // buckets) if buckets else 0
        bucket = 0
        for i in reversed(range(L)):
            self.node("AddBackward0", ())
            self.node("NativeDropoutBackward0", (("aten::native_dropout_backward",
                                                  ("dropout_bwd",)),))
            self.addmm_bwd()
            self.node("GeluBackward0", (("aten::gelu_backward", ("gelu_bwd",)),))
            self.addmm_bwd()
            self.ln_bwd()
            self.node("AddBackward0", (("aten::add", ("add",)),))
            self.node("NativeDropoutBackward0", (("aten::native_dropout_backward",
                                                  ("dropout_bwd",)),))
            self.addmm_bwd("gemm_small")
            self.node("CloneBackward0", ())
            self.node("TransposeBackward0", (("aten::transpose", ()),))
            self.node("ScaledDotProductFlashAttentionBackward0", (
                ("aten::_scaled_dot_product_flash_attention_backward", ()),
                ("aten::_flash_attention_backward", ("flash_bwd_dot", "flash_bwd",
                                                     "flash_bwd_cvt"))))
            self.node("SplitBackward0", (("aten::cat", ("cat",)),))
            self.addmm_bwd()
            self.ln_bwd()
            if buckets and (L - i) % per == 0 and bucket < buckets - 1:
                self.allreduce(bucket, False)
                bucket += 1
            self.flush_if()
        self.node("AddBackward0", ())
        self.node("EmbeddingBackward0", (("aten::embedding_backward", ()),
                                         ("aten::embedding_dense_backward",
                                          ("fill", "embed_bwd", "embed_bwd2")),))
        self.accumulate(1)
        self.node("EmbeddingBackward0", (("aten::embedding_dense_backward",
                                          ("fill", "embed_bwd", "embed_bwd2")),))
        self.accumulate(1)
        if buckets:
            self.allreduce(bucket, True)
        self.cpu(5, 15)
        self.cur_tid = main
        for f in reversed(frames):
            self.py_end(f)

    def micro_batch(self, last):
        """One micro-batch: data, forward, backward (DDP syncs gradients on the last one)."""
        self.mb_no += 1
        dl = self.py_begin("torch/utils/data/dataloader.py(733): __next__")
        tok = self.begin("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
                         cat="user_annotation")
        self.cpu(800, 2500)
        t2 = self.begin("aten::stack")
        self.op("aten::cat", (), ("aten::empty",), lo=20, hi=60)
        self.end(t2)
        self.end(tok)
        self.py_end(dl)
        for pinned in (self.mb_no % 3 == 0, True):
            tok = self.begin("aten::to")
            t2 = self.begin("aten::_to_copy")
            self.leaf("aten::empty_strided")
            t3 = self.begin("aten::copy_")
            if pinned:
                self.memcpy("h2d_pinned", 131072, 24.0)
            else:
                self.memcpy("h2d_pageable", 131072, 9.0)
            self.end(t3)
            self.end(t2)
            self.end(tok)
        # forward
        self.module("GPT", 0, "model.py(170): forward", self.gpt)
        # backward
        self.backward(sync_grads=last)
        # logging: loss.item() every 10th micro-batch (a DtoH copy and a sync)
        if self.mb_no % 10 == 0:
            tok = self.begin("aten::item")
            t2 = self.begin("aten::_local_scalar_dense")
            self.memcpy("d2h_pageable", 4, 0.002)
            self.sync()
            self.end(t2)
            self.end(tok)
            self.cpu(20, 60)

    def step(self):
        self.step_no += 1
        n = self.step_no
        self.step_gpu_start = max(self.free[COMPUTE_STREAM], self.t)
        t_step = self.t
        ps = self.begin("ProfilerStep#%d" % n, cat="user_annotation")
        top = self.py_begin("train.py(74): train_step")
        for mb in range(self.micro_batches):
            self.micro_batch(mb == self.micro_batches - 1)
        if self.world > 1:
            self.runtime("cudaStreamWaitEvent")
            self.free[COMPUTE_STREAM] = max(self.free[COMPUTE_STREAM], self.free[NCCL_STREAM])
        # gradient clipping
        clip = self.py_begin("torch/nn/utils/clip_grad.py(84): clip_grad_norm_")
        self.op("aten::_foreach_norm", ("foreach_norm", "lpnorm_cleanup"), lo=20, hi=40)
        tok = self.begin("aten::stack")
        self.op("aten::cat", ("cat",))
        self.end(tok)
        self.op("aten::linalg_vector_norm", ("norm",))
        self.op("aten::add", ("add",))
        self.op("aten::reciprocal", ("mul",))
        self.op("aten::mul", ("mul",))
        self.op("aten::clamp", ("mul",))
        self.op("aten::_foreach_mul_", ("foreach_mul", "foreach_mul"), lo=15, hi=30)
        self.py_end(clip)
        # optimizer
        tok = self.begin("Optimizer.step#AdamW.step", cat="user_annotation")
        self.cpu(20, 50)
        self.op("aten::_fused_adamw_", ("adam", "adam", "adam"), lo=30, hi=60)
        self.end(tok)
        tok = self.begin("Optimizer.zero_grad#AdamW.zero_grad", cat="user_annotation")
        self.cpu(30, 80)
        self.end(tok)
        self.py_end(top)
        self.sync()
        self.end(ps)
        self.steps.append((n, t_step, self.t))
        self.cpu(30, 90)  # profiler.step() etc. between steps

    # -- output ---------------------------------------------------------------------------------
    def meta(self):
        pid, dev = self.pid, self.device
        ts = us(self.t_first)
        ev = []

        def m(name, p, t, args):
            ev.append('{"ph": "M", "name": "%s", "ts": %s, "pid": %s, "tid": %s, "args": %s}'
                      % (name, ts, p, t, json.dumps(args)))
        m("process_name", pid, 0, {"name": "python"})
        m("process_labels", pid, 0, {"labels": "CPU"})
        m("process_sort_index", pid, 0, {"sort_index": pid})
        m("thread_name", pid, self.tid, {"name": "thread %d (python)" % self.tid})
        m("thread_sort_index", pid, self.tid, {"sort_index": self.tid})
        m("thread_name", pid, self.bwd_tid, {"name": "thread %d (pt_autograd_0)" % self.bwd_tid})
        m("thread_sort_index", pid, self.bwd_tid, {"sort_index": self.bwd_tid})
        m("process_name", dev, 0, {"name": "GPU %d" % dev})
        m("process_labels", dev, 0, {"labels": "GPU %d" % dev})
        m("process_sort_index", dev, 0, {"sort_index": 5000000 + dev})
        for s in (COMPUTE_STREAM, NCCL_STREAM):
            m("thread_name", dev, s, {"name": "stream %d" % s})
            m("thread_sort_index", dev, s, {"sort_index": s})
        return ev

    def tail(self):
        """The script's frames (Python ids 1, 2) around all steps, the profiler span, instants."""
        t0, t1 = self.t_first, self.t
        ev = [
            '{"ph": "X", "cat": "python_function", "name": "train.py(151): <module>", "pid": %d, '
            '"tid": %d, "ts": %s, "dur": %s, "args": {"Python parent id": null, "Python id": 1, '
            '"Ev Idx": 0}}' % (self.pid, self.tid, us(t0 - 2000), us(t1 - t0 + 4000)),
            '{"ph": "X", "cat": "python_function", "name": "train.py(120): train", "pid": %d, '
            '"tid": %d, "ts": %s, "dur": %s, "args": {"Python parent id": 1, "Python id": 2, '
            '"Ev Idx": 0}}' % (self.pid, self.tid, us(t0 - 1000), us(t1 - t0 + 2000)),
            '{"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", '
            '"tid": "PyTorch Profiler", "ts": %s, "dur": %s, "args": {"Op count": 0}}'
            % (us(t0 - 5000), us(t1 - t0 + 10000)),
            '{"ph": "M", "name": "process_sort_index", "ts": %s, "pid": "Spans", "tid": 0, '
            '"args": {"sort_index": 536870912}}' % us(t0 - 5000),
            '{"ph": "i", "s": "g", "name": "Iteration Start: PyTorch Profiler", "pid": "Traces",'
            ' "tid": "Trace PyTorch Profiler", "ts": %s}' % us(t0 - 5000),
            '{"ph": "i", "s": "g", "name": "Record Window End", "pid": "", "tid": "", "ts": %s}'
            % us(max(t1, self.gpu_last) + 20000),
        ]
        self.counts["py"] = self.counts.get("py", 0) + 2
        return ev


def header(rank, world, base_ns, trace_name):
    ndev = max(1, min(world, 8))
    props = ",\n    ".join(DEVICE_PROPS % i for i in range(ndev))
    ranks = list(range(world))
    dist = ('{"rank": %d, "backend": "nccl", "world_size": %d, "pg_count": 1, "pg_config": '
            '[{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl", '
            '"pg_size": %d, "ranks": %s}], "nccl_version": "2.21.5"}'
            % (rank, world, world, json.dumps(ranks if world <= 64 else ranks[:64])))
    return ('{\n  "schemaVersion": 1,\n  "deviceProperties": [\n    %s\n  ],\n'
            '  "distributedInfo": %s,\n'
            '  "record_shapes": 1,\n  "with_stack": 1,\n'
            '  "cupti_version": 24,\n  "cuda_runtime_version": 12040,\n'
            '  "cuda_driver_version": 12040,\n  "trace_id": "%032X",\n'
            '  "host_name": "node%d",\n'
            '  "displayTimeUnit": "ms",\n  "baseTimeNanoseconds": %d,\n  "traceEvents": [\n'
            % (props, dist, (base_ns * 2654435761 + rank) & ((1 << 128) - 1), rank // 8,
               base_ns))


def calibrate(layers, world, steps, target):
    """Micro-batches per step so that `steps` steps fill about `target` bytes."""
    g = RankTrace(0, world, 0, layers, 1.0, 1.0, 2_000_000_000)
    g.out = []
    g.step()
    g.out = []
    g.step()
    per_mb = len(",\n".join(g.out)) + 2
    return max(1, int(round(target / float(steps * per_mb))))


def write_rank(path, size_mb, rank, world, seed, layers, use_gzip, speed, slow_speed,
               level=1, quiet=False, steps=None, micro_batches=None):
    """Writes one rank's trace to path (via path + '.tmp'); returns its summary dict.
    steps=None: one micro-batch per step (unless micro_batches), as many steps as fill size_mb;
    steps=S: exactly S steps, micro-batches per step chosen to fill about size_mb."""
    t_start = time.perf_counter()
    target = int(size_mb * MB)
    if micro_batches is None:
        micro_batches = calibrate(layers, world, steps, target) if steps else 1
    base_ns = 1_750_000_000_000_000_000 + (seed % 1000) * 1_000_000_000
    start_ts = 2_000_000_000 + rank * 137_000  # ns after baseTimeNanoseconds
    tmp = path + ".tmp"
    if use_gzip:
        f = gzip.GzipFile(filename=os.path.basename(path)[:-3] if path.endswith(".gz") else "",
                          mode="wb", compresslevel=level, mtime=0,
                          fileobj=open(tmp, "wb", buffering=1 << 20))
    else:
        f = open(tmp, "wb", buffering=1 << 22)
    raw = f.fileobj if use_gzip else f
    acc = {"written": 0, "events": 0}

    def sink(events, first=False):
        if not events:
            return
        chunk = ("" if first else ",\n") + ",\n".join(events)
        f.write(chunk.encode())
        acc["written"] += len(chunk)
        acc["events"] += len(events)

    gen = RankTrace(rank, world, seed, layers, speed, slow_speed, start_ts, micro_batches, sink)
    try:
        head = header(rank, world, base_ns, path)
        f.write(head.encode())
        acc["written"] += len(head)
        meta = gen.meta()
        sink(meta, first=True)
        # the tail (~1.5 kB) and the closing lines come after the steps
        step_bytes = 0
        while True:
            if steps:
                if gen.step_no >= steps:
                    break
            elif gen.step_no and acc["written"] + step_bytes // 2 >= target - 2048:
                break
            before = acc["written"]
            gen.out = []
            gen.step()
            sink(gen.out)
            gen.out = None
            step_bytes = acc["written"] - before
        tail = gen.tail()
        sink(tail)
        end = "\n  ],\n  \"traceName\": %s\n}\n" % jstr(path)
        f.write(end.encode())
        acc["written"] += len(end)
        written, n_events = acc["written"], acc["events"]
        f.close()
        if use_gzip:
            raw.close()
    except BaseException:
        f.close()
        if use_gzip:
            raw.close()
        os.unlink(tmp)
        raise
    os.replace(tmp, path)
    secs = time.perf_counter() - t_start
    fsize = os.path.getsize(path)
    gpu_span = gen.gpu_last - gen.gpu_first
    summary = {
        "path": path, "rank": rank, "world_size": world, "seed": seed, "layers": layers,
        "speed": speed, "gzip": bool(use_gzip), "json_bytes": written, "file_bytes": fsize,
        "events": n_events, "seconds": round(secs, 3),
        "steps": gen.step_no, "micro_batches_per_step": micro_batches,
        "events_by_kind": {"meta": len(meta), "cpu_op/user_annotation": gen.counts.get("cpu", 0),
                           "python_function": gen.counts.get("py", 0),
                           "kernel launches (4 events each)": gen.counts.get("launch", 0),
                           "memcpy (4 events each)": gen.counts.get("memcpy", 0),
                           "runtime without GPU work": gen.counts.get("runtime", 0),
                           "tail (span, instants)": 4},
        "kernels": {k: {"count": v[0], "total_ns": v[1]}
                    for k, v in sorted(gen.kstats.items(), key=lambda kv: -kv[1][1])},
        "gpu_busy_ns_by_stream": {str(s): b for s, b in gen.busy.items()},
        "gpu_first_ts_ns": gen.gpu_first, "gpu_last_end_ns": gen.gpu_last,
        "gpu_span_ns": gpu_span,
        "cpu_first_ts_ns": gen.t_first, "cpu_last_ns": gen.t,
        "base_time_ns": base_ns,
    }
    if not quiet:
        print("wrote %s: %.1f MB file (%.1f MB JSON), %d events, %d steps, %.1f s (%.0f events/s)"
              % (path, fsize / MB, written / MB, n_events, gen.step_no, secs, n_events / secs)
              + ("" if micro_batches == 1 else " (%d micro-batches per step)" % micro_batches),
              flush=True)
    return summary


def rank_speed(rank, world):
    """Rank world-1 is 10% slower than the others (a straggler); others within ±1%."""
    if world > 1 and rank == world - 1:
        return 1.10
    return 1.0 + 0.01 * ((rank * 37) % 7 - 3) / 3.0 if world > 1 else 1.0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size-mb", type=float, required=True,
                   help="uncompressed JSON size of each file, MiB")
    p.add_argument("--out", help="output path (one rank)")
    p.add_argument("--ranks", type=int, default=1, help="with --out-dir: how many rank files")
    p.add_argument("--out-dir", help="write rank{r}.pt.trace.json[.gz] for each rank here")
    p.add_argument("--rank", type=int, default=0, help="with --out: this file's rank")
    p.add_argument("--world-size", type=int, default=None,
                   help="with --out: world size written in distributedInfo (default: --ranks)")
    p.add_argument("--gzip", action="store_true", help="write gzip (level --level)")
    p.add_argument("--level", type=int, default=1, help="gzip level (default 1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--layers", type=int, default=12, help="transformer blocks (default 12)")
    p.add_argument("--steps", type=int, default=None,
                   help="exactly this many ProfilerSteps, each with as many micro-batches "
                        "(gradient accumulation) as fill --size-mb (default: one micro-batch "
                        "per step, as many steps as fill it)")
    p.add_argument("--micro-batches", type=int, default=None,
                   help="micro-batches per step (default 1, or computed from --steps)")
    p.add_argument("--summary", help="write ground truth (counts, kernel totals) as JSON here")
    a = p.parse_args(argv)
    if bool(a.out) == bool(a.out_dir):
        p.error("give exactly one of --out and --out-dir")
    world = a.world_size or a.ranks
    slow = rank_speed(world - 1, world)
    summaries = []
    if a.out:
        out = a.out
        if a.gzip and not out.endswith(".gz"):
            out += ".gz"
        d = os.path.dirname(os.path.abspath(out))
        os.makedirs(d, exist_ok=True)
        summaries.append(write_rank(out, a.size_mb, a.rank, world, a.seed, a.layers, a.gzip,
                                    rank_speed(a.rank, world), slow, a.level,
                                    steps=a.steps, micro_batches=a.micro_batches))
    else:
        os.makedirs(a.out_dir, exist_ok=True)
        for r in range(a.ranks):
            path = os.path.join(a.out_dir, "rank%d.pt.trace.json%s" % (r, ".gz" if a.gzip else ""))
            summaries.append(write_rank(path, a.size_mb, r, world, a.seed, a.layers, a.gzip,
                                        rank_speed(r, world), slow, a.level,
                                        steps=a.steps, micro_batches=a.micro_batches))
    if a.summary:
        with open(a.summary, "w") as f:
            json.dump(summaries if len(summaries) > 1 else summaries[0], f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env bash
# The tests that run on a GPU (they skip without one), in one pytest command: run on a
# machine with CUDA from the repository root, `bash benchmarks/gpu_tests.sh [pytest options]`.
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHONPATH=. python3 -m pytest -q -p no:cacheprovider -W ignore "$@" \
    tests/memory tests/test_cuda_counts.py tests/test_devices.py tests/test_legacy_timing.py \
    tests/timing/test_compiled.py tests/timing/test_cuda.py tests/timing/test_kernel_clock_cuda.py \
    tests/timing/test_kernel_results.py tests/timing/test_prime.py tests/timing/test_ranges.py \
    tests/timing/test_backward.py tests/timing/test_live.py tests/timing/test_kernel_clock_cpu.py \
    tests/timing/test_profile.py tests/timing/test_latency.py tests/timing/compiled \
    tests/timing/test_forward.py tests/timing/test_call_records.py tests/prediction \
    tests/efficiency/test_peaks.py tests/efficiency/test_traffic.py tests/efficiency/test_roofline.py \
    tests/operators/test_attention.py tests/operators/test_norm.py tests/operators/test_recurrent.py \
    tests/operators/test_quantized.py tests/operators/test_decomposition.py \
    tests/distributed/test_gather.py tests/distributed/test_gathered.py tests/test_backward.py \
    tests/test_runner.py tests/test_state.py tests/test_state_between_steps.py tests/test_counting.py \
    tests/test_counting_output_bytes.py tests/test_core.py tests/test_autograd_nodes.py \
    tests/test_vmapped.py tests/test_records.py tests/test_collect.py tests/test_meta_stand_ins.py \
    tests/test_registry.py tests/test_dispatch.py tests/test_fp32_precision.py tests/test_inputs.py \
    tests/test_packed.py tests/export/test_shared_params.py tests/export/test_merge_inputs.py \
    tests/export/test_table_notes.py tests/export/test_frame.py tests/export/test_diff.py \
    tests/integrations/test_window.py tests/formulas tests/language/test_cache.py

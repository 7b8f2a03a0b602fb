"""The device peak table: lookups, detection by name, overrides and the measured mode."""

from __future__ import annotations

import pytest
import torch

from moduleprofiler.efficiency import (
    DEVICE_PEAKS,
    AmbiguousDeviceError,
    DevicePeaks,
    UnknownDeviceError,
    device_peaks,
    match_device,
    measure_peaks,
)


@pytest.mark.parametrize(("reported", "table"), [
    ("NVIDIA H100 80GB HBM3", "H100 SXM"),
    ("NVIDIA H100 PCIe", "H100 PCIe"),
    ("NVIDIA H100 NVL", "H100 NVL"),
    ("NVIDIA H200", "H200"),
    ("NVIDIA B200", "B200"),
    ("NVIDIA A100-SXM4-40GB", "A100 40GB"),
    ("NVIDIA A100-PCIE-40GB", "A100 40GB"),
    ("NVIDIA A100-SXM4-80GB", "A100 80GB SXM"),
    ("NVIDIA A100 80GB PCIe", "A100 80GB PCIe"),
    ("NVIDIA L40S", "L40S"),
    ("NVIDIA L4", "L4"),
    ("NVIDIA A10", "A10"),
    ("AMD Instinct MI300X", "MI300X"),
    ("Tesla V100-SXM2-32GB", "V100 SXM2"),
    ("Tesla V100-PCIE-16GB", "V100 PCIe"),
    ("Tesla T4", "T4"),
    ("NVIDIA RTX A6000", "RTX A6000"),
    ("NVIDIA GeForce RTX 3090", "RTX 3090"),
    ("NVIDIA GeForce RTX 4090", "RTX 4090"),
    # cards of another name the table does not hold: not taken for the one they contain
    ("NVIDIA H200 NVL", None),  # the H200's NVL card: lower clocks than the table's SXM
    ("NVIDIA GH200 480GB", None),  # Grace Hopper: not an H200
    ("NVIDIA GB200", None),  # Grace Blackwell: not a B200
    ("A10G", None),
    ("Tesla V100S-PCIE-32GB", None),  # the V100S: faster clocks and memory than the V100
    ("NVIDIA GeForce RTX 4090 D", None),  # fewer SMs than the 4090
    ("NVIDIA GeForce RTX 4090 Laptop GPU", None),
    ("NVIDIA GeForce RTX 3090 Ti", None),
    ("NVIDIA RTX 6000 Ada Generation", None),  # not the RTX A6000
])
def test_device_names_as_cuda_reports_them(reported, table):
    assert match_device(reported) == table


@pytest.mark.parametrize(("typed", "cards"), [
    ("H100", ["H100 SXM", "H100 PCIe", "H100 NVL"]),
    ("nvidia h100 80GB", ["H100 SXM", "H100 PCIe"]),  # the NVL card has 94GB
    ("A100", ["A100 40GB", "A100 80GB SXM", "A100 80GB PCIe"]),
    ("A100 80GB", ["A100 80GB SXM", "A100 80GB PCIe"]),
    ("A100 SXM", ["A100 40GB", "A100 80GB SXM"]),
    ("A100 PCIe", ["A100 40GB", "A100 80GB PCIe"]),
    ("V100", ["V100 SXM2", "V100 PCIe"]),
])
def test_a_name_several_cards_answer_to_is_refused(typed, cards):
    # "H100" is three cards whose peaks differ (HBM bandwidth 3350, 2000 and 3900 GB/s):
    # taking one silently moved a prediction by up to 3350 / 2000 = 1.7x
    with pytest.raises(AmbiguousDeviceError, match="device") as error:
        device_peaks(typed)
    assert error.value.candidates == tuple(cards)
    assert all(card in str(error.value) for card in cards)
    with pytest.raises(AmbiguousDeviceError):
        match_device(typed)


@pytest.mark.parametrize(("typed", "table"), [
    ("h100 sxm", "H100 SXM"), ("H100 SXM5", "H100 SXM"), ("H100 PCIe", "H100 PCIe"),
    ("H100 NVL", "H100 NVL"), ("H200", "H200"), ("A100 40GB", "A100 40GB"),
    ("A100 80GB SXM", "A100 80GB SXM"), ("A100 PCIe 80GB", "A100 80GB PCIe"),
])
def test_a_name_that_says_the_card_is_taken(typed, table):
    assert device_peaks(typed).name == table


@pytest.mark.parametrize(("typed", "close"), [
    # a word no card of the chip is named with makes it another device: "H200 XYZ" was
    # taken for the H200 (its peaks, its calibration), "RTX 4090 Ti" for the RTX 4090
    ("H200 XYZ", ("H200",)),
    ("B200 XYZ", ("B200",)),
    ("T4 garbage", ("T4",)),
    ("foo H100 SXM bar", ("H100 SXM",)),  # spelled like it: listed, not taken
    ("H100 SXM5 94GB", ("H100 SXM", "H100 PCIe", "H100 NVL")),  # no card of the table
    ("L40", ("L40S", "L4")),
    ("A10G", ("A10", "A100 40GB")),
    ("Voodoo 3", ()),
])
def test_a_name_of_no_card_is_refused_with_the_close_ones(typed, close):
    assert match_device(typed) is None
    with pytest.raises(UnknownDeviceError, match=f"device {typed!r} is not in the peak "
                                                  "table") as error:
        device_peaks(typed)
    assert error.value.candidates == close and isinstance(error.value, ValueError)
    assert f"close: {', '.join(close)};" in str(error.value) if close else \
        "close:" not in str(error.value)


@pytest.mark.parametrize(("typed", "table"), [
    # case, spaces, dashes, vendor words and memory suffixes are the same name
    ("nvidia  h200", "H200"), ("H200 141GB HBM3e", "H200"), ("NVIDIA H100 80 GB HBM3", "H100 SXM"),
    ("h100-pcie", "H100 PCIe"), ("NVIDIA A100 SXM4 80GB", "A100 80GB SXM"),
    ("AMD Instinct MI300X VF", "MI300X"), ("RTX 4090 GPU", "RTX 4090"),
])
def test_a_name_is_read_word_by_word(typed, table):
    assert match_device(typed) == table


def test_every_card_of_the_peak_table_has_one_name_entry():
    from moduleprofiler.efficiency.device_names import CARDS

    assert [card.table_name for card in CARDS] == list(DEVICE_PEAKS)
    for name in DEVICE_PEAKS:  # each table name names its own card alone
        assert match_device(name) == name
        assert match_device(name.lower()) == name


def test_peak_lookup_by_dtype():
    h100 = device_peaks("NVIDIA H100 80GB HBM3")
    assert h100.flops_per_s(torch.bfloat16) == 989.4e12
    assert h100.flops_per_s("bf16", sparse=True) == 2 * 989.4e12
    assert h100.flops_per_s("fp32", sparse=True) is None  # no sparse FP32 rate
    assert h100.bytes_per_s == 3350e9
    assert DEVICE_PEAKS["A100 40GB"].flops_per_s("fp8") is None  # no FP8 on Ampere: unknown
    assert DEVICE_PEAKS["L4"].flops_per_s(torch.int64) is None


def test_a_dtype_name_of_no_dtype_is_refused_not_read_as_no_peak():
    h100 = device_peaks("NVIDIA H100 80GB HBM3")
    assert h100.flops_per_s("bfloat16") == 989.4e12  # torch's name
    assert h100.flops_per_s("torch.int64") is None  # a dtype without a peak
    with pytest.raises(ValueError, match="'bf61' is no dtype"):
        h100.flops_per_s("bf61")


def test_overrides_merge_into_a_copy():
    custom = device_peaks("H100 SXM", dense_tflops={"bf16": 800}, bandwidth_gbs=3000)
    assert custom.flops_per_s("bf16") == 800e12
    assert custom.flops_per_s("fp16") == 989.4e12  # the rest of the table kept
    assert custom.bytes_per_s == 3000e9
    assert DEVICE_PEAKS["H100 SXM"].flops_per_s("bf16") == 989.4e12  # the table untouched
    assert device_peaks(custom) is custom


def test_bad_peaks_are_refused():
    with pytest.raises(ValueError, match="not in the peak table"):
        device_peaks("Voodoo 3")
    with pytest.raises(ValueError, match="no field"):
        device_peaks("L4", bandwith_gbs=1)
    with pytest.raises(ValueError, match="unknown dtype"):
        DevicePeaks("x", {"fp128": 1.0}, 10)
    with pytest.raises(ValueError, match="positive"):
        DevicePeaks("x", {"fp32": 0.0}, 10)


def test_a_rate_that_is_no_number_is_named():
    # a string (read from a config file) failed as "'>' not supported between 'str' and 'int'"
    with pytest.raises(TypeError, match="bandwidth_gbs must be a number, got str '3000'"):
        device_peaks("H100 SXM", bandwidth_gbs="3000")
    with pytest.raises(TypeError, match="bf16 must be a number or None, got str"):
        device_peaks("H100 SXM", dense_tflops={"bf16": "800"})
    with pytest.raises(TypeError, match="launch_us must be a number"):
        DevicePeaks("x", {"fp32": 1.0}, 10, launch_us=True)


def test_measured_mode_on_the_cpu():
    peaks = measure_peaks("cpu", dtypes=("fp32",), matmul_size=128, copy_bytes=2**20, reps=2)
    assert peaks.source == "measured"
    assert peaks.flops_per_s("fp32") > 0 and peaks.bytes_per_s > 0 and peaks.launch_us > 0
    assert peaks.flops_per_s("bf16") is None  # not measured: unknown
    with pytest.raises(ValueError, match="dtypes"):
        measure_peaks("cpu", dtypes=("fp4",))


def test_one_dtype_name_is_one_dtype_not_its_letters():
    # dtypes="fp32" was read letter by letter: "dtypes must be among ..., got ['f', 'p', '3',
    # '2']"
    peaks = measure_peaks("cpu", dtypes="fp32", matmul_size=64, copy_bytes=2**16, reps=1)
    assert peaks.flops_per_s("fp32") > 0 and peaks.flops_per_s("bf16") is None


def test_cards_without_bf16_or_tf32_tensor_cores_leave_those_rates_unknown():
    # Volta and Turing: fp16 tensor cores only, no bf16, no TF32, no 2:4 sparsity
    for name, fp16 in (("V100 SXM2", 125e12), ("T4", 65e12)):
        peaks = DEVICE_PEAKS[name]
        assert peaks.flops_per_s("fp16") == fp16
        assert peaks.flops_per_s("bf16") is None and peaks.flops_per_s("tf32") is None
        assert peaks.flops_per_s("fp16", sparse=True) is None
    # a GeForce card's tensor cores with FP32 accumulation, as PyTorch's matmuls run
    assert DEVICE_PEAKS["RTX 4090"].flops_per_s(torch.bfloat16) == 165.2e12

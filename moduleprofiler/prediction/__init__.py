"""Latency prediction for a GPU you do not have: per-operator device and host models,
calibrated by micro-benchmarks (:func:`calibrate`)."""

from moduleprofiler.prediction.calibrate import calibrate, measure_host
from moduleprofiler.prediction.calibration import Calibration, HostCosts, shipped_calibrations

__all__ = ["Calibration", "HostCosts", "calibrate", "measure_host", "shipped_calibrations"]

"""Latency prediction for a GPU you do not have: per-operator device and host models,
calibrated by micro-benchmarks (:func:`calibrate`)."""

from moduleprofiler.prediction.calibrate import calibrate, measure_host
from moduleprofiler.prediction.calibration import Calibration, HostCosts, shipped_calibrations
from moduleprofiler.prediction.compare import plot_prediction

__all__ = ["Calibration", "HostCosts", "calibrate", "measure_host", "plot_prediction",
           "shipped_calibrations"]

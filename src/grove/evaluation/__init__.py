"""Evaluation: accuracy statistics (Wilson intervals) and held-out evaluation."""

from grove.evaluation.stats import AccuracyReport, wilson_interval

__all__ = ["AccuracyReport", "wilson_interval"]

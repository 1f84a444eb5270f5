"""Evaluation: accuracy statistics (Wilson intervals, sampled accuracy and pass@k) and held-out evaluation."""

from grove.evaluation.stats import AccuracyReport, SampledReport, pass_at_k, wilson_interval

__all__ = ["AccuracyReport", "SampledReport", "pass_at_k", "wilson_interval"]

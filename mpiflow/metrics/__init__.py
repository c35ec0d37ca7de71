"""``mf.metrics``: TF1's streaming metrics, as ``(value, update_op)`` pairs: the running
means, counts and ratios (``streaming``) and the counts at a list of thresholds with the
curves made of them (``at_thresholds``: ``auc``), and the sums per class of class-id
predictions (``per_class``: ``mean_iou``, ``mean_per_class_accuracy``), and precision
and recall of the k classes predicted per example (``at_k``)."""

from mpiflow import unsupported
from mpiflow.metrics.at_k import (
    precision_at_k,
    precision_at_top_k,
    recall_at_k,
    recall_at_top_k,
)
from mpiflow.metrics.at_thresholds import (
    auc,
    false_negatives_at_thresholds,
    false_positives_at_thresholds,
    precision_at_thresholds,
    recall_at_thresholds,
    true_negatives_at_thresholds,
    true_positives_at_thresholds,
)
from mpiflow.metrics.per_class import mean_iou, mean_per_class_accuracy
from mpiflow.metrics.streaming import (
    accuracy,
    false_negatives,
    false_positives,
    mean,
    mean_absolute_error,
    mean_cosine_distance,
    mean_relative_error,
    mean_squared_error,
    metric_variable,
    percentage_below,
    precision,
    recall,
    root_mean_squared_error,
    true_negatives,
    true_positives,
)

__all__ = [
    "accuracy", "auc", "false_negatives", "false_negatives_at_thresholds",
    "false_positives", "false_positives_at_thresholds", "mean", "mean_absolute_error",
    "mean_cosine_distance", "mean_iou", "mean_per_class_accuracy",
    "mean_relative_error", "mean_squared_error", "metric_variable", "percentage_below",
    "precision", "precision_at_k", "precision_at_thresholds", "precision_at_top_k",
    "recall", "recall_at_k", "recall_at_thresholds", "recall_at_top_k",
    "root_mean_squared_error", "true_negatives", "true_negatives_at_thresholds",
    "true_positives", "true_positives_at_thresholds",
]

__getattr__ = unsupported.namespace_getattr(__name__, "tf.metrics")

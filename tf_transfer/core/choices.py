"""Choices several commands share: numeric precision, distribution strategy, learning-rate schedule, XLA."""

DISTRIBUTIONS = ("default", "mirrored", "multi_worker", "tpu")
LR_SCHEDULES = ("constant", "linear")
PRECISIONS = ("float32", "mixed_bfloat16", "mixed_float16")
JIT_COMPILE = ("auto", "true", "false")

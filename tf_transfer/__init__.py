"""tf-transfer: how much of BERT to train, measured.

The library takes plain arguments; only the entry modules (`tf_transfer.glue`, ...) read absl flags.
"""

__version__ = "0.1.0"

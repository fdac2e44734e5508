"""Training methods: what of a backbone trains. One module per method (`freeze`, `lora`, `bitfit`; the methods decided
while training, with everything of theirs, in the package `adaptive`), each registered in `registry`, the only place
that lists them; `apply` sets a method on a backbone.

Example:

>>> from tf_transfer.models import methods
>>> methods.names()[0]  # the default, first of the registry's order
'freeze'
>>> methods.apply(backbone, "lora", trainable_layers=2, lora_rank=8)  # doctest: +SKIP
"""

# Each registers itself; this order is the registry's (--method's help, the settings' flags and records).
from tf_transfer.models.methods import freeze  # noqa: F401,I001
from tf_transfer.models.methods import lora  # noqa: F401
from tf_transfer.models.methods import bitfit  # noqa: F401
from tf_transfer.models.methods.adaptive import autofreeze  # noqa: F401
from tf_transfer.models.methods.adaptive import freezeout  # noqa: F401
from tf_transfer.models.methods.registry import (DEFAULT, Method, apply, get, name_of, names, of,  # noqa: F401
                                                 register, unregister)

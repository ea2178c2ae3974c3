"""tinykg_train: compressed-activation layers, KGNN models, trainer, evaluation, tracking, sweeps."""

__version__ = "0.1.0"

from tinykg_train.allocator import request_huge_pages

# before this process makes its first CPU tensor: torch reads the switch once (see allocator)
request_huge_pages()

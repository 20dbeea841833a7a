"""Shared test setup.

torch runs single-threaded: the interpreters multiply tiny tiles, where an OpenMP pool only adds contention
(two orders of magnitude slower on a busy two-core machine).
"""

import torch

torch.set_num_threads(1)

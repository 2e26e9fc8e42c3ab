"""Whether this machine has a GPU, and whether a failure means the code needed one.

A function that asks for a GPU runs on the CPU here when there is none. If it then
fails the way CUDA code fails without a device (torch's "no NVIDIA driver", an
`assert torch.cuda.is_available()`, a CUDA runtime error), the input ends as
"needs a GPU": the run's outcome is that, never a wrong answer or a plain failure.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import traceback

# Inside identifiers too (torch_cuda_is_available, /dev/nvidia0, has_gpu), since asserts
# and helper names spell it that way; only asked of failures of functions that wanted a GPU.
_CUDA_WORDS = re.compile(r"cuda|nvidia|cudnn|nccl|nvml|(?<![a-z])gpus?(?![a-z])", re.I)


@functools.cache
def host_has_gpu() -> bool:
    if os.environ.get("CRUCIBLE_MODALRT_NO_GPU") == "1":
        return False
    return os.path.exists("/dev/nvidia0") or shutil.which("nvidia-smi") is not None


def says_cuda(text: str) -> bool:
    """The text (a failure's message or traceback) speaks of CUDA, a GPU or its driver."""
    return bool(_CUDA_WORDS.search(text))


def needs_gpu(exc: BaseException) -> bool:
    """The exception says CUDA was needed: in its type, its message, or (for an assert)
    in the source line that failed."""
    text = f"{type(exc).__module__}.{type(exc).__name__}: {exc}"
    if _CUDA_WORDS.search(text):
        return True
    if isinstance(exc, AssertionError) and exc.__traceback__ is not None:
        last = traceback.extract_tb(exc.__traceback__)[-1]
        return bool(last.line and _CUDA_WORDS.search(last.line))
    return False

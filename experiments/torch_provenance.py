"""Where a GPU benchmark ran: device, driver and library versions, date and command (torch's view)."""

from __future__ import annotations

import datetime
import platform
import subprocess


def torch_gpu_provenance(command: str, **extra) -> dict:
    """The provenance every results file carries; `extra` adds what a benchmark wants to say of itself."""
    import torch

    try:
        driver = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        driver = "unknown"
    return {
        "gpu": torch.cuda.get_device_name(),
        "sm_count": torch.cuda.get_device_properties(0).multi_processor_count,
        "driver": driver,
        "cuda": torch.version.cuda,
        "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version(),
        "python": platform.python_version(),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": command,
        **extra,
    }

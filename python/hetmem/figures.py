"""What the reports share: matplotlib figures as PNG bytes, and writing them beside a report."""

from __future__ import annotations

import io
import os
from pathlib import Path


def png(fig) -> bytes:
    """The figure as PNG bytes; the figure is closed."""
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def write_images(out_dir: str, images: dict[str, bytes]) -> list[str]:
    """Writes each image into out_dir (created if needed); returns the paths written."""
    os.makedirs(out_dir, exist_ok=True)
    written = []
    for name, data in images.items():
        Path(out_dir, name).write_bytes(data)
        written.append(os.path.join(out_dir, name))
    return written

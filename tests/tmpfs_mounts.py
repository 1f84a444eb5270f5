"""Whether the tests may mount a small tmpfs (root with mount rights): the full-disk tests need one."""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path


def can_mount() -> bool:
    if os.geteuid() != 0:
        return False
    probe = Path(f"/tmp/grove-mount-probe-{uuid.uuid4().hex}")
    probe.mkdir()
    try:
        ok = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(probe)],
                            capture_output=True).returncode == 0
        if ok:
            subprocess.run(["umount", str(probe)], check=True)
        return ok
    finally:
        probe.rmdir()

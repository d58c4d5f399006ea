"""Skip the GPU-stage tests where torch (the ``hylo`` extra) is not installed."""

import importlib.util

collect_ignore_glob = [] if importlib.util.find_spec("torch") else ["test_*.py"]

"""When tsched was first imported: ``tsched/__init__.py`` imports this module before anything
else, so :data:`STARTED` is taken before numpy, scipy and the model files load (the command
line's default time budget counts from here: start-up and reading a large file are part of a
command's time)."""

from __future__ import annotations

import time

#: ``time.perf_counter()`` at tsched's first import.
STARTED = time.perf_counter()

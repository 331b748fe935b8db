"""``python -m tsched`` runs the command line."""

from __future__ import annotations

from tsched.cli import main

raise SystemExit(main())

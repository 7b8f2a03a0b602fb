"""``python -m moduleprofiler``: the command line (see ``moduleprofiler --help``)."""

from moduleprofiler.cli import main

raise SystemExit(main())

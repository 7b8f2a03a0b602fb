"""``python -m moduleprofiler``: the command line (see ``moduleprofiler --help``)."""

from moduleprofiler.cli_options import main

raise SystemExit(main())

"""`python -m gateway.cli`: the `switchyard` console script."""

import sys

from gateway.cli.main import main

sys.exit(main())

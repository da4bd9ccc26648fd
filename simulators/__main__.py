"""`python -m simulators vllm --port P ...`: the same as `switchyard simulate ...`
without importing the gateway's CLI (used by `simulators.testing`)."""

import sys

from simulators.cli import main

sys.exit(main())

"""`python -m stepwise_cli`."""

import sys

from stepwise_cli.app import main

sys.exit(main())

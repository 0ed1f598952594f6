"""`python -m stepwise.cli`."""

import sys

from stepwise.cli.app import main

sys.exit(main())

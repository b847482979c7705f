"""`python -m app serve ...` is the same as `pt2serve serve ...`."""

import sys

from .cli import main

sys.exit(main())

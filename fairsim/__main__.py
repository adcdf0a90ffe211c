"""``python -m fairsim`` = the ``fairsim`` command."""

import sys

from fairsim.cli import main

sys.exit(main())

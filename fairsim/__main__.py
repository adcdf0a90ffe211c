"""``python -m fairsim`` = the ``fairsim`` command."""

import sys

from fairsim.cli import program

if __name__ == "__main__":
    sys.exit(program())

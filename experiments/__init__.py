"""The Fairway paper's experiments E1-E4 in the simulator (see README.md in this folder)."""

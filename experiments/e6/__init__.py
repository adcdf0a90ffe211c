"""E6: prefill ordering behind a router (fleets); the shell scripts here run it (docs/fleets.md)."""

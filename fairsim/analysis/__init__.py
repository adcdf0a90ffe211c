"""Trace analysis for serving teams: queue work spread, prefix reuse, offered load, windows."""

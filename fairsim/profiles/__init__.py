"""Shipped cost-model profiles (JSON) and the script that builds the prior one."""

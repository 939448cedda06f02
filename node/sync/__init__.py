"""Mesh sync: receive, verify and store peers' signed journals; push our own to every peer."""

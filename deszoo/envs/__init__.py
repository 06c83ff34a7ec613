"""Scenarios. Import a versioned module, e.g. ``from deszoo.envs import jobshop_v0``."""

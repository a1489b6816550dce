"""Calibrate on the machine at hand and verify against real training steps."""

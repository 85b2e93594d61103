"""Devices: where a runner executes. One transport per file, one base class."""

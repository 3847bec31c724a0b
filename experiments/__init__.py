"""Experiments: functions returning a complete config; variants call their parent and edit it."""

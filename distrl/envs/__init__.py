"""Environments: gymnasium factories for actors, toy envs for tests, the torch-native batched suite."""
